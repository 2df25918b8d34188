//! One full and one partial cycle against the mocked apiserver and an in-process control
//! plane, down to the status write: the exact requests a cycle sends to both, and the status
//! it writes. Scripted as a start would run them: a full cycle from a fresh LIST, then a
//! partial one that reports only the Deployment that changed.

use super::reconcile;
use crate::agent::apply::Applier;
use crate::agent::context::{Context, LoopConfig, Parts};
use crate::agent::control_plane_client::{ControlPlaneClient, ControlPlaneConfig};
use crate::agent::k8s::{Cluster, ClusterConfig};
use crate::agent::metrics::Metrics;
use crate::agent::mock_apiserver::{self, status};
use crate::agent::objects::WorkspaceDeployment;
use crate::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;
use crate::agent::policy::plan::ApplyPolicy;
use crate::agent::sync::index::SharedIndex;
use crate::agent::sync::ledger::Ledger;
use crate::agent::sync::workspace::DeploymentProjection;
use crate::crd::{WorkspaceSyncStatus, WorkspaceSyncStatusSpec};
use crate::protocol::{PREREQUISITES_PATH, RECONCILE_PATH, ReconcileRequest, UpdateType};
use http::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LEDGER_STATUS: &str = "/apis/wsync.dev/v1alpha1/namespaces/wsync-system/workspacesyncstatuses/agent-1/status";

fn deployment(resource_version: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "ws", "namespace": "ns-a", "resourceVersion": resource_version,
                        "labels": {"agent.gitlab.com/id": "agent-1"}},
           "spec": {"replicas": 1}})
}

/// The control plane: prerequisites, and a reconcile that acknowledges every Deployment
/// reported. Its URL, and the requests it received.
async fn control_plane() -> (String, Recorded<ReconcileRequest>) {
    let received = Arc::new(Mutex::new(Vec::new()));
    let record = received.clone();
    let reconcile = move |body: axum::body::Bytes| {
        let request: ReconcileRequest = serde_json::from_slice(&body).expect("a reconcile request");
        let infos: Vec<Value> = request
            .workspace_agent_infos
            .iter()
            .map(|info| {
                let rv = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.resource_version());
                json!({"name": info.name, "namespace": info.namespace, "desired_state": "Running",
                       "actual_state": "Running", "deployment_resource_version": rv, "config_to_apply": ""})
            })
            .collect();
        record.lock().expect("lock").push(request);
        async move { (StatusCode::CREATED, axum::Json(json!({"workspace_rails_infos": infos}))) }
    };
    let prerequisites = || async { axum::Json(json!({"shared_namespace": ""})) };
    let router = axum::Router::new()
        .route(PREREQUISITES_PATH, axum::routing::get(prerequisites))
        .route(RECONCILE_PATH, axum::routing::post(reconcile));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, router).await.ok() });
    (url, received)
}

type Recorded<T> = Arc<Mutex<Vec<T>>>;

/// The apiserver: the Deployments' LIST, and the status write, whose bodies it keeps.
fn apiserver(handle: mock_apiserver::Handle) -> (Recorded<String>, Recorded<Value>) {
    let written = Arc::new(Mutex::new(Vec::new()));
    let statuses = written.clone();
    let asked =
        mock_apiserver::serve(handle, move |method, uri, body| match (method, uri.split('?').next().unwrap_or(uri)) {
            (&Method::GET, "/apis/apps/v1/deployments") => (
                StatusCode::OK,
                json!({"kind": "DeploymentList", "apiVersion": "apps/v1",
                       "metadata": {"resourceVersion": "10"}, "items": [deployment("10")]}),
            ),
            (&Method::PATCH, LEDGER_STATUS) => {
                statuses.lock().expect("lock").push(body["status"].clone());
                (
                    StatusCode::OK,
                    json!({"apiVersion": "wsync.dev/v1alpha1", "kind": "WorkspaceSyncStatus",
                           "metadata": {"name": "agent-1", "namespace": "wsync-system"},
                           "spec": {"agentId": "agent-1"}}),
                )
            }
            _ => (StatusCode::NOT_FOUND, status(404, "NotFound", "not scripted")),
        });
    (asked, written)
}

