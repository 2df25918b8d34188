//! #41 on the real node: the control plane installed by its chart, two replicas on PostgreSQL
//! (the host's, through a forwarder on the node's address), from an image built from this
//! tree; the agent installed by its chart beside it, syncing through the control plane's
//! Service (kube-proxy's ClusterIP; no cluster DNS runs here). A workspace is created and
//! opened through the control plane's Pods; the replica holding the agent's tunnel is deleted
//! while it is in use, and nothing is lost: the workspace runs on, the same local port serves it
//! again, and a workspace created after is synced. And on SQLite: one replica, and its backup
//! Job run on the control plane's node.

use crate::opening::{OPENABLE_IMAGE, PAGE, openable_image, wsync_at};
use crate::support::workspace_streams::port_forward;
use crate::support::*;
use crate::*;
use serde_json::json;
use std::process::Child;

const CP_NAMESPACE: &str = "wsync-cp";
const AGENT_NAMESPACE: &str = "wsync-cp-agent";
const IMAGE: (&str, &str) = ("localhost/wsync", "cp");
const CP_CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/wsync-control-plane");
const AGENT_CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/wsync-agent");

fn helm(args: &[&str]) -> String {
    let out = Command::new(format!("{ROOT}/hack/helm.sh")).args(args).output().expect("hack/helm.sh");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "hack/helm.sh {args:?}: {said}");
    said
}

/// The wsync image of this tree, built and imported once for both tests.
fn control_plane_image() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let image = format!("{}:{}", IMAGE.0, IMAGE.1);
        let imported = Command::new(format!("{ROOT}/hack/local-node.sh"))
            .args(["image", env!("CARGO_BIN_EXE_wsync"), &image])
            .status();
        assert!(imported.is_ok_and(|s| s.success()), "building and importing {image}");
    });
}

/// The releases and what the test added, removed however it ends.
struct Installed {
    postgres: Option<Child>,
    releases: Vec<(&'static str, &'static str, &'static str)>,
    /// The agent whose workspaces' namespaces go too.
    agent: Option<String>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(postgres) = &mut self.postgres {
            let _ = postgres.kill();
        }
        if let Some(agent) = &self.agent {
            let selector = format!("{LABEL_KEY}={agent}");
            kubectl(env(), &["delete", "namespace", "-l", &selector, "--wait=false"]);
        }
        for (chart, namespace, release) in &self.releases {
            let _ = Command::new(format!("{ROOT}/hack/helm.sh"))
                .args(["uninstall", chart, "{}", namespace, release])
                .output();
            kubectl(env(), &["delete", "namespace", namespace, "--ignore-not-found", "--wait=false"]);
        }
    }
}

/// Namespaces a run before may have left, gone.
fn gone(namespaces: &[&str]) {
    for namespace in namespaces {
        kubectl(env(), &["delete", "namespace", namespace, "--ignore-not-found", "--timeout=120s"]);
    }
}

fn rolled_out(namespace: &str, deployment: &str) {
    let rollout = kubectl(env(), &["-n", namespace, "rollout", "status", deployment, "--timeout=180s"]);
    if !rollout.status.success() {
        let pods = kubectl_ok(env(), &["-n", namespace, "get", "pods", "-o", "wide"]);
        let logs = kubectl(env(), &["-n", namespace, "logs", deployment, "--tail=30"]);
        panic!("{deployment} not rolled out:\n{pods}\n{}", String::from_utf8_lossy(&logs.stdout));
    }
}

/// `wsync <args>` as the admin, at `server`, not yet run.
fn admin_command(server: &str, token: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wsync"));
    command.args(args).env("WSYNC_SERVER", server).env("WSYNC_ADMIN_TOKEN", token);
    command
}

