use super::*;
use serde_json::json;

/// A ConfigMap as the agent sends it.
fn desired() -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "ws", "labels": {"agent.gitlab.com/id": "7"}},
        "data": {"a": "1", "b": "two"}
    })
}

/// The same object as the apiserver keeps it, with `fields` as the agent's managedFields.
fn live(data: Value, fields: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {
            "name": "cm", "namespace": "ws", "uid": "u-1", "resourceVersion": "42",
            "creationTimestamp": "2026-12-04T00:00:00Z",
            "labels": {"agent.gitlab.com/id": "7", "added-by-hand": "x"},
            "managedFields": [
                {"manager": "wsync", "operation": "Apply", "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields},
                {"manager": "kubectl", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {"f:added-by-hand": {}}}}}
            ]
        },
        "data": data
    })
}

fn all_owned() -> Value {
    json!({"f:metadata": {"f:labels": {"f:agent.gitlab.com/id": {}}}, "f:data": {".": {}, "f:a": {}, "f:b": {}}})
}

fn snapshot(objects: &[Value]) -> LiveObjects {
    let mut live = LiveObjects::new("wsync");
    live.listed_whole("", "ConfigMap");
    objects.iter().for_each(|o| live.observe("", "ConfigMap", o));
    live
}

#[test]
fn an_object_no_one_changed_is_in_sync() {
    let live = snapshot(&[live(json!({"a": "1", "b": "two"}), all_owned())]);
    assert!(live.in_sync(&desired(), "ws"));
    // The namespace may come from the workspace rather than the object.
    let mut without_namespace = desired();
    without_namespace["metadata"].as_object_mut().unwrap().remove("namespace");
    assert!(live.in_sync(&without_namespace, "ws"));
    assert!(!live.in_sync(&without_namespace, "elsewhere"));
}

#[test]
fn a_changed_desired_object_is_not() {
    let live = snapshot(&[live(json!({"a": "1", "b": "two"}), all_owned())]);
    let mut changed = desired();
    changed["data"]["b"] = json!("three");
    assert!(!live.in_sync(&changed, "ws"));
    // A field the agent no longer sends must be removed by an apply.
    changed["data"].as_object_mut().unwrap().remove("b");
    assert!(!live.in_sync(&changed, "ws"));
}

#[test]
fn a_field_someone_else_took_over_is_drift() {
    // kubectl edit changed data.b: the field left the agent's set.
    let fields = json!({"f:metadata": {"f:labels": {"f:agent.gitlab.com/id": {}}}, "f:data": {".": {}, "f:a": {}}});
    let live = snapshot(&[live(json!({"a": "1", "b": "edited"}), fields)]);
    assert!(!live.in_sync(&desired(), "ws"));
}

#[test]
fn a_missing_object_or_an_unlisted_kind_is_not_in_sync() {
    let live = snapshot(&[]);
    assert!(!live.in_sync(&desired(), "ws"));
    let mut unlisted = LiveObjects::new("wsync");
    unlisted.observe("", "ConfigMap", &live_object());
    assert_eq!(unlisted.len(), 1);
    assert!(!unlisted.in_sync(&desired(), "ws"), "ConfigMaps were not listed whole");
}

fn live_object() -> Value {
    live(json!({"a": "1", "b": "two"}), all_owned())
}

#[test]
fn unclear_ownership_is_left_out() {
    let mut twice = live_object();
    let entry = twice["metadata"]["managedFields"][0].clone();
    twice["metadata"]["managedFields"].as_array_mut().unwrap().push(entry);
    let mut never_applied = live_object();
    never_applied["metadata"]["managedFields"][0]["operation"] = json!("Update");
    let live = snapshot(&[twice, never_applied]);
    assert!(live.is_empty());
}

#[test]
fn numbers_and_their_strings_and_dropped_empties_compare_equal() {
    let mut sent = desired();
    sent["data"]["a"] = json!(1);
    sent["metadata"]["annotations"] = json!({});
    sent["status"] = json!({"anything": true});
    let live = snapshot(&[live_object()]);
    assert!(live.in_sync(&sent, "ws"));
}

#[test]
fn lists_are_projected_by_key_value_and_index() {
    let object = json!({"spec": {
        "containers": [{"name": "a", "image": "x", "defaulted": 1}, {"name": "sidecar", "image": "y"}],
        "finalizers": ["mine", "theirs"],
        "args": ["--one", "--two"]
    }});
    let set = json!({"f:spec": {
        "f:containers": {"k:{\"name\":\"a\"}": {".": {}, "f:name": {}, "f:image": {}}},
        "f:finalizers": {"v:\"mine\"": {}},
        "f:args": {"i:1": {}}
    }});
    let projected = project(&object, set.as_object().unwrap()).unwrap();
    assert_eq!(
        projected,
        json!({"spec": {"containers": [{"name": "a", "image": "x"}], "finalizers": ["mine"], "args": ["--two"]}})
    );
}

#[test]
fn a_set_that_does_not_fit_the_object_projects_nothing() {
    let set = json!({"f:data": {"nonsense": {}}});
    assert_eq!(project(&json!({"data": {"a": "1"}}), set.as_object().unwrap()), None);
    let set = json!({"f:items": {"k:not json": {}}});
    assert_eq!(project(&json!({"items": [1]}), set.as_object().unwrap()), None);
}

#[test]
fn parts_listed_side_by_side_key_objects_as_the_whole() {
    let mut whole = LiveObjects::new("wsync");
    let mut configmaps = whole.part();
    configmaps.observe("", "ConfigMap", &live(json!({"a": "1", "b": "two"}), all_owned()));
    configmaps.listed_whole("", "ConfigMap");
    // A part whose LIST failed is never absorbed: its kind stays unlisted, and is applied.
    let mut services = whole.part();
    services.observe("", "Service", &json!({"metadata": {"name": "s", "namespace": "ws"}}));
    assert!(!whole.in_sync(&desired(), "ws"));
    whole.absorb(configmaps);
    assert!(whole.in_sync(&desired(), "ws"));
    assert_eq!(whole.len(), 1);
}