/// A term's context, and the sender that keeps it leading.
fn context(
    client: kube::Client,
    url: &str,
    token: &std::path::Path,
    index: SharedIndex,
) -> (Arc<Context>, tokio::sync::watch::Sender<bool>) {
    let config = ClusterConfig::for_tests(Default::default());
    let policy = ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), "wsync-system");
    let control_plane = ControlPlaneClient::new(&ControlPlaneConfig {
        base_url: url.parse().expect("a URL"),
        reconcile_path: RECONCILE_PATH.into(),
        prerequisites_path: PREREQUISITES_PATH.into(),
        token_file: token.to_path_buf(),
        ca_file: None,
        connect_timeout: Duration::from_secs(5),
        request_timeout: Duration::from_secs(5),
        max_response_bytes: 1 << 20,
        allow_insecure: false,
    })
    .expect("a client");
    let (leader, leading) = tokio::sync::watch::channel(true);
    let parts = Parts {
        cluster: Cluster::new(client.clone(), config.clone()),
        applier: Applier::new(client, config, policy),
        control_plane,
        index,
        config: LoopConfig {
            min_cycle_gap: Duration::ZERO,
            apply_concurrency: 1,
            apply_timeout: Duration::from_secs(5),
            termination_timeout: Duration::from_secs(60),
        },
        metrics: Metrics::new(),
        leading,
    };
    (Arc::new(Context::new(parts, Ledger::restore(None), None)), leader)
}

#[tokio::test]
async fn a_full_then_a_partial_cycle_send_what_they_should_and_write_the_status() {
    crate::runtime::install_crypto_provider();
    let (url, received) = control_plane().await;
    let token = tempfile::NamedTempFile::new().expect("token file");
    std::fs::write(token.path(), "agent-token").expect("token");
    let (client, handle) = mock_apiserver::client();
    let (asked, written) = apiserver(handle);
    let index = SharedIndex::default();
    let (ctx, _leader) = context(client, &url, token.path(), index.clone());
    let spec = WorkspaceSyncStatusSpec { agent_id: "agent-1".into(), paused: false };
    let wss = Arc::new(WorkspaceSyncStatus::new("agent-1", spec));

    reconcile(wss.clone(), ctx.clone()).await.expect("the full cycle");
    let paths = |asked: &Mutex<Vec<String>>| -> Vec<String> {
        asked.lock().expect("lock").iter().map(|a| a.split('?').next().unwrap_or(a).to_string()).collect()
    };
    let status_write = format!("PATCH {LEDGER_STATUS}");
    assert_eq!(paths(&asked), ["GET /apis/apps/v1/deployments", status_write.as_str()], "a LIST, then the status");
    let full = received.lock().expect("lock")[0].clone();
    assert_eq!((full.update_type, full.workspace_agent_infos.len()), (UpdateType::Full, 1));
    let status = written.lock().expect("lock")[0].clone();
    assert_eq!(status["acknowledged"], json!({"ns-a/ws": "10"}), "{status}");
    assert_eq!((status["workspaces"].as_u64(), status["epoch"].as_u64()), (Some(1), Some(1)), "{status}");
    assert!(status["lastFullSyncTime"].is_string(), "{status}");

    // The watch brings a changed Deployment: the partial cycle reports it alone, reads nothing.
    let changed: WorkspaceDeployment = serde_json::from_value(deployment("11")).expect("a Deployment");
    index.lock().upsert(DeploymentProjection::from_deployment(changed).expect("projected"));
    reconcile(wss, ctx).await.expect("the partial cycle");
    let partial = received.lock().expect("lock")[1].clone();
    assert_eq!((partial.update_type, partial.workspace_agent_infos.len()), (UpdateType::Partial, 1));
    assert_eq!(paths(&asked)[2..], [status_write], "no LIST: only the status write");
    let statuses = written.lock().expect("lock").clone();
    assert_eq!(statuses[1]["acknowledged"], json!({"ns-a/ws": "11"}));
    assert_eq!(statuses[1]["lastFullSyncTime"], statuses[0]["lastFullSyncTime"], "a partial cycle leaves it");
}
