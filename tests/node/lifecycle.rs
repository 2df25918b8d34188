//! Workspaces on a real node, driven by the agent on the host: their whole life, and the real
//! failures a kubelet reports.

use crate::support::*;
use crate::*;
use serde_json::Value;
use std::time::Instant;

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_really_runs_stops_starts_and_terminates() {
    if !node_up() {
        return;
    }
    workspace_image();
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
    busybox_image(MEMORY_HOG_IMAGE, &["tail"], r#"["tail", "/dev/zero"]"#);
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

/// A Pod that runs but never passes its readiness probe: the rollout stalls, the Deployment
/// reports ProgressDeadlineExceeded, and GitLab's rules make the workspace Failed. The config is
/// a scripted control plane's, whose deadline is short; the rules are the real control plane's.
#[tokio::test(flavor = "multi_thread")]
async fn a_pod_that_never_gets_ready_fails_at_its_progress_deadline() {
    use crate::support::stub::{Script, StubControlPlane};
    use wsync::control_plane::decisions::rules::actual_state;
    use wsync::protocol::ActualState;
    if !node_up() {
        return;
    }
    workspace_image();
    let env = env();
    let id = unique_id("nr");
    let ns = format!("{id}-1");
    kubectl_apply(
        env,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels: {{{TEST_LABEL}: {id}, {LABEL_KEY}: {id}}}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: unready\n  namespace: {ns}\n  labels: {{{LABEL_KEY}: {id}}}\n\
             spec:\n  progressDeadlineSeconds: 10\n  selector: {{matchLabels: {{app: unready}}}}\n  template:\n\
             \x20   metadata: {{labels: {{app: unready}}}}\n    spec:\n      containers:\n      - name: main\n\
             \x20       image: {WORKSPACE_IMAGE}\n        readinessProbe: {{exec: {{command: [/bin/sleep, nonsense]}}, periodSeconds: 1}}\n"
        ),
    );
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let (_, failed) = stub
        .wait_for("the workspace Failed", 0, LONG, |r| {
            r.request
                .workspace_agent_infos
                .iter()
                .any(|i| i.name == "unready" && actual_state(i) == ActualState::Failed)
        })
        .await;
    let info = failed.request.workspace_agent_infos.iter().find(|i| i.name == "unready").expect("reported");
    assert!(info.error_details.is_none(), "not a Pod failure the agent names: {:?}", info.error_details);
    let pods: Value = serde_json::from_str(&kubectl_ok(env, &["-n", &ns, "get", "pods", "-o", "json"])).expect("json");
    let status = &pods["items"][0]["status"];
    assert_eq!(status["phase"], "Running", "a real container, running: {status}");
    assert_eq!(status["containerStatuses"][0]["ready"], false, "never Ready: {status}");
}

/// The node's kubelet is a production one (#37): an anonymous request is refused, a token is
/// checked by a TokenReview and its rights by a SubjectAccessReview, and the apiserver reaches
/// it (kubectl logs) with its client certificate.
#[tokio::test(flavor = "multi_thread")]
async fn the_kubelet_refuses_anonymous_and_unauthorized_requests() {
    if !node_up() {
        return;
    }
    let env = env();
    let status = |token: Option<&str>| {
        let mut curl = std::process::Command::new("curl");
        curl.args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5"]);
        if let Some(token) = token {
            curl.args(["-H", &format!("Authorization: Bearer {token}")]);
        }
        let out = curl.arg(format!("https://{NODE_IP}:10250/pods")).output().expect("curl");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    assert_eq!(status(None), "401", "anonymous");
    let nobody = unique_id("kubelet-nobody");
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "create", "serviceaccount", &nobody]);
    let token = kubectl_ok(env, &["-n", AGENT_NAMESPACE, "create", "token", &nobody, "--duration=10m"]);
    assert_eq!(status(Some(token.trim())), "403", "a token without nodes/proxy");
    let admin = std::fs::read_to_string(&env.admin_kubeconfig).expect("admin kubeconfig");
    let admin_token = admin.lines().find_map(|l| l.trim().strip_prefix("token: ")).expect("admin token");
    assert_eq!(status(Some(admin_token)), "200", "the cluster's admin");
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "delete", "serviceaccount", &nobody]);
}
