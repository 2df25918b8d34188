//! In a shared namespace, whose Pods a workspace's objects may select. Every workspace's Pods
//! live side by side there, and a NetworkPolicy's allows add up: a policy that selects another
//! workspace's Pods opens them. So each object that selects Pods (a NetworkPolicy, a
//! PodDisruptionBudget, a Service, a workload) must select by the workspace's own label, and
//! each Pod a workspace makes carries that label with its own value, so no other workspace's
//! Pods can be selected by it. Decided without I/O.

use super::pod_security::pod_spec;
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use serde_json::Value;

/// The label that names a workspace's Pods: the workspace's name, as the control plane's
/// Deployment, Service and NetworkPolicy select them.
pub const WORKSPACE_POD_LABEL: &str = "app.kubernetes.io/name";

/// Where an object of a kind that selects Pods keeps its label selector, and whether that is a
/// plain map (a Service's) rather than a LabelSelector.
fn selector_of(gvk: &GroupVersionKind) -> Option<(&'static str, bool)> {
    match (gvk.group.as_str(), gvk.kind.as_str()) {
        ("networking.k8s.io", "NetworkPolicy") => Some(("podSelector", false)),
        ("policy", "PodDisruptionBudget") => Some(("selector", false)),
        ("", "Service") => Some(("selector", true)),
        ("", "ReplicationController") => Some(("selector", true)),
        ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet") | ("batch", "Job") => {
            Some(("selector", false))
        }
        _ => None,
    }
}

/// Refuse an object of a shared namespace that would select, or make, Pods other than those
/// of `workspace`.
pub fn check(gvk: &GroupVersionKind, object: &DynamicObject, workspace: &str) -> Result<(), String> {
    let own = || format!("{WORKSPACE_POD_LABEL}: {workspace}");
    if let Some((field, plain)) = selector_of(gvk) {
        let selector = &object.data["spec"][field];
        // A Job's selector is the Job controller's to make; a Service without one selects nothing.
        let optional = (gvk.group == "batch" && gvk.kind == "Job") || gvk.kind == "Service";
        let unselected = optional && selector.is_null();
        if !unselected && !pins(selector, plain, workspace) {
            return Err(format!(
                "its spec.{field} must select its own workspace's Pods by matchLabels {}; in a shared namespace \
                 it would select other workspaces' Pods",
                own()
            ));
        }
    }
    let labels = match pod_spec(&gvk.group, &gvk.kind, &object.data) {
        Some(_) if gvk.group.is_empty() && gvk.kind == "Pod" => {
            object.metadata.labels.as_ref().and_then(|l| l.get(WORKSPACE_POD_LABEL)).map(String::as_str)
        }
        Some((path, _)) => {
            let template = path.strip_suffix(".spec").unwrap_or(path);
            let metadata = template.split('.').fold(&object.data, |value, key| &value[key]);
            metadata["metadata"]["labels"][WORKSPACE_POD_LABEL].as_str()
        }
        None => return Ok(()),
    };
    if labels != Some(workspace) {
        return Err(format!(
            "its Pods must carry the label {}: in a shared namespace, Pods labelled otherwise would be selected \
             by other workspaces' objects",
            own()
        ));
    }
    Ok(())
}

/// Whether `selector` selects only Pods labelled `WORKSPACE_POD_LABEL: workspace`: the pair is
/// in its matchLabels (or in the plain map), and any expressions only narrow it further.
fn pins(selector: &Value, plain: bool, workspace: &str) -> bool {
    let labels = if plain { selector } else { &selector["matchLabels"] };
    if labels[WORKSPACE_POD_LABEL].as_str() != Some(workspace) {
        return false;
    }
    // matchExpressions are ANDed with matchLabels; one the apiserver would refuse is refused here.
    plain || selector.get("matchExpressions").is_none_or(|e| e.is_null() || e.is_array())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn judge(value: Value) -> Result<(), String> {
        let object: DynamicObject = serde_json::from_value(value).unwrap();
        let gvk = GroupVersionKind::try_from(object.types.as_ref().unwrap()).unwrap();
        check(&gvk, &object, "alice")
    }

    fn network_policy(selector: Value) -> Value {
        json!({ "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": { "name": "alice" },
                "spec": { "podSelector": selector } })
    }

    #[test]
    fn a_network_policy_or_budget_selects_its_own_workspace_only() {
        let everything = [
            json!({}),
            json!({ "matchLabels": {} }),
            json!({ "matchExpressions": [{ "key": "x", "operator": "DoesNotExist" }] }),
            json!({ "matchLabels": { WORKSPACE_POD_LABEL: "bob" } }),
            json!({ "matchLabels": { "app": "alice" } }),
            json!({ "matchExpressions": [{ "key": WORKSPACE_POD_LABEL, "operator": "In", "values": ["alice"] }] }),
            json!({ "matchLabels": { WORKSPACE_POD_LABEL: "alice" }, "matchExpressions": "x" }),
            json!(null),
        ];
        for selector in everything {
            let refused = judge(network_policy(selector.clone())).unwrap_err();
            assert!(refused.contains("app.kubernetes.io/name: alice"), "{selector}: {refused}");
            let budget = json!({ "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": { "name": "a" },
                                 "spec": { "selector": selector } });
            assert!(judge(budget).is_err(), "{selector}");
        }
        let narrower = json!({ "matchLabels": { WORKSPACE_POD_LABEL: "alice", "tier": "web" },
                               "matchExpressions": [{ "key": "x", "operator": "DoesNotExist" }] });
        assert_eq!(judge(network_policy(narrower)), Ok(()));
    }

    #[test]
    fn a_workloads_pods_carry_their_workspaces_label_and_it_selects_them_by_it() {
        let deployment = |selector: Value, labels: Value| {
            json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "alice" },
                    "spec": { "selector": { "matchLabels": selector },
                              "template": { "metadata": { "labels": labels }, "spec": { "containers": [] } } } })
        };
        let own = json!({ WORKSPACE_POD_LABEL: "alice" });
        assert_eq!(judge(deployment(own.clone(), own.clone())), Ok(()));
        let posing = judge(deployment(own.clone(), json!({ WORKSPACE_POD_LABEL: "bob" }))).unwrap_err();
        assert!(posing.contains("must carry the label"), "{posing}");
        assert!(judge(deployment(json!({ "app": "x" }), own.clone())).is_err(), "would adopt others' Pods");
        let pod = |labels: Value| {
            json!({ "apiVersion": "v1", "kind": "Pod",
                                          "metadata": { "name": "p", "labels": labels }, "spec": {} })
        };
        assert_eq!(judge(pod(own.clone())), Ok(()));
        assert!(judge(pod(json!({}))).is_err());
    }

    #[test]
    fn a_service_routes_to_its_own_workspace_only() {
        let service = |selector: Value| {
            json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "alice" },
                                                "spec": { "selector": selector } })
        };
        assert_eq!(judge(service(json!({ WORKSPACE_POD_LABEL: "alice" }))), Ok(()));
        assert!(judge(service(json!({ WORKSPACE_POD_LABEL: "bob" }))).is_err());
        let headless = json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "a" }, "spec": {} });
        assert_eq!(judge(headless), Ok(()), "a Service without a selector selects no Pod");
        let config_map = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a" } });
        assert_eq!(judge(config_map), Ok(()));
    }
}
