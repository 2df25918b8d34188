//! One client cannot hold the connections (#37): each address has its share of the open
//! connections and of the requests in flight, and past the shared pool a reserve serves the
//! agents only, so browsers holding every connection do not stop the reconciles. The clients
//! here come from distinct loopback addresses (127.0.0.2, .3, …), as distinct hosts would.

use super::sqlite;
use super::support::ControlPlaneProcess;
use reqwest::StatusCode;
use serde_json::Value;
use std::net::IpAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A connection from `from` to the control plane, holding nothing yet.
async fn connect_from(from: &str, control_plane: &ControlPlaneProcess) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    socket.connect(control_plane.url.trim_start_matches("http://").parse().unwrap()).await.unwrap()
}

/// A client whose requests come from `from`.
fn client_from(from: &str) -> reqwest::Client {
    let address: IpAddr = from.parse().unwrap();
    wsync::runtime::install_crypto_provider();
    reqwest::Client::builder().local_address(address).pool_max_idle_per_host(0).build().unwrap()
}

/// One GET on `stream`; the status line's code, or None when the connection was closed.
async fn get_on(stream: &mut TcpStream, path: &str) -> Option<u16> {
    stream.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.ok()?;
    let mut head = [0u8; 12];
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut head)).await.ok()?;
    read.ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_address_holds_only_its_share_of_the_connections() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--max-connections", "4", "--agent-connections", "2", "--max-connections-per-address", "2"];
    let control_plane = ControlPlaneProcess::start(
        &sqlite(&dir),
        dir.path().join("cp.log"),
        &[&flags[..], &["--header-timeout", "30s"]].concat(),
    );
    let mut hog = Vec::new();
    for _ in 0..2 {
        let mut held = connect_from("127.0.0.2", &control_plane).await;
        assert_eq!(get_on(&mut held, "/healthz").await, Some(200), "its share is served");
        hog.push(held);
    }
    let mut past_share = connect_from("127.0.0.2", &control_plane).await;
    assert_eq!(
        get_on(&mut past_share, "/healthz").await,
        Some(503),
        "past its share, a reserve connection serves agents only"
    );
    for _ in 0..3 {
        hog.push(connect_from("127.0.0.2", &control_plane).await);
    }
    let answered = client_from("127.0.0.3").get(format!("{}/healthz", control_plane.url)).send().await.unwrap();
    assert_eq!(answered.status(), StatusCode::OK, "another address is served while the first holds its share");
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_reconcile_while_browsers_hold_every_shared_connection() {
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--max-connections", "3", "--agent-connections", "2", "--header-timeout", "30s"];
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &flags);
    let registered: Value =
        serde_json::from_str(&control_plane.cli(&["agents", "register", "a1", "-o", "json"])).unwrap();
    let token = registered["token"].as_str().expect("a token").to_string();
    let mut browsers = Vec::new();
    for from in ["127.0.0.2", "127.0.0.3", "127.0.0.4"] {
        let mut held = connect_from(from, &control_plane).await;
        assert_eq!(get_on(&mut held, "/healthz").await, Some(200));
        browsers.push(held);
    }
    let mut late = connect_from("127.0.0.5", &control_plane).await;
    assert_eq!(get_on(&mut late, "/").await, Some(503), "a browser gets a reserve connection's refusal");
    assert_eq!(get_on(&mut late, "/healthz").await, None, "and the connection is closed, not held");
    let mut asking = connect_from("127.0.0.5", &control_plane).await;
    let reconcile_path = wsync::protocol::RECONCILE_PATH;
    assert_eq!(get_on(&mut asking, reconcile_path).await, Some(405), "an agent's path, asked wrong");
    assert_eq!(get_on(&mut asking, reconcile_path).await, None, "closed after any answer but a success");

    let reconcile = format!("{}{}", control_plane.url, wsync::protocol::RECONCILE_PATH);
    let report = serde_json::json!({ "update_type": "full", "workspace_agent_infos": [] });
    let agent = client_from("127.0.0.6");
    let answer = agent.post(&reconcile).bearer_auth(&token).json(&report).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::CREATED, "the agent's reconcile is served from its reserve");
    let guess = agent.post(&reconcile).bearer_auth("guessed").json(&report).send().await.unwrap();
    assert_eq!(guess.status(), StatusCode::UNAUTHORIZED, "a wrong token on the reserve is refused, and closed");
    drop(browsers);
}

/// A request held open (its body dribbled) takes its address's one slot in flight; the next
/// from that address is refused with 429, another address's is served.
#[tokio::test(flavor = "multi_thread")]
async fn one_address_holds_only_its_share_of_the_requests_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane =
        ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &["--max-requests-per-address", "1"]);
    control_plane.cli(&["agents", "register", "a1"]);
    let mut slow = connect_from("127.0.0.2", &control_plane).await;
    let head = format!(
        "POST /api/v1/agents/a1/workspaces HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{",
        control_plane.url.trim_start_matches("http://"),
        control_plane.admin_token
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = client_from("127.0.0.2").get(format!("{}/healthz", control_plane.url)).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    let other = client_from("127.0.0.3").get(format!("{}/healthz", control_plane.url)).send().await.unwrap();
    assert_eq!(other.status(), StatusCode::OK);
    drop(slow);
}
