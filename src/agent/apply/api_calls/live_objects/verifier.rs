//! The drift check's LIST, against a tower-test apiserver (DESIGN §4): the exact requests a
//! full resync sends to learn what is live. Each allowed kind but Secret is listed by the
//! agent's label, 500 a page, following `continue`; never a Secret, never an RBAC kind, and in
//! shared-namespace mode only that namespace.

use crate::agent::apply::Applier;
use crate::agent::k8s::ClusterConfig;
use crate::agent::mock_apiserver;
use crate::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;
use crate::agent::policy::plan::ApplyPolicy;
use crate::agent::policy::shared_namespace::NamespaceMode;
use http::{Method, StatusCode};
use serde_json::{Value, json};

const SELECTOR: &str = "labelSelector=agent.gitlab.com%2Fid%3Dagent-1";

fn resources(group_version: &str, kinds: &[(&str, &str)]) -> Value {
    let resources: Vec<Value> = kinds
        .iter()
        .map(|(plural, kind)| {
            json!({"name": plural, "singularName": "", "namespaced": true, "kind": kind,
                   "verbs": ["get", "list", "watch", "create", "patch", "delete"]})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

fn group(name: &str) -> Value {
    let version = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
    json!({"name": name, "versions": [version], "preferredVersion": version})
}

fn list(items: Vec<Value>, continue_token: &str) -> Value {
    json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "7", "continue": continue_token}, "items": items})
}

fn deployment(name: &str) -> Value {
    json!({"metadata": {"name": name, "namespace": format!("ns-{name}"), "labels": {"agent.gitlab.com/id": "agent-1"}}})
}

/// What the apiserver answers at `uri`: discovery for the default kinds and RBAC, and LISTs,
/// Deployments in two pages.
fn answer_for(uri: &str) -> Value {
    let path = uri.split('?').next().unwrap_or_default();
    match path {
        "/api" => json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
        "/api/v1" => resources(
            "v1",
            &[
                ("configmaps", "ConfigMap"),
                ("secrets", "Secret"),
                ("services", "Service"),
                ("persistentvolumeclaims", "PersistentVolumeClaim"),
                ("serviceaccounts", "ServiceAccount"),
                ("resourcequotas", "ResourceQuota"),
                ("limitranges", "LimitRange"),
            ],
        ),
        "/apis" => json!({"kind": "APIGroupList", "apiVersion": "v1",
                          "groups": [group("apps"), group("networking.k8s.io"), group("rbac.authorization.k8s.io")]}),
        "/apis/apps/v1" => resources("apps/v1", &[("deployments", "Deployment")]),
        "/apis/networking.k8s.io/v1" => resources("networking.k8s.io/v1", &[("networkpolicies", "NetworkPolicy")]),
        "/apis/rbac.authorization.k8s.io/v1" => resources("rbac.authorization.k8s.io/v1", &[("roles", "Role")]),
        deployments if deployments.ends_with("/deployments") && !uri.contains("continue=") => {
            list(vec![deployment("a")], "page-2")
        }
        deployments if deployments.ends_with("/deployments") => list(vec![deployment("b")], ""),
        _ => list(Vec::new(), ""),
    }
}

/// The LISTs a full resync's drift check sends under `mode`, with every default kind and an
/// RBAC kind on the allow-list.
async fn lists(mode: NamespaceMode) -> Vec<String> {
    let (client, handle) = mock_apiserver::client();
    let asked = mock_apiserver::serve(handle, |method, uri, _| {
        assert_eq!(method, Method::GET, "the drift check only reads: {uri}");
        (StatusCode::OK, answer_for(uri))
    });
    let config = ClusterConfig::for_tests(mode.clone());
    let kinds = DEFAULT_ALLOWED_KINDS.iter().copied().chain(["rbac.authorization.k8s.io/Role"]);
    let policy = ApplyPolicy::new(kinds, "wsync-system").with_namespace_mode(mode);
    let applier = Applier::new(client, config, policy);
    applier.live_objects().await;
    let asked = asked.lock().expect("lock").clone();
    asked
        .into_iter()
        .filter_map(|asked| Some(asked.strip_prefix("GET ")?.to_string()))
        .filter(|uri| uri.contains('?'))
        .collect()
}

fn listed_paths(lists: &[String]) -> Vec<&str> {
    let mut paths: Vec<&str> = lists.iter().filter_map(|uri| uri.split('?').next()).collect();
    paths.sort_unstable();
    paths
}

#[tokio::test]
async fn each_allowed_kind_but_secret_is_listed_by_the_agents_label_a_page_at_a_time() {
    let lists = lists(NamespaceMode::PerWorkspace).await;
    assert_eq!(
        listed_paths(&lists),
        [
            "/api/v1/configmaps",
            "/api/v1/limitranges",
            "/api/v1/persistentvolumeclaims",
            "/api/v1/resourcequotas",
            "/api/v1/serviceaccounts",
            "/api/v1/services",
            "/apis/apps/v1/deployments",
            "/apis/apps/v1/deployments",
            "/apis/networking.k8s.io/v1/networkpolicies",
        ],
        "no Secret and no RBAC kind is listed: {lists:#?}"
    );
    for uri in &lists {
        assert!(uri.contains(SELECTOR) && uri.contains("limit=500"), "by the agent's label, 500 a page: {uri}");
    }
    let deployments: Vec<&String> = lists.iter().filter(|uri| uri.contains("/deployments")).collect();
    assert!(!deployments[0].contains("continue="), "{deployments:?}");
    assert!(deployments[1].contains("continue=page-2"), "the second page follows the first: {deployments:?}");
}

#[tokio::test]
async fn in_a_shared_namespace_only_that_namespace_is_listed() {
    let lists = lists(NamespaceMode::Shared("workspaces".into())).await;
    assert_eq!(lists.len(), 7, "the five kinds a shared namespace holds, Deployments in two pages: {lists:#?}");
    for uri in &lists {
        assert!(uri.contains("/namespaces/workspaces/") && uri.contains(SELECTOR), "{uri}");
        assert!(!uri.contains("resourcequotas") && !uri.contains("limitranges") && !uri.contains("secrets"), "{uri}");
    }
}
