//! The mocked-apiserver tier (DESIGN §4), as kube-rs/controller-rs builds it: a tower-test
//! service stands in for the apiserver, and each scenario checks the exact requests the agent
//! sends and answers them as the apiserver would.

use crate::agent::k8s::{Cluster, ClusterConfig};
use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

const LEDGER_PATH: &str = "/apis/wsync.dev/v1alpha1/namespaces/wsync-system/workspacesyncstatuses";

fn cluster() -> (Cluster, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let config = ClusterConfig::for_tests(Default::default());
    (Cluster::new(client, config), handle)
}

/// The next request: its method, path and query, content type, and JSON body (Null if none).
async fn next(handle: &mut Handle) -> (String, String, String, Value, tower_test::mock::SendResponse<Response<Body>>) {
    let (request, send) = handle.next_request().await.expect("the agent sent a request");
    let method = request.method().to_string();
    let uri = request.uri().to_string();
    let content_type =
        request.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let bytes = request.into_body().collect_bytes().await.expect("request body");
    let body = if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).expect("a JSON body") };
    (method, uri, content_type, body, send)
}

fn answer(send: tower_test::mock::SendResponse<Response<Body>>, status: StatusCode, body: &Value) {
    let bytes = serde_json::to_vec(body).expect("json");
    send.send_response(Response::builder().status(status).body(Body::from(bytes)).expect("response"));
}

fn ledger_object(resource_version: &str) -> Value {
    json!({
        "apiVersion": "wsync.dev/v1alpha1",
        "kind": "WorkspaceSyncStatus",
        "metadata": {"name": "agent-1", "namespace": "wsync-system", "resourceVersion": resource_version},
        "spec": {"agentId": "agent-1"},
    })
}

fn status_answer(code: u16, reason: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": reason, "reason": reason, "code": code})
}

#[tokio::test]
async fn the_status_is_written_by_server_side_apply_with_force_under_the_agents_field_manager() {
    let (cluster, mut handle) = cluster();
    let status = serde_json::value::to_raw_value(&json!({"epoch": 3, "workspaces": 2})).expect("raw");
    let write = tokio::spawn(async move { cluster.write_status(&status).await });

    let (method, uri, content_type, body, send) = next(&mut handle).await;
    assert_eq!(method, "PATCH");
    assert_eq!(uri, format!("{LEDGER_PATH}/agent-1/status?&force=true&fieldManager=wsync"));
    assert_eq!(content_type, "application/apply-patch+yaml");
    assert_eq!(
        body,
        json!({"apiVersion": "wsync.dev/v1alpha1", "kind": "WorkspaceSyncStatus", "status": {"epoch": 3, "workspaces": 2}}),
        "the whole status, with apiVersion and kind as server-side apply requires"
    );
    answer(send, StatusCode::OK, &ledger_object("8"));
    write.await.expect("task").expect("the write succeeds");
}

#[tokio::test]
async fn losing_the_race_to_create_the_ledger_object_reads_the_winners() {
    let (cluster, mut handle) = cluster();
    let ensure = tokio::spawn(async move { cluster.ensure_ledger_object().await });

    let (method, uri, _, _, send) = next(&mut handle).await;
    assert_eq!((method.as_str(), uri.as_str()), ("GET", format!("{LEDGER_PATH}/agent-1").as_str()));
    answer(send, StatusCode::NOT_FOUND, &status_answer(404, "NotFound"));

    let (method, uri, _, body, send) = next(&mut handle).await;
    assert_eq!((method.as_str(), uri.as_str()), ("POST", format!("{LEDGER_PATH}?").as_str()));
    assert_eq!(body["metadata"]["name"], "agent-1");
    assert_eq!(body["spec"], json!({"agentId": "agent-1", "paused": false}));
    answer(send, StatusCode::CONFLICT, &status_answer(409, "AlreadyExists"));

    let (method, uri, _, _, send) = next(&mut handle).await;
    assert_eq!((method.as_str(), uri.as_str()), ("GET", format!("{LEDGER_PATH}/agent-1").as_str()));
    answer(send, StatusCode::OK, &ledger_object("5"));

    let (object, created) = ensure.await.expect("task").expect("the winner's object is as good as ours");
    assert!(!created, "another replica created it");
    assert_eq!(object.metadata.resource_version.as_deref(), Some("5"));
}

#[tokio::test]
async fn a_missing_crd_is_a_clear_error_not_a_retry() {
    let (cluster, mut handle) = cluster();
    let check = tokio::spawn(async move { cluster.check_crd().await });
    let (method, uri, _, _, send) = next(&mut handle).await;
    assert_eq!((method.as_str(), uri.as_str()), ("GET", format!("{LEDGER_PATH}?&limit=1").as_str()));
    answer(send, StatusCode::NOT_FOUND, &status_answer(404, "NotFound"));
    let error = check.await.expect("task").expect_err("no CRD");
    assert!(matches!(error, crate::agent::error::Error::CrdMissing), "{error}");
    assert!(error.is_permanent());
}
