//! The agent installed as a user installs it: `kubectl apply -k manifests/`, with the image
//! overridden to one built from this tree (hack/local-node.sh image), two replicas running as
//! Pods with their ServiceAccount and token Secret, the control plane on the host.

use crate::support::*;
use crate::*;
use std::path::Path;

const NAMESPACE: &str = "wsync-system";
const AGENT_IMAGE: &str = "localhost/wsync:test";

/// The overlay a user would write over `manifests/`: the image, the agent's id and token, the
/// control plane's URL and CA. No kube-proxy runs here, so the Pods name the apiserver at the
/// node's forwarder (hack/local-node.sh).
fn overlay(dir: &Path, node: &Node) -> std::path::PathBuf {
    let overlay = dir.join("overlay");
    std::fs::create_dir_all(&overlay).expect("overlay dir");
    // kustomize takes no absolute path: climb from the overlay to / and down to the manifests.
    let up = "../".repeat(overlay.components().count().saturating_sub(1));
    let manifests = format!("{up}{}/manifests", ROOT.trim_start_matches('/'));
    let ca = node.control_plane.ca_file.as_ref().expect("a TLS control plane");
    std::fs::copy(ca, overlay.join("ca.pem")).expect("copy the CA");
    let (name, tag) = AGENT_IMAGE.rsplit_once(':').expect("name:tag");
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [{manifests}]\n\
         images: [{{name: wsync, newName: {name}, newTag: '{tag}'}}]\n\
         secretGenerator:\n- {{name: wsync-agent-token, namespace: {NAMESPACE}, literals: [token={token}], options: {{disableNameSuffixHash: true}}}}\n\
         configMapGenerator:\n- {{name: wsync-control-plane-ca, namespace: {NAMESPACE}, files: [ca.pem], options: {{disableNameSuffixHash: true}}}}\n\
         patches: [{{path: agent.yaml}}]\n",
        token = node.token,
    );
    std::fs::write(overlay.join("kustomization.yaml"), kustomization).expect("kustomization");
    let port = std::env::var("WSYNC_APISERVER_PORT").unwrap_or_else(|_| "16443".into());
    let patch = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: wsync-agent, namespace: {NAMESPACE}}}\nspec:\n  template:\n    spec:\n      containers:\n      - name: agent\n        env:\n\
         \x20       - {{name: WSYNC_AGENT_ID, value: '{id}'}}\n\
         \x20       - {{name: WSYNC_CONTROL_PLANE_URL, value: '{url}'}}\n\
         \x20       - {{name: WSYNC_CONTROL_PLANE_CA_FILE, value: /var/run/secrets/wsync-ca/ca.pem}}\n\
         \x20       - {{name: KUBERNETES_SERVICE_HOST, value: '{NODE_IP}'}}\n\
         \x20       - {{name: KUBERNETES_SERVICE_PORT, value: '{port}'}}\n\
         \x20       volumeMounts:\n        - {{name: control-plane-ca, mountPath: /var/run/secrets/wsync-ca, readOnly: true}}\n\
         \x20     volumes:\n      - {{name: control-plane-ca, configMap: {{name: wsync-control-plane-ca}}}}\n",
        id = node.id,
        url = node.control_plane.url,
    );
    std::fs::write(overlay.join("agent.yaml"), patch).expect("patch");
    overlay
}

/// Removes the installed agent, its Secret and CA, and its status, however the test ends. The
/// namespace stays: the host agents of the other tests keep their Leases there.
struct Installed(String);

impl Drop for Installed {
    fn drop(&mut self) {
        let env = env();
        let objects = ["deployment/wsync-agent", "secret/wsync-agent-token", "configmap/wsync-control-plane-ca"];
        kubectl(env, &[&["-n", NAMESPACE, "delete", "--ignore-not-found", "--timeout=60s"], &objects[..]].concat());
        kubectl(env, &["-n", NAMESPACE, "delete", "wss", &self.0, "--ignore-not-found"]);
    }
}

fn lease_holder(id: &str) -> Option<String> {
    get_field(env(), NAMESPACE, &format!("lease/wsync-agent-{id}"), "{.spec.holderIdentity}").filter(|h| !h.is_empty())
}

