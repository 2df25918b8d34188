//! An agent's tunnel at the real control plane (#39): an HTTP/1.1 upgrade on the agent's own
//! token, refused before any upgrade without it, and closed once that token stops signing
//! (revoked, or rotated past its grace).

use super::sqlite;
use super::support::ControlPlaneProcess;
use std::time::Duration;
use wsync::tunnel::transport::serve_streams;
use wsync::tunnel::{OpenStream, StreamRefusal, TUNNEL_PATH, UPGRADE_PROTOCOL};

/// Ask for the tunnel as an agent does; the answer.
async fn ask(control_plane: &ControlPlaneProcess, token: &str, upgrade: Option<&str>) -> reqwest::Response {
    wsync::runtime::install_crypto_provider();
    let client = reqwest::Client::builder().http1_only().build().unwrap();
    let mut request = client.get(format!("{}{TUNNEL_PATH}", control_plane.url)).bearer_auth(token);
    if let Some(protocol) = upgrade {
        request = request.header("upgrade", protocol).header("connection", "upgrade");
    }
    request.send().await.unwrap()
}

/// An agent end that refuses every stream: what it serves does not matter here, only how
/// long the tunnel lives.
async fn open_tunnel(control_plane: &ControlPlaneProcess, token: &str) -> tokio::task::JoinHandle<()> {
    let answer = ask(control_plane, token, Some(UPGRADE_PROTOCOL)).await;
    assert_eq!(answer.status().as_u16(), 101);
    let upgraded = answer.upgrade().await.unwrap();
    tokio::spawn(async move {
        let refuse = |open: OpenStream| async move {
            Err::<tokio::io::DuplexStream, _>(StreamRefusal::UndeclaredPort(open.port))
        };
        let _ = serve_streams(upgraded, refuse).await;
    })
}

fn token_of(registered: &str) -> String {
    let answer: serde_json::Value = serde_json::from_str(registered).unwrap();
    answer["token"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agent_opens_its_tunnel_with_its_token_and_loses_it_with_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane =
        ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &["--tunnel-recheck", "200ms"]);
    let token = token_of(&control_plane.cli(&["agents", "register", "a1", "-o", "json"]));

    assert_eq!(ask(&control_plane, "not-a-token", Some(UPGRADE_PROTOCOL)).await.status().as_u16(), 401);
    assert_eq!(ask(&control_plane, &control_plane.admin_token, Some(UPGRADE_PROTOCOL)).await.status().as_u16(), 401);
    let plain = ask(&control_plane, &token, None).await;
    assert_eq!(plain.status().as_u16(), 426, "a tunnel is an upgrade");
    assert_eq!(ask(&control_plane, &token, Some("websocket")).await.status().as_u16(), 426);

    // Open, it stays open; revoked, it closes.
    let tunnel = open_tunnel(&control_plane, &token).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!tunnel.is_finished(), "the tunnel stays open while its token signs");
    assert!(control_plane.logs().contains("an agent's tunnel opened"));
    control_plane.cli(&["agents", "revoke", "a1"]);
    tokio::time::timeout(Duration::from_secs(5), tunnel).await.expect("closed after the revocation").unwrap();
    assert!(control_plane.logs().contains("no longer signs for its agent"));

    // Rotated with no grace: the old token's tunnel closes, the new token opens another.
    let token = token_of(&control_plane.cli(&["agents", "rotate-token", "a1", "-o", "json"]));
    let tunnel = open_tunnel(&control_plane, &token).await;
    let rotated = token_of(&control_plane.cli(&["agents", "rotate-token", "a1", "--grace", "0s", "-o", "json"]));
    tokio::time::timeout(Duration::from_secs(5), tunnel).await.expect("closed after the rotation").unwrap();
    let tunnel = open_tunnel(&control_plane, &rotated).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!tunnel.is_finished(), "the new token's tunnel stays");

    // Asking again replaces it: an agent holds one tunnel here, however often it asks.
    let newer = open_tunnel(&control_plane, &rotated).await;
    tokio::time::timeout(Duration::from_secs(5), tunnel).await.expect("the older tunnel closed").unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!newer.is_finished(), "the newer stays");
}
