//! The tunnel's gate (#39): a hostile control plane holding the agent's tunnel asks it for
//! streams. It reaches a Ready Pod of one of the agent's own workspaces on a port that
//! workspace declares, and nothing else: not another namespace, not a namespace or a
//! Deployment that is not the agent's, not an undeclared port, not a Pod on the host's network
//! or one that only carries the workspace's labels, not a metadata or loopback address a Pod's
//! status names.

use super::*;
use tokio::io::AsyncReadExt;
use wsync::tunnel::OpenStream;
use wsync::tunnel::transport::OpenError;

/// A Deployment of one container `image` declaring `port`, its Pods labelled for the
/// stand-in, and the agent's label unless `labelled` is false.
fn deployment(id: &str, namespace: &str, name: &str, image: &str, labelled: bool, host_network: bool) -> String {
    let agent_label = if labelled { format!("\n    {LABEL_KEY}: \"{id}\"") } else { String::new() };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {namespace}
  labels:
    app: {name}{agent_label}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata:
      labels: {{app: {name}, {TEST_LABEL}: \"{id}\"}}
    spec:
      hostNetwork: {host_network}
      containers: [{{name: main, image: {image}, ports: [{{containerPort: 8080, name: web}}]}}]
"
    )
}

/// A Service that selects `name`'s Pods, its port 80 to their 8080.
fn service(namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  selector: {{app: {name}}}
  ports: [{{port: 80, targetPort: 8080}}]
"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_control_plane_reaches_nothing_through_the_tunnel_but_declared_ports() {
    let mut arena = Arena::start("tunnel", &[], &[]).await;
    let (env, id) = (arena.env, arena.id.clone());
    let ours = arena.attack_namespace(1);
    kubectl_ok(env, &["create", "namespace", &ours]);
    kubectl_ok(env, &["label", "namespace", &ours, &format!("{LABEL_KEY}={id}"), &format!("{TEST_LABEL}={id}")]);
    let victim = arena.victim.clone();
    let objects = [
        deployment(&id, &ours, "web", "standin/serves-here", true, false),
        service(&ours, "web"),
        deployment(&id, &ours, "metadata", "standin/link-local", true, false),
        deployment(&id, &ours, "loop", "standin/loopback", true, false),
        deployment(&id, &ours, "unlabelled", "standin/serves-here", false, false),
        deployment(&id, &ours, "hostnet", "standin/serves-here", true, true),
        deployment(&id, &victim, "stolen", "standin/serves-here", true, false),
    ];
    kubectl_apply(env, &objects.join("---\n"));
    // A bare Pod with the labels of `lookalike`, whose Deployment has none Ready.
    kubectl_apply(env, &deployment(&id, &ours, "lookalike", "standin/image-pull-backoff", true, false));
    kubectl_apply(
        env,
        &format!(
            "apiVersion: v1
kind: Pod
metadata: {{name: lookalike-bare, namespace: {ours}, labels: {{app: lookalike, {TEST_LABEL}: \"{id}\"}}}}
spec: {{containers: [{{name: main, image: standin/serves-here, ports: [{{containerPort: 8080}}]}}]}}
"
        ),
    );
    let kubelet = tokio::spawn(kubelet::run(admin_client(env).await, Some(format!("{TEST_LABEL}={id}"))));

    // What stands for the workspace's Pod: on this machine's address, the declared port.
    let listener = tokio::net::TcpListener::bind((kubelet::host_address(), 8080)).await.expect("bind the Pod's port");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = tokio::io::AsyncWriteExt::write_all(&mut socket, b"the workspace's own port\n").await;
            });
        }
    });
    eventually("every stand-in Pod Running", LONG, || {
        let phases = kubectl_ok(
            env,
            &["get", "pods", "-A", "-l", &format!("{TEST_LABEL}={id}"), "-o", "jsonpath={.items[*].status.phase}"],
        );
        let running = phases.split_whitespace().filter(|p| *p == "Running").count();
        (running >= 7).then_some(())
    })
    .await;

    let opener = arena.stub.tunnel(LONG).await;
    let open = |namespace: &str, workspace: &str, port: u16| OpenStream {
        namespace: namespace.to_string(),
        workspace: workspace.to_string(),
        port,
    };
    // The one stream it may have: the workspace's declared port, at its Pod.
    let mut stream = opener.open(&open(&ours, "web", 8080)).await.expect("the declared port opens");
    let mut greeting = String::new();
    tokio::time::timeout(LONG, stream.read_to_string(&mut greeting)).await.expect("an answer").expect("read");
    assert_eq!(greeting, "the workspace's own port\n");

    let attacks = [
        (open(&ours, "web", 6443), "undeclared_port"),
        (open(&ours, "web", 22), "undeclared_port"),
        (open(&ours, "web", 80), "undeclared_port"),
        (open("default", "kubernetes", 443), "not_our_workspace"),
        (open("kube-system", "kube-dns", 53), "not_our_workspace"),
        (open(&victim, "stolen", 8080), "not_our_workspace"),
        (open(&ours, "unlabelled", 8080), "not_our_workspace"),
        (open(&ours, "nothing-here", 8080), "not_our_workspace"),
        (open(&ours, "metadata", 8080), "forbidden_address"),
        (open(&ours, "loop", 8080), "forbidden_address"),
        (open(&ours, "hostnet", 8080), "no_pod"),
        (open(&ours, "lookalike", 8080), "no_pod"),
        (open("Not_A_Label", "web", 8080), "malformed"),
    ];
    arena.count_attacks(attacks.len());
    let mut landed = Vec::new();
    for (asked, expected) in &attacks {
        match opener.open(asked).await {
            Err(OpenError::Refused { label, .. }) if label == *expected => arena.refused_one(),
            Err(other) => landed.push(format!("{asked:?}: {other}, expected {expected}")),
            Ok(_) => landed.push(format!("{asked:?}: opened")),
        }
    }
    assert!(landed.is_empty(), "{landed:#?}");
    let scraped = std::process::Command::new("curl")
        .args(["-fs", &format!("http://127.0.0.1:{}/metrics", arena.agent.metrics_port)])
        .output()
        .expect("curl");
    let metrics = String::from_utf8_lossy(&scraped.stdout);
    for (label, count) in [("opened", 1), ("undeclared_port", 3), ("not_our_workspace", 5), ("forbidden_address", 2)] {
        let line = format!("wsync_tunnel_streams_total{{result=\"{label}\"}} {count}");
        assert!(metrics.contains(&line), "{line} in:\n{metrics}");
    }
    let logs = arena.agent.logs();
    assert!(logs.contains("refused a tunnel stream") && logs.contains("169.254.169.254"), "the address is logged");
    // The tunnel stays up through every refusal.
    assert!(opener.open(&open(&ours, "web", 8080)).await.is_ok());
    kubelet.abort();
    arena.good_syncs_on().await;
    arena.finish("the tunnel's streams");
}