fn agent_pods() -> Vec<String> {
    let names = kubectl_ok(
        env(),
        &[
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=wsync-agent",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    );
    names.split_whitespace().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_runs_in_the_cluster_from_its_manifests_and_a_replica_takes_over() {
    if !node_up() {
        return;
    }
    let env = env();
    workspace_image();
    let imported = Command::new(format!("{ROOT}/hack/local-node.sh"))
        .args(["image", env!("CARGO_BIN_EXE_wsync"), AGENT_IMAGE])
        .status();
    assert!(imported.is_ok_and(|s| s.success()), "building and importing {AGENT_IMAGE}");
    let node = Node::for_pods("ic");
    let overlay = overlay(node.dir.path(), &node);
    let _installed = Installed(node.id.clone());
    kubectl_ok(env, &["apply", "-k", path_str(&overlay)]);
    let rollout = kubectl(env, &["-n", NAMESPACE, "rollout", "status", "deployment/wsync-agent", "--timeout=120s"]);
    if !rollout.status.success() {
        let pods = kubectl(env, &["-n", NAMESPACE, "get", "pods", "-o", "wide"]);
        let logs = kubectl(env, &["-n", NAMESPACE, "logs", "deployment/wsync-agent", "--tail=20"]);
        let previous = kubectl(env, &["-n", NAMESPACE, "logs", "deployment/wsync-agent", "--previous", "--tail=20"]);
        let [pods, logs, previous] = [pods, logs, previous].map(|o| String::from_utf8_lossy(&o.stdout).to_string());
        panic!("two replicas not Ready on the real kubelet:\n{pods}\n{logs}\n--previous:\n{previous}");
    }

    // The Pods run as the manifests say: non-root, read-only root, all capabilities dropped.
    // A Pod of an earlier run may still be terminating beside them: look at one that is not.
    let pods: Value = serde_json::from_str(&kubectl_ok(
        env,
        &["-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=wsync-agent", "-o", "json"],
    ))
    .expect("json");
    let pod = pods["items"]
        .as_array()
        .and_then(|pods| {
            pods.iter().find(|p| p["metadata"]["deletionTimestamp"].is_null() && p["status"]["phase"] == "Running")
        })
        .expect("a running agent Pod");
    let container = &pod["spec"]["containers"][0];
    assert_eq!(container["image"], AGENT_IMAGE);
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(pod["spec"]["serviceAccountName"], "wsync-agent");
    let started = &pod["status"]["containerStatuses"][0]["containerID"];
    assert!(started.as_str().is_some_and(|c| c.starts_with("containerd://")), "{started}");

    node.cli(&["create", "alice", "--image", WORKSPACE_IMAGE]);
    let running = node.actual("alice", "Running").await;
    let ns = running["namespace"].as_str().expect("a namespace").to_string();
    assert_eq!(get_field(env, &ns, "pvc/alice-home", "{.status.phase}").as_deref(), Some("Bound"));
    node.cli(&["stop", "alice"]);
    node.actual("alice", "Stopped").await;
    node.cli(&["start", "alice"]);
    node.actual("alice", "Running").await;

    // The leader's Pod goes; the other replica takes the Lease and finishes the job.
    let leader = eventually("a leader", LONG, || lease_holder(&node.id)).await;
    assert!(agent_pods().contains(&leader), "the leader {leader} is one of the agent's Pods");
    kubectl_ok(env, &["-n", NAMESPACE, "delete", "pod", &leader, "--wait=false"]);
    let successor = eventually("another replica leading", LONG, || {
        lease_holder(&node.id).filter(|holder| holder != &leader && agent_pods().contains(holder))
    })
    .await;
    eprintln!("leader {leader} deleted; {successor} took over");
    node.cli(&["terminate", "alice"]);
    node.actual("alice", "Terminated").await;
    let wss = wss_json(env, &node.id).expect("the agent's WorkspaceSyncStatus");
    assert_eq!(condition(&wss, "Ready").map(|c| c["status"].clone()), Some("True".into()), "{wss}");
}
