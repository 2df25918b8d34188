//! The agent's control-plane client against a local HTTP server: exact request shape,
//! only-201 success, token reloads, timeouts and bad bodies; and the transport rules that hold
//! whatever the control plane does (DESIGN §2, "Trust"): capped bodies, no redirects, TLS
//! verified.

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wsync::agent::control_plane_client::{ControlPlaneClient, ControlPlaneConfig};
use wsync::agent::error::ControlPlaneError;
use wsync::protocol::{RECONCILE_PATH, ReconcileRequest, UpdateType};

#[derive(Default)]
struct Seen {
    headers: Vec<HeaderMap>,
    bodies: Vec<serde_json::Value>,
}

/// Serve one fixed answer at the reconcile path; return the base URL and what was seen.
async fn serve(status: u16, body: &'static str, delay: Duration) -> (reqwest::Url, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let record = seen.clone();
    let app = axum::Router::new().route(
        RECONCILE_PATH,
        post(move |headers: HeaderMap, request: axum::body::Bytes| {
            let record = record.clone();
            async move {
                {
                    let mut seen = record.lock().unwrap();
                    seen.headers.push(headers);
                    seen.bodies.push(serde_json::from_slice(&request).unwrap_or_default());
                }
                tokio::time::sleep(delay).await;
                (StatusCode::from_u16(status).unwrap(), body)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    (url, seen)
}

fn config(url: reqwest::Url, token_file: &std::path::Path) -> ControlPlaneConfig {
    wsync::runtime::install_crypto_provider();
    ControlPlaneConfig {
        base_url: url,
        reconcile_path: RECONCILE_PATH.into(),
        prerequisites_path: wsync::protocol::PREREQUISITES_PATH.into(),
        token_file: token_file.into(),
        ca_file: None,
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_millis(500),
        max_response_bytes: 64 * 1024 * 1024,
        allow_insecure: false,
    }
}

fn client(url: reqwest::Url, token_file: &std::path::Path) -> ControlPlaneClient {
    ControlPlaneClient::new(&config(url, token_file)).unwrap()
}

fn empty_partial() -> ReconcileRequest {
    ReconcileRequest { update_type: UpdateType::Partial, workspace_agent_infos: vec![] }
}

fn token_file(token: &str) -> tempfile::NamedTempFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("{token}\n")).unwrap();
    file
}

#[tokio::test]
async fn request_shape_is_bearer_json_and_an_empty_array() {
    let (url, seen) = serve(201, r#"{"workspace_rails_infos": []}"#, Duration::ZERO).await;
    let token = token_file("s3cret");
    let response = client(url, token.path()).reconcile(&empty_partial()).await.unwrap();
    assert!(response.response.workspace_rails_infos.is_empty());
    let seen = seen.lock().unwrap();
    assert_eq!(seen.headers[0]["authorization"], "Bearer s3cret");
    assert_eq!(seen.headers[0]["content-type"], "application/json");
    assert_eq!(seen.bodies[0], serde_json::json!({"update_type": "partial", "workspace_agent_infos": []}));
}

#[tokio::test]
async fn only_201_is_success() {
    let token = token_file("t");
    for status in [200, 202, 204, 400, 401, 500] {
        let (url, _) = serve(status, r#"{"workspace_rails_infos": []}"#, Duration::ZERO).await;
        let error = client(url, token.path()).reconcile(&empty_partial()).await.unwrap_err();
        assert!(matches!(error, ControlPlaneError::Status { status: s, .. } if s == status), "{status}: {error}");
        assert_eq!(error.reason(), "ControlPlaneRejected");
    }
}

#[tokio::test]
async fn a_body_that_is_not_a_response_is_an_error() {
    let token = token_file("t");
    let (url, _) = serve(201, "<html>oops</html>", Duration::ZERO).await;
    let error = client(url, token.path()).reconcile(&empty_partial()).await.unwrap_err();
    assert_eq!(error.reason(), "ControlPlaneInvalidResponse", "{error}");
}

#[tokio::test]
async fn a_slow_control_plane_times_out() {
    let token = token_file("t");
    let (url, _) = serve(201, "{}", Duration::from_secs(3)).await;
    let error = client(url, token.path()).reconcile(&empty_partial()).await.unwrap_err();
    assert_eq!(error.reason(), "ControlPlaneTimeout", "{error}");
}

#[tokio::test]
async fn an_unreachable_control_plane_is_reported_as_such() {
    let token = token_file("t");
    let error =
        client("http://127.0.0.1:1".parse().unwrap(), token.path()).reconcile(&empty_partial()).await.unwrap_err();
    assert_eq!(error.reason(), "ControlPlaneUnreachable", "{error}");
}

#[tokio::test]
async fn the_token_is_reread_when_the_file_changes_and_never_shown() {
    let (url, seen) = serve(500, "nope", Duration::ZERO).await;
    let token = token_file("first-token");
    let client = client(url, token.path());
    let error = client.reconcile(&empty_partial()).await.unwrap_err();
    assert!(!format!("{error} {error:?} {client:?}").contains("first-token"));
    std::fs::write(token.path(), "second-token-longer\n").unwrap();
    let _ = client.reconcile(&empty_partial()).await;
    let seen = seen.lock().unwrap();
    assert_eq!(seen.headers[0]["authorization"], "Bearer first-token");
    assert_eq!(seen.headers[1]["authorization"], "Bearer second-token-longer");
}

#[tokio::test]
async fn a_missing_token_file_is_a_clear_error() {
    let (url, _) = serve(201, "{}", Duration::ZERO).await;
    let error = client(url, std::path::Path::new("/nonexistent/token")).reconcile(&empty_partial()).await.unwrap_err();
    assert_eq!(error.reason(), "TokenUnreadable");
    assert!(error.to_string().contains("/nonexistent/token"));
}

/// Serve a body of `size` bytes, streamed in 64 KiB chunks without a Content-Length.
async fn serve_streamed(size: usize) -> reqwest::Url {
    let app = axum::Router::new().route(
        RECONCILE_PATH,
        post(move || async move {
            let chunks = (0..size.div_ceil(65536)).map(|_| Ok::<_, std::io::Error>(vec![b' '; 65536]));
            (StatusCode::CREATED, axum::body::Body::from_stream(futures::stream::iter(chunks)))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    url
}

#[tokio::test]
async fn an_oversized_answer_is_refused_while_it_streams() {
    let token = token_file("t");
    let url = serve_streamed(8 * 1024 * 1024).await;
    let capped = ControlPlaneConfig {
        max_response_bytes: 1024 * 1024,
        request_timeout: Duration::from_secs(5),
        ..config(url, token.path())
    };
    let error = ControlPlaneClient::new(&capped).unwrap().reconcile(&empty_partial()).await.unwrap_err();
    assert!(matches!(error, ControlPlaneError::TooLarge { limit: 1048576 }), "{error}");
    assert_eq!(error.reason(), "ControlPlaneResponseTooLarge");
    // Announced too large: refused before a byte of it is read.
    let big: &'static str = Box::leak(" ".repeat(2 * 1024 * 1024).into_boxed_str());
    let (url, _) = serve(201, big, Duration::ZERO).await;
    let capped = ControlPlaneConfig { max_response_bytes: 1024 * 1024, ..config(url, token.path()) };
    let error = ControlPlaneClient::new(&capped).unwrap().reconcile(&empty_partial()).await.unwrap_err();
    assert!(matches!(error, ControlPlaneError::TooLarge { .. }), "{error}");
}

#[tokio::test]
async fn redirects_are_never_followed() {
    let (target, seen) = serve(201, r#"{"workspace_rails_infos": []}"#, Duration::ZERO).await;
    let location = format!("{target}{}", &RECONCILE_PATH[1..]);
    let app = axum::Router::new().route(
        RECONCILE_PATH,
        post(move || {
            let location = location.clone();
            async move { (StatusCode::TEMPORARY_REDIRECT, [("location", location)], "") }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    let token = token_file("t");
    let error = client(url, token.path()).reconcile(&empty_partial()).await.unwrap_err();
    assert_eq!(error.reason(), "ControlPlaneRedirected", "{error}");
    assert!(seen.lock().unwrap().headers.is_empty(), "the redirect's target was never asked, and never saw the token");
}

#[test]
fn plain_http_beyond_loopback_is_refused_unless_allowed() {
    let token = token_file("t");
    let remote: reqwest::Url = "http://control-plane.example.com".parse().unwrap();
    let error = ControlPlaneClient::new(&config(remote.clone(), token.path())).unwrap_err();
    assert_eq!(error.reason(), "InvalidConfiguration");
    assert!(error.to_string().contains("--allow-insecure-control-plane"), "{error}");
    assert!(
        ControlPlaneClient::new(&ControlPlaneConfig { allow_insecure: true, ..config(remote, token.path()) }).is_ok()
    );
}

/// A TLS server with a self-signed certificate for 127.0.0.1 (`openssl s_server`, which
/// answers any request with a 200 status page).
struct TlsServer {
    child: std::process::Child,
    url: reqwest::Url,
    cert: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_server() -> TlsServer {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-addext", "extendedKeyUsage=serverAuth", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is installed");
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = std::process::Command::new("openssl")
        .args(["s_server", "-quiet", "-www", "-accept", &port.to_string(), "-cert"])
        .arg(&cert)
        .arg("-key")
        .arg(&key)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("openssl s_server");
    for _ in 0..50 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    TlsServer { child, url: format!("https://127.0.0.1:{port}").parse().unwrap(), cert, _dir: dir }
}

#[tokio::test]
async fn tls_is_verified() {
    let server = tls_server();
    let token = token_file("t");
    let error = client(server.url.clone(), token.path()).prerequisites().await.unwrap_err();
    assert_eq!(error.reason(), "ControlPlaneUnreachable", "an unknown certificate is refused: {error}");
    assert!(error.to_string().contains("certificate"), "the operator is told why: {error}");
    // Trusted through --control-plane-ca-file, the handshake succeeds: s_server's status page
    // (it answers GETs only) is no prerequisites document.
    let trusted = ControlPlaneConfig {
        ca_file: Some(server.cert.clone()),
        request_timeout: Duration::from_secs(10),
        ..config(server.url.clone(), token.path())
    };
    let error = ControlPlaneClient::new(&trusted).unwrap().prerequisites().await.unwrap_err();
    assert_eq!(error.reason(), "ControlPlaneInvalidResponse", "{error}");
}
