//! The node tier (#24): workspaces whose Pods really run, on a real kubelet and containerd
//! (hack/local-node.sh), driven end to end by the real control plane and agent; no kubelet
//! stand-in. It runs when the node is up, and fails when WSYNC_NODE=1 or CI=true asks for it
//! and it is not.

#[path = "../support/mod.rs"]
pub mod support;

mod control_plane_in_cluster;
mod devfiles;
mod in_cluster;
mod lifecycle;
mod opening;
mod processes;

use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};
use support::tls::Tls;
use support::*;

const LONG: Duration = Duration::from_secs(120);
const ROOT: &str = env!("CARGO_MANIFEST_DIR");
/// busybox that sleeps as a non-root user: a workspace image that stays up.
const WORKSPACE_IMAGE: &str = "localhost/workspace:1";

/// The node's address (hack/local-node.sh): where Pods reach the host.
const NODE_IP: &str = "10.250.250.1";

/// Whether to run: the node is Ready, or WSYNC_NODE=1 or CI=true demands it.
fn node_up() -> bool {
    let ready = Command::new(format!("{ROOT}/hack/local-node.sh")).arg("status").status().is_ok_and(|s| s.success());
    if !ready {
        let demanded =
            std::env::var("WSYNC_NODE").as_deref() == Ok("1") || std::env::var("CI").as_deref() == Ok("true");
        assert!(
            !demanded,
            "the node tier is demanded (WSYNC_NODE=1 or CI=true) but no node is up: hack/local-node.sh up"
        );
        eprintln!("no local node (hack/local-node.sh up): the node tier does not run");
    }
    ready
}

/// A memory hog: reads /dev/zero into memory until the kernel kills it.
const MEMORY_HOG_IMAGE: &str = "localhost/memhog:1";

/// Build `image` (busybox running `command`, as a non-root user, with `applets` on its PATH)
/// and import it into the node.
fn busybox_image(image: &str, applets: &[&str], command: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let tar = dir.path().join("image.tar");
    let links = applets.iter().flat_map(|applet| ["--link".to_string(), format!("/bin/busybox:bin/{applet}")]);
    let built = Command::new("python3")
        .arg(format!("{ROOT}/hack/mkimage.py"))
        .arg(&tar)
        .args([image, "--file", "/bin/busybox:bin/busybox"])
        .args(links)
        .args(["--cmd", command, "--user", "65532:65532"])
        .status()
        .expect("python3");
    assert!(built.success());
    let imported = Command::new(format!("{ROOT}/hack/local-node.sh")).arg("import").arg(&tar).status();
    assert!(imported.is_ok_and(|s| s.success()), "importing {image}");
}

/// The workspace image, built and imported once per run: a shell that sleeps and exits on
/// SIGTERM, as a real workspace's init does. A bare `sleep` as PID 1 ignores SIGTERM, so every
/// stop and termination would wait out the 30 s grace period.
fn workspace_image() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        busybox_image(
            WORKSPACE_IMAGE,
            &["sh", "sleep"],
            r#"["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]"#,
        )
    });
}

/// The real control plane on the host, one agent registered with it, and (unless the agent
/// runs in the cluster) that agent as a host process.
struct Node {
    control_plane: ControlPlaneProcess,
    agent: Option<AgentProcess>,
    id: String,
    token: String,
    dir: tempfile::TempDir,
}

const CONTROL_PLANE_FLAGS: [&str; 2] = ["--partial-reconciliation-interval-seconds", "1"];

impl Node {
    /// The control plane on loopback, and the agent beside it on the host.
    fn start(prefix: &str) -> Self {
        Self::start_with(prefix, &[])
    }

    /// As [`Node::start`], with more of the control plane's flags.
    fn start_with(prefix: &str, control_plane_flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let control_plane = ControlPlaneProcess::start(
            &Self::database(&dir),
            dir.path().join("control-plane.log"),
            &[&CONTROL_PLANE_FLAGS[..], control_plane_flags].concat(),
        );
        let mut node = Self::register(prefix, control_plane, dir);
        node.agent = Some(AgentProcess::start_with_token(env(), &node.id, &node.control_plane.url, &node.token, &[]));
        node
    }

    /// The control plane on the node's address, over TLS, for an agent that runs as a Pod.
    fn for_pods(prefix: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let tls = Tls::for_names(dir.path(), &[NODE_IP]);
        let log = dir.path().join("control-plane.log");
        let control_plane =
            ControlPlaneProcess::start_tls_on(NODE_IP, &Self::database(&dir), log, &tls, &CONTROL_PLANE_FLAGS);
        Self::register(prefix, control_plane, dir)
    }

    fn database(dir: &tempfile::TempDir) -> String {
        format!("sqlite://{}/control-plane.db", dir.path().display())
    }

    fn register(prefix: &str, control_plane: ControlPlaneProcess, dir: tempfile::TempDir) -> Self {
        let id = unique_id(prefix);
        let registered: Value =
            serde_json::from_str(&control_plane.cli(&["agents", "register", &id, "-o", "json"])).expect("json");
        let token = registered["token"].as_str().expect("a token").to_string();
        Self { control_plane, agent: None, id, token, dir }
    }

    fn cli(&self, args: &[&str]) -> String {
        self.control_plane.cli(&[&["workspaces", "--agent", &self.id], args].concat())
    }

    /// Polls the control plane's view of `name` until `check` holds; on timeout, panics with
    /// what a user would look at: the workspace, its namespace and what is left in it, the
    /// agent's status and log.
    async fn wait(&self, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + LONG;
        let mut last = Value::Null;
        loop {
            if let Ok(workspace) = serde_json::from_str::<Value>(&self.cli(&["get", name, "-o", "json"])) {
                if check(&workspace) {
                    return workspace;
                }
                last = workspace;
            }
            if Instant::now() >= deadline {
                panic!("timed out after {LONG:?} waiting for {name} {what}\n{}", self.diagnosis(&last));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    fn diagnosis(&self, workspace: &Value) -> String {
        let env = env();
        let shown = |args: &[&str]| {
            let out = kubectl(env, args);
            format!(
                "$ kubectl {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        };
        let mut report = format!("last seen: {workspace:#}\n");
        if let Some(namespace) = workspace["namespace"].as_str() {
            report += &shown(&["get", "namespace", namespace, "-o", "jsonpath={.status}"]);
            report += "\n";
            report += &shown(&["-n", namespace, "get", "all,pvc,events", "-o", "wide"]);
        }
        report += &shown(&["-n", "wsync-system", "get", "wss", &self.id, "-o", "jsonpath={.status}"]);
        report += "\n";
        report += &match &self.agent {
            Some(agent) => {
                agent.logs().lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
            }
            None => shown(&[
                "-n",
                "wsync-system",
                "logs",
                "-l",
                "app.kubernetes.io/name=wsync-agent",
                "--tail=30",
                "--prefix",
            ]),
        };
        report
    }

    async fn actual(&self, name: &str, state: &str) -> Value {
        self.wait(name, &format!("to be {state}"), |w| w["actual_state"] == state).await
    }
}
