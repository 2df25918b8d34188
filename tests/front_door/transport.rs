//! The connection under the requests: TLS, plain HTTP off loopback, timeouts, and the agent
//! tokens that authenticate over it.

use super::support::{self, ControlPlaneProcess};
use super::{http, sqlite};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::{Duration, Instant};

#[test]
fn plain_http_off_loopback_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args([
            "control-plane",
            "--listen",
            &format!("0.0.0.0:{}", support::free_port()),
            "--database-url",
            &sqlite(&dir),
        ])
        .output()
        .expect("run wsync");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("refusing to serve plain HTTP") && stderr.contains("--tls-cert-file"), "{stderr}");
}

/// A guessable admin or metrics token is refused at start, with how to make a good one.
#[test]
fn a_weak_admin_or_metrics_token_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let weak = dir.path().join("weak-token");
    let strong = dir.path().join("strong-token");
    std::fs::write(&weak, "x\n").unwrap();
    std::fs::write(&strong, support::secret_token("admin")).unwrap();
    let (weak, strong) = (weak.display().to_string(), strong.display().to_string());
    for (flags, which) in [
        (vec!["--admin-token-file", weak.as_str()], "admin token"),
        (vec!["--admin-token-file", strong.as_str(), "--metrics-token-file", weak.as_str()], "metrics token"),
    ] {
        let listen = format!("127.0.0.1:{}", support::free_port());
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
            .args(["control-plane", "--listen", &listen, "--database-url", &sqlite(&dir)])
            .args(&flags)
            .output()
            .expect("run wsync");
        assert!(!out.status.success(), "{which}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(which) && stderr.contains("too weak") && stderr.contains("openssl rand -hex 32"),
            "{stderr}"
        );
    }
}

/// A head dribbled a byte at a time, an idle connection, and an idle kept-alive one are all
/// closed within the header timeout (1 s here).
#[tokio::test(flavor = "multi_thread")]
async fn dribbled_headers_and_idle_connections_are_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let control_plane =
        ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("control-plane.log"), &["--header-timeout", "1s"]);
    let address = control_plane.url.trim_start_matches("http://").to_string();

    let started = Instant::now();
    let mut dribbler = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\n");
    let mut closed_after = None;
    for byte in head.bytes().chain(std::iter::repeat(b'x')).take(200) {
        if dribbler.write_all(&[byte]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut buffer = [0u8; 256];
        match tokio::time::timeout(Duration::from_millis(200), dribbler.read(&mut buffer)).await {
            Ok(Ok(0) | Err(_)) => {
                closed_after = Some(started.elapsed());
                break;
            }
            Ok(Ok(_)) => {} // A 408, say; the close follows.
            Err(_) => {}
        }
    }
    let closed_after = closed_after.expect("the dribbler was never cut off");
    assert!(closed_after < Duration::from_secs(3), "cut off after {closed_after:?}");

    let idle_for = |mut stream: tokio::net::TcpStream| async move {
        let started = Instant::now();
        let mut buffer = vec![0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer)).await {
                Ok(Ok(0) | Err(_)) => return started.elapsed(),
                Ok(Ok(_)) => continue,
                Err(_) => panic!("an idle connection stayed open 5 s"),
            }
        }
    };
    let idle = tokio::net::TcpStream::connect(&address).await.unwrap();
    assert!(idle_for(idle).await < Duration::from_secs(3));
    let mut kept_alive = tokio::net::TcpStream::connect(&address).await.unwrap();
    kept_alive.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {address}\r\n\r\n").as_bytes()).await.unwrap();
    assert!(idle_for(kept_alive).await < Duration::from_secs(3), "a kept-alive connection idles out too");
    assert!(support::http_ok(&format!("{}/healthz", control_plane.url)), "and the server serves on");
}

