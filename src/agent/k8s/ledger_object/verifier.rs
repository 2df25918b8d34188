//! The mocked-apiserver tier (DESIGN §4), as kube-rs/controller-rs builds it: a tower-test
//! service stands in for the apiserver, and each scenario checks the exact requests the agent
//! sends and answers them as the apiserver would.

use crate::agent::k8s::{Cluster, ClusterConfig};
use crate::agent::mock_apiserver::{self, Handle, next, status};
use http::{Method, StatusCode};
use serde_json::{Value, json};

const LEDGER_PATH: &str = "/apis/wsync.dev/v1alpha1/namespaces/wsync-system/workspacesyncstatuses";

fn cluster() -> (Cluster, Handle) {
    let (client, handle) = mock_apiserver::client();
    (Cluster::new(client, ClusterConfig::for_tests(Default::default())), handle)
}

fn ledger_object(resource_version: &str) -> Value {
    json!({
        "apiVersion": "wsync.dev/v1alpha1",
        "kind": "WorkspaceSyncStatus",
        "metadata": {"name": "agent-1", "namespace": "wsync-system", "resourceVersion": resource_version},
        "spec": {"agentId": "agent-1"},
    })
}

#[tokio::test]
async fn the_status_is_written_by_server_side_apply_with_force_under_the_agents_field_manager() {
    let (cluster, mut handle) = cluster();
    let status = serde_json::value::to_raw_value(&json!({"epoch": 3, "workspaces": 2})).expect("raw");
    let write = tokio::spawn(async move { cluster.write_status(&status).await });

    let patch = next(&mut handle).await;
    assert_eq!(patch.method, Method::PATCH);
    assert_eq!(patch.uri, format!("{LEDGER_PATH}/agent-1/status?&force=true&fieldManager=wsync"));
    assert_eq!(patch.content_type, "application/apply-patch+yaml");
    assert_eq!(
        patch.body,
        json!({"apiVersion": "wsync.dev/v1alpha1", "kind": "WorkspaceSyncStatus", "status": {"epoch": 3, "workspaces": 2}}),
        "the whole status, with apiVersion and kind as server-side apply requires"
    );
    patch.answer(StatusCode::OK, &ledger_object("8"));
    write.await.expect("task").expect("the write succeeds");
}

#[tokio::test]
async fn losing_the_race_to_create_the_ledger_object_reads_the_winners() {
    let (cluster, mut handle) = cluster();
    let ensure = tokio::spawn(async move { cluster.ensure_ledger_object().await });

    let get = next(&mut handle).await;
    assert_eq!((&get.method, get.uri.as_str()), (&Method::GET, format!("{LEDGER_PATH}/agent-1").as_str()));
    get.answer(StatusCode::NOT_FOUND, &status(404, "NotFound", "NotFound"));

    let create = next(&mut handle).await;
    assert_eq!((&create.method, create.uri.as_str()), (&Method::POST, format!("{LEDGER_PATH}?").as_str()));
    assert_eq!(create.body["metadata"]["name"], "agent-1");
    assert_eq!(create.body["spec"], json!({"agentId": "agent-1", "paused": false}));
    create.answer(StatusCode::CONFLICT, &status(409, "AlreadyExists", "AlreadyExists"));

    let get = next(&mut handle).await;
    assert_eq!((&get.method, get.uri.as_str()), (&Method::GET, format!("{LEDGER_PATH}/agent-1").as_str()));
    get.answer(StatusCode::OK, &ledger_object("5"));

    let (object, created) = ensure.await.expect("task").expect("the winner's object is as good as ours");
    assert!(!created, "another replica created it");
    assert_eq!(object.metadata.resource_version.as_deref(), Some("5"));
}

#[tokio::test]
async fn a_missing_crd_is_a_clear_error_not_a_retry() {
    let (cluster, mut handle) = cluster();
    let check = tokio::spawn(async move { cluster.check_crd().await });
    let list = next(&mut handle).await;
    assert_eq!((&list.method, list.uri.as_str()), (&Method::GET, format!("{LEDGER_PATH}?&limit=1").as_str()));
    list.answer(StatusCode::NOT_FOUND, &status(404, "NotFound", "NotFound"));
    let error = check.await.expect("task").expect_err("no CRD");
    assert!(matches!(error, crate::agent::error::Error::CrdMissing), "{error}");
    assert!(error.is_permanent());
}
