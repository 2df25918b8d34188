//! The CLI's streams to a workspace (#39), against the real control plane: `wsync workspaces
//! port-forward` and the `ssh` ProxyCommand form, as the workspace's user alone. The agent is
//! the test's own tunnel end (`workspace_hosts`); a real ssh session is the node tier's.

use super::support::ControlPlaneProcess;
use super::support::workspace_streams::{port_forward, through_stdio};
use super::workspace_support::{
    agent_tunnel, alice_and_bob_with_a_workspace, report_running, workspace_json, workspace_server, wsync_as,
};
use super::{http, sqlite};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_forwards_a_declared_port_and_is_an_ssh_proxy_command_for_its_user_alone() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &[]);
    let (agent_token, alice, bob) = alice_and_bob_with_a_workspace(&control_plane);

    // Not running yet: said at once.
    let early = wsync_as(&control_plane, &alice, &["workspaces", "--agent", "a1", "port-forward", "ide", "0:8080"])
        .output()
        .unwrap();
    assert!(!early.status.success());
    assert!(String::from_utf8_lossy(&early.stderr).contains("is CreationRequested; start it first"));

    report_running(&control_plane, &agent_token, "ide", 1).await;
    let pod = workspace_server().await;
    let tunnel = agent_tunnel(&control_plane, &agent_token, pod).await;

    // Bob: the same answer as a workspace that does not exist.
    let refused = wsync_as(&control_plane, &bob, &["workspaces", "--agent", "a1", "port-forward", "ide", "0:8080"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("404"), "{}", String::from_utf8_lossy(&refused.stderr));
    let undeclared =
        wsync_as(&control_plane, &alice, &["workspaces", "--agent", "a1", "port-forward", "ide", "0:9999"])
            .output()
            .unwrap();
    assert!(String::from_utf8_lossy(&undeclared.stderr).contains("declares no port 9999"));

    // Alice: a local port that is the workspace's, for every connection.
    let (mut forward, local) = port_forward(&mut wsync_as(
        &control_plane,
        &alice,
        &["workspaces", "--agent", "a1", "port-forward", "ide", "0:8080"],
    ));
    // Each connection its own stream: three clients, each its own connection.
    for _ in 0..3 {
        let seen: Value = http().get(format!("http://{local}/through")).send().await.unwrap().json().await.unwrap();
        assert_eq!(seen["path"], "/through");
    }
    let before = tunnel.asked.lock().unwrap().len();
    for _ in 0..3 {
        let client = reqwest::Client::new();
        let seen: Value = client.get(format!("http://{local}/again")).send().await.unwrap().json().await.unwrap();
        assert_eq!(seen["path"], "/again");
    }
    assert_eq!(tunnel.asked.lock().unwrap().len(), before + 3, "a stream for each connection");
    forward.kill().unwrap();
    let _ = forward.wait();

    // The ProxyCommand form: the stream on standard input and output; the workspace closes
    // after its answer, and the proxy ends though its input is still open.
    let proxy =
        wsync_as(&control_plane, &alice, &["workspaces", "--agent", "a1", "ssh", "ide", "--stdio", "--port", "8080"]);
    let answer = through_stdio(proxy, b"GET /by-stdio HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("/by-stdio"), "{answer}");
    assert!(workspace_json(&control_plane, "ide")["last_activity_at"].as_i64().is_some());
}