/// TLS with a throw-away CA: the CLI trusts it with `--ca-file`; without the CA, or over
/// plain HTTP, nothing gets through.
#[tokio::test(flavor = "multi_thread")]
async fn tls_with_a_throwaway_ca() {
    let dir = tempfile::tempdir().unwrap();
    let tls = support::tls::Tls::throwaway(dir.path());
    let control_plane = ControlPlaneProcess::start_tls(&sqlite(&dir), dir.path().join("control-plane.log"), &tls, &[]);
    assert!(control_plane.url.starts_with("https://"));
    control_plane.cli(&["agents", "register", "a1"]);
    let untrusted = std::process::Command::new("curl")
        .args(["-fs", "-o", "/dev/null", "--max-time", "5", &format!("{}/healthz", control_plane.url)])
        .status()
        .unwrap();
    assert!(!untrusted.success(), "a client without the CA does not connect");
    let plain = control_plane.url.replace("https://", "http://");
    assert!(!support::http_ok(&format!("{plain}/healthz")), "plain HTTP to the TLS port gets nothing");
    let page = std::process::Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "--cacert"])
        .arg(&tls.ca)
        .arg(format!("{}/sign-in", control_plane.url))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&page.stdout).contains("200"), "{}", String::from_utf8_lossy(&page.stdout));
    let signed_in = std::process::Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "--cacert"])
        .arg(&tls.ca)
        .args([
            "-H",
            &format!("Origin: {}", control_plane.url),
            "--data",
            &format!("token={}", control_plane.admin_token),
        ])
        .arg(format!("{}/sign-in", control_plane.url))
        .output()
        .unwrap();
    let headers = String::from_utf8_lossy(&signed_in.stdout).to_lowercase();
    assert!(headers.contains("set-cookie:") && headers.contains("; secure"), "a Secure cookie over TLS: {headers}");
}

/// A rotated token keeps working for its grace period, then stops; a revoked agent is refused
/// with every token; rotating again lets it back in with the new one only.
#[tokio::test(flavor = "multi_thread")]
async fn agent_tokens_rotate_with_a_grace_period_and_revoke() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("control-plane.log"), &[]);
    let token_of = |answer: String| -> String {
        let answer: Value = serde_json::from_str(&answer).expect("json");
        answer["token"].as_str().expect("a token").to_string()
    };
    let first = token_of(control_plane.cli(&["agents", "register", "a1", "-o", "json"]));
    let reconcile = |token: &str| {
        let request = http()
            .post(format!("{}{}", control_plane.url, wsync::protocol::RECONCILE_PATH))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(r#"{"update_type": "partial", "workspace_agent_infos": []}"#);
        async move { request.send().await.expect("an answer").status() }
    };
    assert_eq!(reconcile(&first).await, StatusCode::CREATED);
    let second = token_of(control_plane.cli(&["agents", "rotate-token", "a1", "--grace", "2s", "-o", "json"]));
    assert_eq!((reconcile(&first).await, reconcile(&second).await), (StatusCode::CREATED, StatusCode::CREATED));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(reconcile(&first).await, StatusCode::UNAUTHORIZED, "the grace period is over");
    assert_eq!(reconcile(&second).await, StatusCode::CREATED);

    control_plane.cli(&["agents", "revoke", "a1"]);
    assert_eq!(reconcile(&second).await, StatusCode::UNAUTHORIZED, "revoked");
    let third = token_of(control_plane.cli(&["agents", "rotate-token", "a1", "-o", "json"]));
    assert_eq!(reconcile(&third).await, StatusCode::CREATED);
    assert_eq!(reconcile(&second).await, StatusCode::UNAUTHORIZED, "a revoked token gets no grace period");
    let unknown = control_plane.try_cli(&["agents", "revoke", "nobody"]);
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("404"));
}

