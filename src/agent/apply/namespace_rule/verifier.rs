//! The namespace rule under a race, against a tower-test apiserver: the namespace is missing
//! when the agent reads it, and someone else creates it before the agent's create. The create's
//! 409 is no licence: the agent reads the namespace again and, finding it unlabelled, refuses
//! it, without a PATCH (which would stamp the agent's label on a stranger's namespace).

use crate::agent::apply::Applier;
use crate::agent::k8s::ClusterConfig;
use crate::agent::mock_apiserver::{self, status};
use crate::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;
use crate::agent::policy::plan::ApplyPolicy;
use crate::agent::policy::shared_namespace::NamespaceMode;
use http::{Method, StatusCode};
use serde_json::json;

async fn ensure(labels: serde_json::Value) -> (Result<(), String>, Vec<String>) {
    let (client, handle) = mock_apiserver::client();
    // The first GET 404, the POST 409, later GETs the namespace with `labels`.
    let mut gets = 0;
    let asked = mock_apiserver::serve(handle, move |method, _, _| match *method {
        Method::GET if gets == 0 => {
            gets += 1;
            (StatusCode::NOT_FOUND, status(404, "NotFound", "namespaces \"taken\" not found"))
        }
        Method::GET => (
            StatusCode::OK,
            json!({"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": "taken", "resourceVersion": "2", "labels": labels.clone()}}),
        ),
        Method::POST => (StatusCode::CONFLICT, status(409, "AlreadyExists", "namespaces \"taken\" already exists")),
        _ => (StatusCode::OK, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "taken"}})),
    });
    let config = ClusterConfig::for_tests(NamespaceMode::PerWorkspace);
    let policy = ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), "wsync-system");
    let applier = Applier::new(client, config, policy);
    let result = applier.ensure_own_namespace("taken").await.map(|_| ()).map_err(|e| e.message);
    // Paths only: what was asked, not how.
    let asked = asked.lock().expect("lock").iter().map(|a| a.split('?').next().unwrap_or(a).to_string()).collect();
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
