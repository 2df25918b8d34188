//! The namespace rule under a race, against a tower-test apiserver: the namespace is missing
//! when the agent reads it, and someone else creates it before the agent's create. The create's
//! 409 is no licence: the agent reads the namespace again and, finding it unlabelled, refuses
//! it, without a PATCH (which would stamp the agent's label on a stranger's namespace).

use crate::agent::apply::Applier;
use crate::agent::k8s::ClusterConfig;
use crate::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;
use crate::agent::policy::plan::ApplyPolicy;
use crate::agent::policy::shared_namespace::NamespaceMode;
use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::json;
use std::sync::{Arc, Mutex};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

/// Answers: the first GET 404, the POST 409, later GETs the namespace with `labels`.
fn serve(mut handle: Handle, labels: serde_json::Value) -> Arc<Mutex<Vec<String>>> {
    let asked = Arc::new(Mutex::new(Vec::new()));
    let record = asked.clone();
    tokio::spawn(async move {
        let mut gets = 0;
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().clone();
            record.lock().expect("lock").push(format!("{method} {}", request.uri().path()));
            let (status, body) = match method {
                Method::GET if gets == 0 => {
                    gets += 1;
                    (
                        StatusCode::NOT_FOUND,
                        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": 404, "message": "namespaces \"taken\" not found"}),
                    )
                }
                Method::GET => (
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": "taken", "resourceVersion": "2", "labels": labels.clone()}}),
                ),
                Method::POST => (
                    StatusCode::CONFLICT,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": "AlreadyExists", "code": 409, "message": "namespaces \"taken\" already exists"}),
                ),
                _ => (StatusCode::OK, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "taken"}})),
            };
            let body = serde_json::to_vec(&body).expect("json");
            send.send_response(Response::builder().status(status).body(Body::from(body)).expect("response"));
        }
    });
    asked
}

async fn ensure(labels: serde_json::Value) -> (Result<(), String>, Vec<String>) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let asked = serve(handle, labels);
    let config = ClusterConfig::for_tests(NamespaceMode::PerWorkspace);
    let policy = ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), "wsync-system");
    let applier = Applier::new(kube::Client::new(service, "default"), config, policy);
    let result = applier.ensure_own_namespace("taken").await.map(|_| ()).map_err(|e| e.message);
    let asked = asked.lock().expect("lock").clone();
    (result, asked)
}

#[tokio::test]
async fn a_namespace_someone_else_created_meanwhile_is_refused_unpatched() {
    let (result, asked) = ensure(json!({"team": "someone-else"})).await;
    let refused = result.expect_err("refused");
    assert!(refused.contains("not labelled agent.gitlab.com/id=agent-1"), "{refused}");
    assert_eq!(asked, ["GET /api/v1/namespaces/taken", "POST /api/v1/namespaces", "GET /api/v1/namespaces/taken"]);
}

#[tokio::test]
async fn one_the_agent_itself_created_meanwhile_is_taken_and_labelled() {
    // Another replica's term, say: the agent's label, but not (yet) the Pod Security labels.
    let (result, asked) = ensure(json!({"agent.gitlab.com/id": "agent-1"})).await;
    assert_eq!(result, Ok(()));
    assert_eq!(asked.last().map(String::as_str), Some("PATCH /api/v1/namespaces/taken"), "{asked:?}");
}