/// `wsync <args>` as the admin, at `server`.
fn admin(server: &str, token: &str, args: &[&str]) -> String {
    let out = admin_command(server, token, args).output().expect("wsync");
    assert!(out.status.success(), "wsync {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The control plane's Service routes (kube-proxy follows the endpoints a moment after the
/// rollout): its URL.
async fn serving(namespace: &str) -> String {
    let ip = kubectl_ok(
        env(),
        &["-n", namespace, "get", "service", "wsync-control-plane", "-o", "jsonpath={.spec.clusterIP}"],
    );
    let server = format!("http://{ip}");
    eventually("the Service to route", LONG, || http_ok(&format!("{server}/healthz")).then_some(())).await;
    server
}

/// A child process killed however the test ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn page(local: &str) -> Option<String> {
    let out = Command::new("curl").args(["-fsS", "--max-time", "5", &format!("http://{local}/")]).output().ok()?;
    let body = String::from_utf8_lossy(&out.stdout).to_string();
    body.contains(PAGE).then_some(body)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_charts_install_the_control_plane_and_an_agent_and_a_replica_deleted_mid_use_loses_nothing() {
    if !node_up() {
        return;
    }
    let env = env();
    gone(&[CP_NAMESPACE, AGENT_NAMESPACE]);
    openable_image();
    control_plane_image();
    let built = Command::new(format!("{ROOT}/hack/local-node.sh")).arg("pg-client-image").status();
    assert!(built.is_ok_and(|s| s.success()), "building localhost/pg-client:1");
    let mut volumes = crate::devfiles::Volumes::new();
    let backups = volumes.bind(CP_NAMESPACE, "wsync-control-plane-backups");

    // PostgreSQL on the host, where Pods reach it: the node's address, forwarded to loopback.
    let database = crate::support::postgres::fresh_database("cp_in_cluster").await;
    let port = database.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()).expect("a port").to_string();
    let postgres = Command::new("socat")
        .args([format!("TCP-LISTEN:{port},bind={NODE_IP},fork,reuseaddr"), format!("TCP:127.0.0.1:{port}")])
        .spawn()
        .expect("socat");
    let releases = vec![(AGENT_CHART, AGENT_NAMESPACE, "wsync-agent"), (CP_CHART, CP_NAMESPACE, "wsync-control-plane")];
    let id = unique_id("cp");
    let _installed = Installed { postgres: Some(postgres), releases, agent: Some(id.clone()) };
    let for_pods = database.replace("127.0.0.1", NODE_IP);

    // The README's install (Installing the control plane), with this test's image and values.
    let admin_token = secret_token("admin");
    let values = json!({
        "image": {"repository": IMAGE.0, "tag": IMAGE.1},
        "database": {"url": for_pods},
        "adminToken": {"value": admin_token},
        "forwardSecret": {"value": secret_token("forward")},
        "host": "", "ingress": {"enabled": false},
        "backup": {"enabled": true, "image": {"repository": "localhost/pg-client", "tag": "1"},
                   "storageClassName": crate::devfiles::STORAGE_CLASS},
    });
    helm(&["install", CP_CHART, &values.to_string(), CP_NAMESPACE, "wsync-control-plane"]);
    rolled_out(CP_NAMESPACE, "deployment/wsync-control-plane");
    let server = serving(CP_NAMESPACE).await;
    let registered: Value =
        serde_json::from_str(&admin(&server, &admin_token, &["agents", "register", &id, "-o", "json"])).expect("json");
    let agent_token = registered["token"].as_str().expect("a token");

    // The agent, by its chart, at the Service's ClusterIP. The node's Pods reach the apiserver
    // at its forwarder, not at the `kubernetes` Service (hack/local-node.sh).
    let apiserver_port = std::env::var("WSYNC_APISERVER_PORT").unwrap_or_else(|_| "16443".into());
    let values = json!({
        "agentId": id,
        "controlPlane": {"url": server, "allowInsecure": true},
        "token": {"value": agent_token},
        "image": {"repository": IMAGE.0, "tag": IMAGE.1},
        "replicas": 1,
        "crds": {"enabled": false},
        "extraEnv": [{"name": "KUBERNETES_SERVICE_HOST", "value": NODE_IP},
                     {"name": "KUBERNETES_SERVICE_PORT", "value": apiserver_port}],
    });
    helm(&["install", AGENT_CHART, &values.to_string(), AGENT_NAMESPACE, "wsync-agent"]);
    rolled_out(AGENT_NAMESPACE, "deployment/wsync-agent");

    // A user's workspace, created, run on the node, and opened through the control plane.
    let created: Value =
        serde_json::from_str(&admin(&server, &admin_token, &["users", "create", "alice", "-o", "json"])).expect("json");
    let alice = created["token"].as_str().expect("a token").to_string();
    let made = wsync_at(&server, &id, &alice, &["workspaces", "create", "web", "--image", OPENABLE_IMAGE]).output();
    assert!(made.as_ref().is_ok_and(|o| o.status.success()), "{made:?}");
    let state = |name: &str| -> Option<Value> {
        let out = wsync_at(&server, &id, &alice, &["workspaces", "get", name, "-o", "json"]).output().ok()?;
        serde_json::from_slice(&out.stdout).ok()
    };
    eventually("web Running", LONG, || state("web").filter(|w| w["actual_state"] == "Running")).await;
    let (forward, local) =
        port_forward(&mut wsync_at(&server, &id, &alice, &["workspaces", "port-forward", "web", "0:8080"]));
    let forward = Killed(forward);
    eventually("the Pod's page through the control plane's Pods", LONG, || page(&local)).await;

    // The replica holding the agent's tunnel goes, mid-use.
    sqlx::any::install_default_drivers();
    let pool = sqlx::AnyPool::connect(&database).await.expect("PostgreSQL");
    let (holder,): (String,) = sqlx::query_as("SELECT advertise_url FROM agent_tunnels WHERE agent_id = $1")
        .bind(&id)
        .fetch_one(&pool)
        .await
        .expect("the tunnel's holder");
    let pod_ip = holder.trim_start_matches("http://").split(':').next().expect("an address").to_string();
    let pods: Value = serde_json::from_str(&kubectl_ok(
        env,
        &["-n", CP_NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=wsync-control-plane", "-o", "json"],
    ))
    .expect("json");
    let pod = pods["items"].as_array().and_then(|p| p.iter().find(|p| p["status"]["podIP"] == pod_ip.as_str()));
    let pod = pod.and_then(|p| p["metadata"]["name"].as_str()).expect("the holding Pod").to_string();
    kubectl_ok(env, &["-n", CP_NAMESPACE, "delete", "pod", &pod, "--wait=false"]);

    // The same local port serves the workspace again, through the replicas left or new.
    eventually("the page again, through another replica", LONG, || page(&local)).await;
    let listed: Value =
        serde_json::from_str(&admin(&server, &admin_token, &["workspaces", "--agent", &id, "list", "-o", "json"]))
            .expect("json");
    let names: Vec<&str> = listed.as_array().expect("a list").iter().filter_map(|w| w["name"].as_str()).collect();
    assert_eq!(names, ["web"], "nothing lost");
    assert_eq!(state("web").expect("web")["actual_state"], "Running");
    let made = wsync_at(&server, &id, &alice, &["workspaces", "create", "after", "--image", OPENABLE_IMAGE]).output();
    assert!(made.as_ref().is_ok_and(|o| o.status.success()), "{made:?}");
    eventually("after Running", LONG, || state("after").filter(|w| w["actual_state"] == "Running")).await;
    rolled_out(CP_NAMESPACE, "deployment/wsync-control-plane");

    // The backup CronJob's Job, run now: pg_dump's custom format, which pg_restore reads.
    let dump = backup_now(CP_NAMESPACE, &backups, ".dump");
    let listed = Command::new("pg_restore").arg("--list").arg(&dump).output().expect("pg_restore");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(listed.contains("TABLE public workspaces"), "{listed}");
    drop(forward);
    for name in ["web", "after"] {
        let _ = wsync_at(&server, &id, &alice, &["workspaces", "terminate", name]).output();
    }
    eventually("both terminated", LONG, || {
        ["web", "after"].iter().all(|n| state(n).is_some_and(|w| w["actual_state"] == "Terminated")).then_some(())
    })
    .await;
}

/// SQLite: one replica on its claim, and the backup CronJob's Job, run now, writes a copy on
/// the control plane's node (the claim is ReadWriteOnce) with the image's own subcommand (it
/// has no shell), which `restore` takes back.
#[tokio::test(flavor = "multi_thread")]
async fn on_sqlite_one_replica_serves_and_its_backup_job_writes_a_copy_restore_takes() {
    if !node_up() {
        return;
    }
    const NAMESPACE: &str = "wsync-cp-sqlite";
    let env = env();
    gone(&[NAMESPACE]);
    control_plane_image();
    let mut volumes = crate::devfiles::Volumes::new();
    volumes.bind(NAMESPACE, "wsync-control-plane-data");
    let backups = volumes.bind(NAMESPACE, "wsync-control-plane-backups");
    let admin_token = secret_token("admin");
    let class = crate::devfiles::STORAGE_CLASS;
    let values = json!({
        "image": {"repository": IMAGE.0, "tag": IMAGE.1},
        "replicas": 1,
        "database": {"sqlite": {"enabled": true, "storageClassName": class}},
        "adminToken": {"value": admin_token},
        "host": "", "ingress": {"enabled": false},
        "backup": {"enabled": true, "keep": 2, "storageClassName": class},
    });
    let releases = vec![(CP_CHART, NAMESPACE, "wsync-control-plane")];
    let _installed = Installed { postgres: None, releases, agent: None };
    helm(&["install", CP_CHART, &values.to_string(), NAMESPACE, "wsync-control-plane"]);
    rolled_out(NAMESPACE, "deployment/wsync-control-plane");
    let server = serving(NAMESPACE).await;
    admin(&server, &admin_token, &["agents", "register", "kept", "-o", "json"]);

    let written = [backup_now(NAMESPACE, &backups, ".db")];
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = std::fs::metadata(&written[0]).expect("the backup");
    assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (65532, 0o600), "the control plane's, alone");

    // README (Backups): restored in the cluster, by a Pod with both claims, while the control
    // plane is scaled to 0; an agent registered since is gone.
    admin(&server, &admin_token, &["agents", "register", "since", "-o", "json"]);
    let backup = written[0].file_name().and_then(|n| n.to_str()).expect("a name").to_string();
    kubectl_ok(env, &["-n", NAMESPACE, "scale", "deployment/wsync-control-plane", "--replicas=0"]);
    eventually("no replica", LONG, || {
        let pods = kubectl_ok(
            env,
            &["-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=wsync-control-plane", "-o", "name"],
        );
        pods.trim().is_empty().then_some(())
    })
    .await;
    let image = format!("{}:{}", IMAGE.0, IMAGE.1);
    let overrides = restore_pod(&image, &backup);
    kubectl_ok(
        env,
        &[
            "-n",
            NAMESPACE,
            "run",
            "wsync-restore",
            "--restart=Never",
            &format!("--image={image}"),
            &format!("--overrides={overrides}"),
        ],
    );
    let finished = eventually("the restore Pod done", LONG, || {
        let phase = get_field(env, NAMESPACE, "pod/wsync-restore", "{.status.phase}")?;
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
    })
    .await;
    let said = String::from_utf8_lossy(&kubectl(env, &["-n", NAMESPACE, "logs", "wsync-restore"]).stdout).to_string();
    assert_eq!(finished, "Succeeded", "{said}");
    assert!(said.contains("restored /backups/wsync-control-plane-") && said.contains("kept at"), "{said}");
    kubectl_ok(env, &["-n", NAMESPACE, "scale", "deployment/wsync-control-plane", "--replicas=1"]);
    rolled_out(NAMESPACE, "deployment/wsync-control-plane");
    let config = |id: &str| {
        admin_command(&server, &admin_token, &["agents", "config", id]).output().is_ok_and(|o| o.status.success())
    };
    eventually("the control plane back, with the backup's agent", LONG, || config("kept").then_some(())).await;
    assert!(!config("since"), "an agent registered after the backup is not in it");

    // And on the host, the same file restores with the same command.
    let dir = tempfile::tempdir().expect("tempdir");
    let restored = Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(["control-plane", "restore", path_str(&written[0])])
        .args(["--database-url", &format!("sqlite://{}/restored.db", dir.path().display())])
        .output()
        .expect("wsync control-plane restore");
    let said = String::from_utf8_lossy(&restored.stdout);
    assert!(
        restored.status.success() && said.contains("1 agents"),
        "{said}{}",
        String::from_utf8_lossy(&restored.stderr)
    );
}

/// `kubectl run`'s overrides for the README's restore Pod: the control plane's user, both
/// claims, and `wsync control-plane restore` (the image has no shell).
fn restore_pod(image: &str, backup: &str) -> String {
    json!({"spec": {
        "securityContext": {"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532},
        "containers": [{"name": "wsync-restore", "image": image,
            "args": ["control-plane", "restore", format!("/backups/{backup}"),
                     "--database-url", "sqlite:///var/lib/wsync/wsync-control-plane.db"],
            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/wsync"}, {"name": "backups", "mountPath": "/backups"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "wsync-control-plane-data"}},
                    {"name": "backups", "persistentVolumeClaim": {"claimName": "wsync-control-plane-backups"}}]}})
    .to_string()
}

/// The backup CronJob's Job, run now and waited for: the one file it wrote into `backups`.
fn backup_now(namespace: &str, backups: &std::path::Path, suffix: &str) -> std::path::PathBuf {
    let env = env();
    // As `kubectl create job --from=cronjob/…` makes it; today's kubectl refuses the
    // batch/v1beta1 CronJob that Kubernetes 1.20 serves.
    let cronjob: Value = serde_json::from_str(&kubectl_ok(
        env,
        &["-n", namespace, "get", "cronjob", "wsync-control-plane-backup", "-o", "json"],
    ))
    .expect("json");
    let job = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "backup-now", "namespace": namespace,
                     "annotations": {"cronjob.kubernetes.io/instantiate": "manual"}},
        "spec": cronjob["spec"]["jobTemplate"]["spec"]});
    kubectl_apply(env, &job.to_string());
    let done = kubectl(env, &["-n", namespace, "wait", "--for=condition=complete", "job/backup-now", "--timeout=120s"]);
    let logs = String::from_utf8_lossy(&kubectl(env, &["-n", namespace, "logs", "job/backup-now"]).stdout).to_string();
    if !done.status.success() {
        let pods = kubectl(env, &["-n", namespace, "get", "pods,events", "-o", "wide"]);
        panic!("the backup Job did not complete: {logs}\n{}", String::from_utf8_lossy(&pods.stdout));
    }
    assert!(logs.contains("/backups/wsync-"), "{logs}");
    let written: Vec<std::path::PathBuf> =
        std::fs::read_dir(backups).expect("the backups' volume").filter_map(|e| e.ok().map(|e| e.path())).collect();
    assert_eq!(written.len(), 1, "{written:?}");
    assert!(written[0].to_string_lossy().ends_with(suffix), "{written:?}");
    written[0].clone()
}
