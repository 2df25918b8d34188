//! #41 on the real node: the control plane installed by its chart, two replicas on PostgreSQL
//! (the host's, through a forwarder on the node's address), from an image built from this
//! tree; the agent installed by its chart beside it, syncing through the control plane's
//! Service (kube-proxy's ClusterIP; no cluster DNS runs here). A workspace is created and
//! opened through the control plane's Pods; the replica holding the agent's tunnel is deleted
//! while it is in use, and nothing is lost: the workspace runs on, the same local port serves it
//! again, and a workspace created after is synced.

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

/// The releases and what the test added, removed however it ends.
struct Installed {
    _postgres: Child,
}

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = self._postgres.kill();
        for (chart, namespace, release) in
            [(AGENT_CHART, AGENT_NAMESPACE, "wsync-agent"), (CP_CHART, CP_NAMESPACE, "wsync-control-plane")]
        {
            let _ = Command::new(format!("{ROOT}/hack/helm.sh"))
                .args(["uninstall", chart, "{}", namespace, release])
                .output();
            kubectl(env(), &["delete", "namespace", namespace, "--ignore-not-found", "--wait=false"]);
        }
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

/// `wsync <args>` as the admin, at `server`.
fn admin(server: &str, token: &str, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(args)
        .env("WSYNC_SERVER", server)
        .env("WSYNC_ADMIN_TOKEN", token)
        .output()
        .expect("wsync");
    assert!(out.status.success(), "wsync {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
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
    for namespace in [CP_NAMESPACE, AGENT_NAMESPACE] {
        kubectl(env, &["delete", "namespace", namespace, "--ignore-not-found", "--timeout=120s"]);
    }
    openable_image();
    let image = format!("{}:{}", IMAGE.0, IMAGE.1);
    let imported = Command::new(format!("{ROOT}/hack/local-node.sh"))
        .args(["image", env!("CARGO_BIN_EXE_wsync"), &image])
        .status();
    assert!(imported.is_ok_and(|s| s.success()), "building and importing {image}");

    // PostgreSQL on the host, where Pods reach it: the node's address, forwarded to loopback.
    let database = crate::support::postgres::fresh_database("cp_in_cluster").await;
    let port = database.rsplit_once(':').and_then(|(_, rest)| rest.split('/').next()).expect("a port").to_string();
    let postgres = Command::new("socat")
        .args([format!("TCP-LISTEN:{port},bind={NODE_IP},fork,reuseaddr"), format!("TCP:127.0.0.1:{port}")])
        .spawn()
        .expect("socat");
    let _installed = Installed { _postgres: postgres };
    let for_pods = database.replace("127.0.0.1", NODE_IP);

    // The README's install (Installing the control plane), with this test's image and values.
    let admin_token = secret_token("admin");
    let values = json!({
        "image": {"repository": IMAGE.0, "tag": IMAGE.1},
        "database": {"url": for_pods},
        "adminToken": {"value": admin_token},
        "forwardSecret": {"value": secret_token("forward")},
        "host": "", "ingress": {"enabled": false},
    });
    helm(&["install", CP_CHART, &values.to_string(), CP_NAMESPACE, "wsync-control-plane"]);
    rolled_out(CP_NAMESPACE, "deployment/wsync-control-plane");
    let cluster_ip = kubectl_ok(
        env,
        &["-n", CP_NAMESPACE, "get", "service", "wsync-control-plane", "-o", "jsonpath={.spec.clusterIP}"],
    );
    let server = format!("http://{cluster_ip}");
    let id = unique_id("cp");
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
    let (mut forward, local) =
        port_forward(&mut wsync_at(&server, &id, &alice, &["workspaces", "port-forward", "web", "0:8080"]));
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
    let _ = forward.kill();
    for name in ["web", "after"] {
        let _ = wsync_at(&server, &id, &alice, &["workspaces", "terminate", name]).output();
    }
    eventually("both terminated", LONG, || {
        ["web", "after"].iter().all(|n| state(n).is_some_and(|w| w["actual_state"] == "Terminated")).then_some(())
    })
    .await;
}