/// An unauthenticated 64 MiB reconcile upload is answered 401 before its body is read: the
/// real process's resident memory stays where it was.
#[tokio::test(flavor = "multi_thread")]
async fn an_unauthenticated_upload_leaves_memory_flat() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("control-plane.log"), &[]);
    let before = control_plane.rss_bytes();
    let address = control_plane.url.trim_start_matches("http://").to_string();
    let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    const TOTAL: usize = 64 * 1024 * 1024;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer not-a-token\r\n\
         Content-Type: application/json\r\nContent-Length: {TOTAL}\r\n\r\n",
        wsync::protocol::RECONCILE_PATH
    );
    write.write_all(head.as_bytes()).await.unwrap();
    let uploader = tokio::spawn(async move {
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < TOTAL {
            match tokio::time::timeout(Duration::from_secs(2), write.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                _ => break,
            }
        }
        sent
    });
    let mut answer = vec![0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), read.read(&mut answer)).await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 401"));
    let sent = uploader.await.unwrap();
    let after = control_plane.rss_bytes();
    let grew = after.saturating_sub(before);
    println!("64 MiB unauthenticated upload: {} KiB sent, RSS {} → {} KiB", sent / 1024, before / 1024, after / 1024);
    assert!(grew < 8 * 1024 * 1024, "the control plane grew {} KiB", grew / 1024);
}

/// A page's form posted without a session is answered 401 from its head: the server neither
/// waits for the body (here one that never comes) nor reads it.
#[tokio::test(flavor = "multi_thread")]
async fn a_form_without_a_session_is_refused_before_its_body() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("control-plane.log"), &[]);
    let address = control_plane.url.trim_start_matches("http://").to_string();
    for path in ["/agents/a1/workspaces/ws/stop", "/agents/a1/orphans/ns/ws/adopt", "/sign-out"] {
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: {address}\r\nOrigin: {}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 65536\r\n\r\ncsrf=",
            control_plane.url
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut answer = vec![0u8; 512];
        let n = tokio::time::timeout(Duration::from_secs(3), stream.read(&mut answer))
            .await
            .unwrap_or_else(|_| panic!("{path}: no answer while the body is outstanding"))
            .unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 401"), "{path}: {answer}");
    }
}

/// A session ends at `--session-ttl`: the page then sends the browser to sign in again, and a
/// form posted with the old cookie changes nothing. Pages keep `Origin` on their own forms
/// (`Referrer-Policy: same-origin`).
#[tokio::test(flavor = "multi_thread")]
async fn a_session_ends_at_its_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("control-plane.log");
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), log, &["--session-ttl", "2s"]);
    control_plane.cli(&["agents", "register", "a1"]);
    control_plane.cli(&["workspaces", "--agent", "a1", "create", "ws", "--image", "busybox:1.36"]);
    let (cookie, csrf) = super::sign_in(&control_plane).await;
    let page_url = format!("{}/agents/a1", control_plane.url);
    let page = http().get(&page_url).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(page.headers()["referrer-policy"], "same-origin");

    tokio::time::sleep(Duration::from_millis(2500)).await;
    let page = http().get(&page_url).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER, "an ended session is sent to sign in");
    assert_eq!(page.headers()["location"], "/sign-in?next=/agents/a1");
    let stop = http()
        .post(format!("{page_url}/workspaces/ws/stop"))
        .header("origin", &control_plane.url)
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(super::desired(&control_plane), "Running", "the old cookie changed nothing");
}

/// Past `--max-connections`, a connection waits in the kernel's backlog unserved, and is
/// served once one of the open ones closes.
#[tokio::test(flavor = "multi_thread")]
async fn connections_past_the_limit_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("control-plane.log");
    let limits = ["--max-connections", "2", "--agent-connections", "0", "--header-timeout", "30s"];
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), log, &limits);
    let address = control_plane.url.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(tokio::net::TcpStream::connect(&address).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let healthz = format!("{}/healthz", control_plane.url);
    assert!(!support::http_ok(&healthz), "a third connection is not served while two are open");
    drop(held);
    let started = Instant::now();
    while !support::http_ok(&healthz) {
        assert!(started.elapsed() < Duration::from_secs(5), "served once the others closed");
    }
}
