//! Workspaces from devfiles on a real node (#40): two containers, an endpoint, a volume, a
//! project cloned from a Git repository the test serves on the host (`git daemon`), and a
//! postStart command; the workspace runs, the command's file and the clone are there, and a
//! stop and start keeps the volume and the checkout. A project that cannot be cloned and a
//! postStart that fails are each reported as a `kubernetes` error with the cause.

use crate::opening::{OPENABLE_IMAGE, openable_image, ssh_to, user, wsync_as};
use crate::support::*;
use crate::*;
use std::process::{Child, Command};

/// hack/local-node.sh's cloner: Debian's git.
const GIT_IMAGE: &str = "localhost/git:1";
/// The local node's default StorageClass (hack/local-node.sh).
pub(crate) const STORAGE_CLASS: &str = "wsync-local-hostpath";

fn git_image() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let built = Command::new(format!("{ROOT}/hack/local-node.sh")).arg("git-image").status();
        assert!(built.is_ok_and(|s| s.success()), "building {GIT_IMAGE}");
    });
}

/// `git daemon` on the node's address, serving `app.git` (one commit with a README): killed
/// when dropped.
struct GitServer {
    daemon: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Drop for GitServer {
    fn drop(&mut self) {
        self.daemon.kill().ok();
        self.daemon.wait().ok();
    }
}

fn git(args: &[&str]) {
    let out = Command::new("git").args(args).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn serve_repository() -> GitServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    let work = work.to_str().expect("a path");
    git(&["init", "-q", "-b", "main", work]);
    std::fs::write(format!("{work}/README"), "cloned from the host\n").expect("README");
    git(&["-C", work, "add", "README"]);
    git(&["-C", work, "-c", "user.name=wsync", "-c", "user.email=wsync@example.com", "commit", "-qm", "first"]);
    let repositories = dir.path().join("repositories");
    git(&["clone", "-q", "--bare", work, repositories.join("app.git").to_str().expect("a path")]);
    let port = std::net::TcpListener::bind((NODE_IP, 0)).and_then(|l| l.local_addr()).expect("a free port").port();
    let daemon = Command::new("git")
        .args(["daemon", "--reuseaddr", "--export-all", &format!("--listen={NODE_IP}"), &format!("--port={port}")])
        .arg(format!("--base-path={}", repositories.display()))
        .arg(&repositories)
        .spawn()
        .expect("git daemon");
    let server = GitServer { daemon, port, _dir: dir };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect((NODE_IP, port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "git daemon did not listen on {NODE_IP}:{port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    server
}

/// Volumes the workspace's claims bind to, which its non-root user may write: the local
/// node's hostPath provisioner makes root-only directories (a real StorageClass honours the
/// Pod's fsGroup). Deleted when dropped.
pub(crate) struct Volumes {
    names: Vec<String>,
    pub(crate) dir: tempfile::TempDir,
}

impl Volumes {
    pub(crate) fn new() -> Self {
        Self { names: Vec::new(), dir: tempfile::tempdir().expect("tempdir") }
    }

    /// A volume bound in advance to `claim` in `namespace`; its directory.
    pub(crate) fn bind(&mut self, namespace: &str, claim: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let name = unique_id("pv");
        let path = self.dir.path().join(&name);
        std::fs::create_dir(&path).expect("a volume's directory");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let volume = serde_json::json!({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": { "name": name },
            "spec": {
                "capacity": { "storage": "50Gi" },
                "accessModes": ["ReadWriteOnce"],
                "hostPath": { "path": path },
                "storageClassName": STORAGE_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "claimRef": { "namespace": namespace, "name": claim },
            },
        });
        kubectl_apply(env(), &volume.to_string());
        self.names.push(name);
        path
    }
}

impl Drop for Volumes {
    fn drop(&mut self) {
        for name in &self.names {
            kubectl(env(), &["delete", "pv", name, "--wait=false"]);
        }
    }
}

fn devfile(port: u16, project: &str, post_start: &str) -> String {
    format!(
        r#"schemaVersion: 2.2.0
components:
  - name: main
    attributes: {{gl/inject-editor: true, overrideCommand: false}}
    container:
      image: {OPENABLE_IMAGE}
      endpoints:
        - {{name: web, targetPort: 8080}}
        - {{name: ssh, targetPort: 60022, exposure: internal}}
      volumeMounts: [{{name: cache, path: /cache}}]
  - name: helper
    attributes: {{overrideCommand: false}}
    container: {{image: {WORKSPACE_IMAGE}, mountSources: false}}
  - name: cache
    volume: {{size: 64Mi}}
commands:
  - id: note
    exec: {{component: main, commandLine: {post_start:?}}}
events:
  postStart: [note]
projects:
  - name: app
    git: {{remotes: {{origin: "git://{NODE_IP}:{port}/{project}"}}}}
"#
    )
}

/// Create `name` from `devfile` as `token`'s user, its claims bound to writable volumes first.
fn create(node: &Node, token: &str, volumes: &mut Volumes, name: &str, devfile: &str) {
    let namespace = format!("wsync-{}-{name}", node.id);
    for claim in ["cache", "gl-workspace-data"] {
        volumes.bind(&namespace, &format!("{name}-{claim}"));
    }
    let file = node.dir.path().join(format!("{name}.devfile.yaml"));
    std::fs::write(&file, devfile).expect("the devfile");
    let created = wsync_as(node, token, &["workspaces", "create", name, "--devfile", file.to_str().expect("a path")])
        .output()
        .expect("wsync");
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
}

/// The images, the repository, a control plane with its agent and its cloner, a user (her
/// token), and the volumes to bind the workspaces' claims to.
fn setting_up(prefix: &str) -> (GitServer, Node, String, Volumes) {
    openable_image();
    workspace_image();
    git_image();
    let repository = serve_repository();
    let node = Node::start_with(prefix, &["--project-cloner-image", GIT_IMAGE]);
    let alice = user(&node.control_plane, "alice");
    (repository, node, alice, Volumes::new())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_devfile_workspace_runs_its_containers_project_volume_and_post_start() {
    if !node_up() {
        return;
    }
    let (repository, node, alice, mut volumes) = setting_up("df");
    let note = "echo written by postStart in $(pwd) > /cache/note";
    create(&node, &alice, &mut volumes, "web", &devfile(repository.port, "app.git", note));
    let running = node.actual("web", "Running").await;
    assert_eq!(running["error"], serde_json::Value::Null, "{running:#}");
    let namespace = running["namespace"].as_str().expect("a namespace").to_string();
    let containers =
        kubectl_ok(env(), &["-n", &namespace, "get", "pods", "-o", "jsonpath={.items[0].spec.containers[*].name}"]);
    assert_eq!(containers, "main helper", "both containers run");

    let said = ssh_to(
        &node,
        &alice,
        "web",
        "cat /cache/note /projects/app/README; echo kept > /cache/kept; echo mine > /projects/app/mine",
        b"",
    );
    assert_eq!(
        said, "written by postStart in /projects/app\ncloned from the host\n",
        "the postStart ran in the checkout"
    );

    // Stopped and started: a new Pod, the same volume and checkout (the cloner keeps it).
    let first_pod = kubectl_ok(env(), &["-n", &namespace, "get", "pods", "-o", "jsonpath={.items[0].metadata.uid}"]);
    wsync_as(&node, &alice, &["workspaces", "stop", "web"]).output().expect("stop");
    node.actual("web", "Stopped").await;
    wsync_as(&node, &alice, &["workspaces", "start", "web"]).output().expect("start");
    node.actual("web", "Running").await;
    let said = ssh_to(&node, &alice, "web", "cat /cache/kept /projects/app/mine", b"");
    assert_eq!(said, "kept\nmine\n");
    // The stopped Pod may still be going (its grace period) when the new one runs.
    let pods = || kubectl_ok(env(), &["-n", &namespace, "get", "pods", "-o", "jsonpath={.items[*].metadata.uid}"]);
    let second_pod = eventually("the stopped Pod gone", LONG, || {
        Some(pods()).filter(|uids| !uids.is_empty() && !uids.contains(' '))
    })
    .await;
    assert_ne!(first_pod, second_pod, "a new Pod");
    let cloner =
        kubectl_ok(env(), &["-n", &namespace, "logs", "-l", "app.kubernetes.io/name=web", "-c", "gl-project-cloner"]);
    assert!(cloner.contains("/projects/app: cloned before, kept"), "{cloner}");
    drop(volumes_after_terminating(&node, &alice, "web", volumes).await);
}

/// Terminate `name` and wait until it is gone, so that its volumes can be deleted.
async fn volumes_after_terminating(node: &Node, token: &str, name: &str, volumes: Volumes) -> Volumes {
    wsync_as(node, token, &["workspaces", "terminate", name]).output().expect("terminate");
    node.actual(name, "Terminated").await;
    volumes
}

#[tokio::test(flavor = "multi_thread")]
async fn a_project_that_cannot_be_cloned_and_a_failing_post_start_are_reported_with_their_cause() {
    if !node_up() {
        return;
    }
    let (repository, node, alice, mut volumes) = setting_up("dx");
    create(&node, &alice, &mut volumes, "noclone", &devfile(repository.port, "missing.git", "true"));
    create(
        &node,
        &alice,
        &mut volumes,
        "badstart",
        &devfile(repository.port, "app.git", "echo the disk is full >&2; exit 3"),
    );

    let failed =
        node.wait("noclone", "to report its clone failing", |w| w["error"]["message"].as_str().is_some()).await;
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(failed["error"]["error_type"], "kubernetes", "{failed:#}");
    assert!(message.contains("\"gl-project-cloner\"") && message.contains("fatal:"), "Git's own words: {message}");

    let failed =
        node.wait("badstart", "to report its postStart failing", |w| w["error"]["message"].as_str().is_some()).await;
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(failed["error"]["error_type"], "kubernetes", "{failed:#}");
    assert!(
        message.contains("postStart command note failed (exit 3)") && message.contains("the disk is full"),
        "the command's output: {message}"
    );
    let volumes = volumes_after_terminating(&node, &alice, "noclone", volumes).await;
    drop(volumes_after_terminating(&node, &alice, "badstart", volumes).await);
}
