//! The control plane's chart (charts/wsync-control-plane, #41), through Helm v4's SDK
//! (hack/helm.sh): it lints; rendered for this cluster as `helm install --dry-run=server`
//! renders it, its defaults and its other shapes pass the apiserver's validation; it refuses
//! SQLite with two replicas in words; every variable it sets is one of the control plane's
//! flags, and a control plane run with the rendered environment serves; its alerts pass their
//! promtool tests and name only metrics a control plane exports.

use crate::helm_chart::{by_name, helm};
use crate::support::*;
use serde_json::{Value, json};
use std::process::Command;

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/wsync-control-plane");
const NAMESPACE: &str = "wsync-control-plane-chart";

fn dry_run(env: &TestEnv, values: &Value) -> String {
    let rendered = helm(&["render-for-cluster", CHART, &values.to_string(), NAMESPACE]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, &rendered).expect("write");
    let checked = kubectl_ok(env, &["-n", NAMESPACE, "apply", "--dry-run=server", "-f", path_str(&file)]);
    assert!(checked.contains("deployment.apps/wsync-control-plane created (server dry run)"), "{checked}");
    rendered
}

#[test]
fn the_chart_lints_and_its_shapes_pass_a_servers_validation() {
    let env = env();
    helm(&["lint", CHART, "{}"]);
    let _ = kubectl(env, &["create", "namespace", NAMESPACE]);
    // The defaults: two replicas on PostgreSQL, a PDB (policy/v1beta1 on this 1.20 cluster),
    // an Ingress, a NetworkPolicy.
    let defaults = by_name(&dry_run(env, &json!({})));
    let kinds: Vec<&str> = defaults.keys().map(String::as_str).collect();
    assert_eq!(
        kinds,
        [
            "Deployment/wsync-control-plane",
            "Ingress/wsync-control-plane",
            "NetworkPolicy/wsync-control-plane",
            "PodDisruptionBudget/wsync-control-plane",
            "Service/wsync-control-plane",
            "ServiceAccount/wsync-control-plane"
        ]
    );
    assert_eq!(defaults["PodDisruptionBudget/wsync-control-plane"]["apiVersion"], "policy/v1beta1");
    let pod = &defaults["Deployment/wsync-control-plane"]["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["automountServiceAccountToken"], false, "it never talks to the apiserver");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/healthz");
    // SQLite on one replica, with the backup CronJob (batch/v1beta1 here) and its claims.
    let sqlite = json!({"replicas": 1, "database": {"sqlite": {"enabled": true}}, "backup": {"enabled": true}});
    let sqlite = by_name(&dry_run(env, &sqlite));
    assert_eq!(sqlite["CronJob/wsync-control-plane-backup"]["apiVersion"], "batch/v1beta1");
    assert!(!sqlite.contains_key("PodDisruptionBudget/wsync-control-plane"), "one replica: no PDB to block drains");
    let job = &sqlite["CronJob/wsync-control-plane-backup"]["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    let args = job["containers"][0]["args"].as_array().expect("args");
    assert_eq!(args[..3], [json!("control-plane"), json!("backup"), json!("--into-dir")]);
    // PostgreSQL's backup, the secrets from values, OIDC and a workspaces domain.
    let full = json!({"database": {"url": "postgres://wsync:pw@db/wsync"}, "adminToken": {"value": "a".repeat(40)},
                      "forwardSecret": {"value": "f".repeat(40)}, "workspacesDomain": "ws.example.com",
                      "backup": {"enabled": true}, "ingress": {"tls": {"secretName": "wsync-tls"}},
                      "oidc": {"issuer": "https://idp.example.com", "clientId": "wsync", "clientSecret": {"value": "s"}}});
    let full = by_name(&dry_run(env, &full));
    let rules = &full["Ingress/wsync-control-plane"]["spec"]["rules"];
    assert_eq!(rules[1]["host"], "*.ws.example.com");
    assert_eq!(full["Ingress/wsync-control-plane"]["spec"]["tls"][0]["hosts"][1], "*.ws.example.com");
    for secret in ["database", "admin", "forward", "oidc"] {
        assert!(full.contains_key(&format!("Secret/wsync-control-plane-{secret}")), "{secret}");
    }
}

#[test]
fn the_chart_refuses_sqlite_with_two_replicas_in_words() {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/helm.sh"))
        .args(["render", CHART, r#"{"database": {"sqlite": {"enabled": true}}}"#, NAMESPACE])
        .output()
        .expect("hack/helm.sh");
    assert!(!out.status.success(), "rendered");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("SQLite is one process's database; set replicas: 1, or use PostgreSQL"), "{said}");
}

/// The rendered container's environment, its secret files written out, given to the real
/// control plane: each variable is one it reads, and with them it serves.
#[test]
fn the_rendered_environment_is_the_control_planes_and_it_serves_with_it() {
    let (admin_token, metrics_token) = (secret_token("admin"), secret_token("metrics"));
    let values = json!({"replicas": 1, "database": {"sqlite": {"enabled": true}}, "adminToken": {"value": admin_token},
                        "metrics": {"enabled": true, "token": {"value": metrics_token}}, "workspacesDomain": "ws.example.com",
                        "allowedHosts": ["127.0.0.1"]});
    let rendered = by_name(&helm(&["render", CHART, &values.to_string(), NAMESPACE]));
    let container = &rendered["Deployment/wsync-control-plane"]["spec"]["template"]["spec"]["containers"][0];
    let help = String::from_utf8_lossy(
        &Command::new(env!("CARGO_BIN_EXE_wsync")).args(["control-plane", "--help"]).output().expect("wsync").stdout,
    )
    .to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_wsync"));
    command.args(container["args"].as_array().expect("args").iter().map(|a| a.as_str().expect("text")));
    for variable in container["env"].as_array().expect("env") {
        let name = variable["name"].as_str().expect("a name");
        assert!(name == "POD_IP" || help.contains(&format!("[env: {name}=")), "{name} is no flag of the control plane");
        let value = match (name, variable["value"].as_str()) {
            ("WSYNC_LISTEN", _) => format!("127.0.0.1:{port}"),
            ("WSYNC_DATABASE_URL", _) => format!("sqlite://{}/cp.db", dir.path().display()),
            // A mounted secret's file: its value from the chart's Secret, written here.
            (_, Some(path)) if path.starts_with("/var/run/secrets/wsync/") => {
                let file = dir.path().join(name);
                let secret = secret_value(&rendered, container, path);
                std::fs::write(&file, secret).expect("write");
                file.display().to_string()
            }
            (_, Some(value)) => value.to_string(),
            (_, None) => panic!("{name} from a reference the test does not follow"),
        };
        command.env(name, value);
    }
    let log = std::fs::File::create(dir.path().join("log")).expect("log");
    let mut child = command.stdout(log.try_clone().expect("log")).stderr(log).spawn().expect("spawn");
    let served = (0..100).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        http_ok(&format!("http://127.0.0.1:{port}/healthz"))
    });
    // An agent registered with the admin token, and its reconcile: the families with labels
    // have samples.
    let url = format!("http://127.0.0.1:{port}");
    let registered = Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(["agents", "register", "a1", "-o", "json"])
        .env("WSYNC_SERVER", &url)
        .env("WSYNC_ADMIN_TOKEN", &admin_token)
        .output()
        .expect("wsync agents register");
    let registered: Value = serde_json::from_slice(&registered.stdout).unwrap_or_default();
    let agent_token = registered["token"].as_str().unwrap_or_default();
    let reconciled = Command::new("curl")
        .args(["-sf", "-H", &format!("authorization: Bearer {agent_token}"), "-H", "content-type: application/json"])
        .args(["-d", r#"{"update_type":"partial","workspace_agent_infos":[]}"#])
        .arg(format!("{url}{}", wsync::protocol::RECONCILE_PATH))
        .output()
        .expect("curl");
    let metrics = Command::new("curl")
        .args([
            "-sf",
            "-H",
            &format!("authorization: Bearer {metrics_token}"),
            &format!("http://127.0.0.1:{port}/metrics"),
        ])
        .output()
        .expect("curl");
    let _ = child.kill();
    let _ = child.wait();
    let said = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
    assert!(served, "the control plane did not serve with the chart's environment:\n{said}");
    assert!(reconciled.status.success(), "the admin token and an agent's reconcile: {registered}\n{said}");
    // The metrics token works, and every metric the alerts name is one it exports.
    let text = String::from_utf8_lossy(&metrics.stdout);
    let rules = std::fs::read_to_string(format!("{CHART}/files/prometheus-rules.yaml")).expect("rules");
    let named: Vec<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| word.starts_with("wsync_control_plane_"))
        .collect();
    assert!(named.len() >= 5, "{named:?}");
    for metric in named {
        let family = metric.trim_end_matches("_bucket").trim_end_matches("_total");
        assert!(text.contains(&format!("# TYPE {family} ")), "{metric} is not exported:\n{text}");
    }
}

/// The value of the Secret mounted where `path` lies.
fn secret_value(rendered: &std::collections::BTreeMap<String, Value>, container: &Value, path: &str) -> String {
    let mount = container["volumeMounts"]
        .as_array()
        .and_then(|mounts| mounts.iter().find(|m| path.starts_with(m["mountPath"].as_str().unwrap_or("-"))))
        .expect("a mount");
    let volume = mount["name"].as_str().expect("a name");
    let secret = rendered
        .values()
        .find_map(|object| {
            let volumes = object["spec"]["template"]["spec"]["volumes"].as_array()?;
            volumes.iter().find(|v| v["name"] == volume)?["secret"]["secretName"].as_str().map(str::to_string)
        })
        .expect("a secret volume");
    let key = path.rsplit('/').next().expect("a key");
    let data = &rendered[&format!("Secret/{secret}")];
    let value = data["stringData"][key].as_str().map(str::to_string);
    value.unwrap_or_else(|| {
        use base64::Engine;
        let encoded = data["data"][key].as_str().expect("the key");
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(encoded).expect("base64")).expect("UTF-8")
    })
}

/// The alerts pass their promtool tests.
#[test]
fn the_control_planes_alerts_pass_their_promtool_tests() {
    let files = format!("{CHART}/files");
    let promtool = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/promtool.sh")).output().expect("promtool");
    let promtool = String::from_utf8_lossy(&promtool.stdout).trim().to_string();
    let out = Command::new(&promtool).args(["test", "rules", "alerts_test.yaml"]).current_dir(&files).output();
    let out = out.expect("promtool");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}
