//! The Helm chart (charts/wsync-agent, #22), rendered and linted with Helm v4's SDK through
//! helm-python-sdk (hack/helm.sh): with its defaults it gives the objects `kubectl apply -k
//! manifests/` gives; every object it renders passes the apiserver's validation; applied, an
//! agent run with the rendered Deployment's arguments and environment, as its ServiceAccount,
//! syncs.

use crate::support::stub::{STUB_TOKEN, Script, StubControlPlane};
use crate::support::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

pub const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/wsync-agent");

pub fn helm(args: &[&str]) -> String {
    let out =
        Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/helm.sh")).args(args).output().expect("hack/helm.sh");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hack/helm.sh {args:?}: {said}\n{}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// `kind/name` → the object, without what Helm or kustomize add on their own: the release's
/// labels, the keep policy, and the namespace (Helm sets it at install). Selectors and the
/// Pod template's labels are compared whole.
pub fn by_name(stream: &str) -> BTreeMap<String, Value> {
    let objects = wsync::yaml::parse_objects(stream).expect("a YAML stream");
    objects
        .into_iter()
        .map(|object| {
            let kind = object.types.as_ref().map(|t| t.kind.clone()).unwrap_or_default();
            let mut value = serde_json::to_value(&object).expect("json");
            let metadata = value["metadata"].as_object_mut().expect("metadata");
            // The agent's namespace is Helm's to set; another one (a shared workspace
            // namespace) is part of the object's name.
            let namespace = metadata.remove("namespace").and_then(|n| n.as_str().map(str::to_string));
            let name = object.metadata.name.clone().unwrap_or_default();
            let key = match namespace.filter(|n| n != AGENT_NAMESPACE) {
                Some(namespace) => format!("{kind}/{namespace}/{name}"),
                None => format!("{kind}/{name}"),
            };
            for (field, added) in [
                // The chart labels every object; the manifests only those a selector needs.
                (
                    "labels",
                    &[
                        "app.kubernetes.io/name",
                        "helm.sh/chart",
                        "app.kubernetes.io/instance",
                        "app.kubernetes.io/managed-by",
                    ][..],
                ),
                ("annotations", &["helm.sh/resource-policy"][..]),
            ] {
                if let Some(map) = metadata.get_mut(field).and_then(Value::as_object_mut) {
                    map.retain(|key, _| !added.contains(&key.as_str()));
                    if map.is_empty() {
                        metadata.remove(field);
                    }
                }
            }
            (key, value)
        })
        .collect()
}

#[test]
fn with_its_defaults_the_chart_gives_the_manifests_objects() {
    let lint: Value = serde_json::from_str(&helm(&["lint", CHART, "{}"])).expect("the lint report");
    assert_eq!(lint["errors"], json!([]), "{lint}");
    let chart = by_name(&helm(&["render", CHART, "{}", AGENT_NAMESPACE]));
    let manifests = by_name(&kubectl_ok(env(), &["kustomize", concat!(env!("CARGO_MANIFEST_DIR"), "/manifests")]));
    for (key, object) in &manifests {
        if key.starts_with("Namespace/") {
            continue; // helm install --create-namespace, or the operator's
        }
        let rendered = chart.get(key).unwrap_or_else(|| panic!("the chart lacks {key}"));
        assert_eq!(rendered, object, "{key} differs between the chart and manifests/");
    }
    let extra: Vec<&String> = chart.keys().filter(|k| !manifests.contains_key(*k)).collect();
    assert!(extra.is_empty(), "only in the chart: {extra:?}");

    // Shared-namespace mode: the overlay's namespaced rights, and no ClusterRole.
    let shared =
        by_name(&helm(&["render", CHART, r#"{"policy": {"sharedNamespace": "workspaces"}}"#, AGENT_NAMESPACE]));
    let overlay = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/overlays/shared-namespace");
    let overlay = by_name(&kubectl_ok(env(), &["kustomize", overlay]));
    assert_eq!(
        shared["Role/workspaces/wsync-agent-workspaces"]["rules"],
        overlay["Role/workspaces/wsync-agent"]["rules"]
    );
    assert!(!shared.keys().any(|k| k.starts_with("ClusterRole")), "{:?}", shared.keys());
    // The overlay's patch puts the mode's variable first; order means nothing to the agent.
    let by_env_name = |mut deployment: Value| {
        if let Some(env) = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array_mut() {
            env.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
        }
        deployment
    };
    let (chart_agent, overlay_agent) =
        (shared["Deployment/wsync-agent"].clone(), overlay["Deployment/wsync-agent"].clone());
    assert_eq!(by_env_name(chart_agent), by_env_name(overlay_agent), "the mode's flag");

    // The chart's own copies of the CRD and the alert rules are the sources'.
    let copy = |path: &str| std::fs::read_to_string(format!("{CHART}/files/{path}")).expect("a chart file");
    let crd =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/crds/workspacesyncstatus.yaml")).expect("crd");
    assert_eq!(copy("workspacesyncstatus.yaml"), crd, "charts/wsync-agent/files: cp crds/workspacesyncstatus.yaml");
    let rule =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/monitoring/prometheusrule.yaml"))
            .expect("the PrometheusRule");
    let groups = wsync::yaml::parse_value(&rule).expect("yaml")["spec"]["groups"].clone();
    assert_eq!(
        wsync::yaml::parse_value(&copy("prometheus-rules.yaml")).expect("yaml"),
        groups,
        "the chart's alert rules"
    );

    // The schema refuses what the agent would refuse at start.
    for (values, named) in [
        (r#"{"policy": {"podSecurityLevel": "none"}}"#, "podSecurityLevel"),
        (r#"{"controlPlane": {"url": "http://cp.example:8080"}}"#, "/controlPlane/url"),
    ] {
        let refused = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/helm.sh"))
            .args(["render", CHART, values, AGENT_NAMESPACE])
            .output()
            .expect("hack/helm.sh");
        assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains(named), "{values}");
    }
}

/// The Deployment's container as the agent process: its args, and its env with the
/// downward API's fields filled in and the token's mount moved to `token_file`.
pub fn agent_command(deployment: &Value, namespace: &str, token_file: &std::path::Path) -> Command {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mut command = Command::new(env!("CARGO_BIN_EXE_wsync"));
    for arg in container["args"].as_array().expect("args") {
        command.arg(arg.as_str().expect("a string"));
    }
    for var in container["env"].as_array().expect("env") {
        let name = var["name"].as_str().expect("a name");
        let value = match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("metadata.namespace") => namespace.to_string(),
            Some("metadata.name") => "chart-agent-0".to_string(),
            // The agent runs on this host: its own and its node's address are loopback's.
            Some("status.podIP" | "status.hostIP") => "127.0.0.1".to_string(),
            Some(other) => panic!("an unexpected field {other}"),
            None if name == "WSYNC_TOKEN_FILE" => token_file.display().to_string(),
            None => var["value"].as_str().expect("a value").to_string(),
        };
        command.env(name, value);
    }
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rendered_chart_applies_and_its_agent_syncs() {
    let env = env();
    let id = unique_id("hc");
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let name = format!("wsync-agent-{id}");
    let values = json!({
        "fullnameOverride": name,
        "agentId": id,
        "controlPlane": { "url": stub.url },
        "token": { "value": STUB_TOKEN },
        "podDisruptionBudget": { "enabled": true, "apiVersion": "policy/v1beta1" },
        "crds": { "enabled": false },
    });
    let rendered = helm(&["render", CHART, &values.to_string(), AGENT_NAMESPACE]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, &rendered).expect("write");
    let file = file.display().to_string();
    let validated = kubectl_ok(env, &["-n", AGENT_NAMESPACE, "apply", "--dry-run=server", "-f", &file]);
    for kind in [
        "serviceaccount/",
        "clusterrole.rbac",
        "deployment.apps/",
        "service/",
        "networkpolicy.",
        "poddisruptionbudget.",
        "secret/",
    ] {
        assert!(validated.contains(kind), "{kind} missing from:\n{validated}");
    }
    // The CRD too: the chart's default, checked but not applied over the tier's own.
    let with_crd = helm(&["render", CHART, "{}", AGENT_NAMESPACE]);
    let crd_file = dir.path().join("crd.yaml");
    std::fs::write(&crd_file, with_crd).expect("write");
    let crd_checked =
        kubectl_ok(env, &["-n", AGENT_NAMESPACE, "apply", "--dry-run=server", "-f", &crd_file.display().to_string()]);
    assert!(
        crd_checked.contains("customresourcedefinition.apiextensions.k8s.io/workspacesyncstatuses.wsync.dev"),
        "{crd_checked}"
    );

    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "apply", "-f", &file]);
    let template = "go-template={{.data.token | base64decode}}";
    let token = kubectl_ok(env, &["-n", AGENT_NAMESPACE, "get", "secret", &format!("{name}-token"), "-o", template]);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).expect("write the token");

    let deployment = by_name(&rendered).remove(&format!("Deployment/{name}")).expect("the Deployment");
    let kubeconfig = kubeconfig_of(env, &name, dir.path());
    let agent = agent_command(&deployment, AGENT_NAMESPACE, &token_file)
        // Outside a container, the Pod's ports are the host's: free ones instead.
        .env("WSYNC_METRICS_ADDRESS", format!("127.0.0.1:{}", free_port()))
        .env("WSYNC_ADMIN_ADDRESS", format!("127.0.0.1:{}", free_port()))
        .env("KUBECONFIG", &kubeconfig)
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("agent.log")).expect("log"))
        .spawn()
        .expect("the agent");
    let installed = Installed { agent, file: file.clone(), id: id.clone() };
    let synced = tokio::time::timeout(Duration::from_secs(60), async {
        while stub.count() == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    let log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
    assert!(synced.is_ok(), "the chart's agent never synced:\n{log}");
    assert!(log.contains("became the leader"), "{log}");
    drop(installed);
}

/// The agent process and what the chart applied, gone when the test ends, passed or not.
struct Installed {
    agent: std::process::Child,
    file: String,
    id: String,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = self.agent.kill();
        let _ = self.agent.wait();
        let _ = kubectl(env(), &["-n", AGENT_NAMESPACE, "delete", "-f", &self.file, "--wait=false"]);
        let _ = kubectl(env(), &["-n", AGENT_NAMESPACE, "delete", "wss", &self.id, "--ignore-not-found"]);
    }
}
