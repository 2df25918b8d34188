//! The node tier (#24): workspaces whose Pods really run, on a real kubelet and containerd
//! (hack/local-node.sh), driven end to end by the real control plane and agent; no kubelet
//! stand-in. It runs when the node is up, and fails when WSYNC_NODE=1 asks for it and it is not.

#[path = "support/mod.rs"]
mod support;

use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

const LONG: Duration = Duration::from_secs(120);
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// busybox that sleeps as a non-root user: a workspace image that stays up.
const WORKSPACE_IMAGE: &str = "localhost/workspace:1";

/// Whether to run: the node is Ready, or WSYNC_NODE=1 demands it.
fn node_up() -> bool {
    let ready = Command::new(format!("{ROOT}/hack/local-node.sh")).arg("status").status().is_ok_and(|s| s.success());
    if !ready {
        assert!(std::env::var("WSYNC_NODE").as_deref() != Ok("1"), "WSYNC_NODE=1 but no node: hack/local-node.sh up");
        eprintln!("no local node (hack/local-node.sh up): the node tier does not run");
    }
    ready
}

/// A memory hog: reads /dev/zero into memory until the kernel kills it.
const MEMORY_HOG_IMAGE: &str = "localhost/memhog:1";

/// Build `image` (busybox running `command`, as a non-root user) and import it into the node.
fn busybox_image(image: &str, applet: &str, command: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tar = dir.path().join("image.tar");
    let built = Command::new("python3")
        .arg(format!("{ROOT}/hack/mkimage.py"))
        .arg(&tar)
        .args([image, "--file", "/bin/busybox:bin/busybox", "--link", &format!("/bin/busybox:bin/{applet}")])
        .args(["--cmd", command, "--user", "65532:65532"])
        .status()
        .expect("python3");
    assert!(built.success());
    let imported = Command::new(format!("{ROOT}/hack/local-node.sh")).arg("import").arg(&tar).status();
    assert!(imported.is_ok_and(|s| s.success()), "importing {image}");
}

struct Node {
    control_plane: ControlPlaneProcess,
    _agent: AgentProcess,
    id: String,
    _dir: tempfile::TempDir,
}

impl Node {
    fn start(prefix: &str) -> Self {
        let env = env();
        let id = unique_id(prefix);
        let dir = tempfile::tempdir().expect("tempdir");
        let database = format!("sqlite://{}/control-plane.db", dir.path().display());
        let control_plane = ControlPlaneProcess::start(
            &database,
            dir.path().join("control-plane.log"),
            &["--partial-reconciliation-interval-seconds", "1"],
        );
        let registered: Value =
            serde_json::from_str(&control_plane.cli(&["agents", "register", &id, "-o", "json"])).expect("json");
        let token = registered["token"].as_str().expect("a token").to_string();
        let agent = AgentProcess::start_with_token(env, &id, &control_plane.url, &token, &[]);
        Self { control_plane, _agent: agent, id, _dir: dir }
    }

    fn cli(&self, args: &[&str]) -> String {
        self.control_plane.cli(&[&["workspaces", "--agent", &self.id], args].concat())
    }

    async fn wait(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        eventually(&format!("{name} {what}"), LONG, || {
            let workspace: Value = serde_json::from_str(&self.cli(&["get", name, "-o", "json"])).ok()?;
            check(&workspace).then_some(workspace)
        })
        .await
    }

    async fn actual(&self, name: &str, state: &str) -> Value {
        self.wait(name, &format!("to be {state}"), |w| w["actual_state"] == state).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_really_runs_stops_starts_and_terminates() {
    if !node_up() {
        return;
    }
    busybox_image(WORKSPACE_IMAGE, "sleep", r#"["sleep", "2147483647"]"#);
    let node = Node::start("nd");
    let created = Instant::now();
    node.cli(&["create", "alice", "--image", WORKSPACE_IMAGE]);
    let running = node.actual("alice", "Running").await;
    eprintln!("alice Running on a real node after {:?}", created.elapsed());
    let ns = running["namespace"].as_str().expect("a namespace").to_string();
    let env = env();
    let pod = kubectl_ok(env, &["-n", &ns, "get", "pods", "-o", "json"]);
    let pods: Value = serde_json::from_str(&pod).expect("json");
    let status = &pods["items"][0]["status"];
    assert_eq!(status["phase"], "Running", "{status}");
    let container = status["containerStatuses"][0]["containerID"].as_str().unwrap_or_default();
    assert!(container.starts_with("containerd://"), "a real container: {status}");
    assert_eq!(get_field(env, &ns, "pvc/alice-home", "{.status.phase}").as_deref(), Some("Bound"));

    node.cli(&["stop", "alice"]);
    node.actual("alice", "Stopped").await;
    eventually("the Pod really gone", LONG, || {
        let left = kubectl_ok(env, &["-n", &ns, "get", "pods", "-o", "name"]);
        left.trim().is_empty().then_some(())
    })
    .await;
    node.cli(&["start", "alice"]);
    node.actual("alice", "Running").await;
    node.cli(&["terminate", "alice"]);
    node.actual("alice", "Terminated").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn real_failures_say_why() {
    if !node_up() {
        return;
    }
    busybox_image(MEMORY_HOG_IMAGE, "tail", r#"["tail", "/dev/zero"]"#);
    let node = Node::start("nf");
    // Nothing answers for this registry: ErrImagePull, then the kubelet backs off.
    node.cli(&["create", "nope", "--image", "registry.invalid/nope:1"]);
    // busybox's default command, `sh`, exits at once: the kubelet restarts it, then backs off.
    node.cli(&["create", "quits", "--image", "localhost/busybox:1"]);
    // Past its 16Mi limit the kernel kills it; the kubelet restarts it, then backs off.
    node.cli(&["create", "hog", "--image", MEMORY_HOG_IMAGE, "--memory", "16Mi", "--cpu", "200m"]);
    for (name, said) in [("nope", "ImagePull: "), ("quits", "CrashLoop: "), ("hog", "CrashLoop: ")] {
        let failing = node.wait(name, "to say why it fails", |w| w["actual_state"] == "Error").await;
        let message = failing["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(said), "{name}: {failing}");
        if name == "hog" {
            assert!(message.contains("OOMKilled (exit 137)"), "{message}");
        }
        assert_eq!(failing["error"]["error_type"], "kubernetes");
        eprintln!("{name}: {message}");
    }
}
