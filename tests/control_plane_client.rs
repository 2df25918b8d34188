//! The agent's control-plane client against a local HTTP server: exact request shape,
//! only-201 success, token reloads, timeouts and bad bodies.

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

fn client(url: reqwest::Url, token_file: &std::path::Path) -> ControlPlaneClient {
    wsync::runtime::install_crypto_provider();
    ControlPlaneClient::new(&ControlPlaneConfig {
        base_url: url,
        reconcile_path: RECONCILE_PATH.into(),
        prerequisites_path: wsync::protocol::PREREQUISITES_PATH.into(),
        token_file: token_file.into(),
        ca_file: None,
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_millis(500),
    })
    .unwrap()
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
    assert!(response.workspace_rails_infos.is_empty());
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
