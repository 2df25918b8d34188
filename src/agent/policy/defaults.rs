//! Defaults the agent writes into a config before it applies it, where an older apiserver's
//! server-side apply needs them: a list keyed by (port, protocol) whose element omits
//! `protocol` is refused ("associative list with keys has an element that omits key field
//! \"protocol\""), although the apiserver would default it to TCP. GitLab's Services omit it.
//! Each default is the apiserver's own, so the applied object means what the config said.
//! Free of I/O.

use super::pod_security;
use kube::core::GroupVersionKind;
use serde_json::Value;

/// Fill in what `gvk`'s list-map keys need, in place.
pub fn fill_list_map_keys(gvk: &GroupVersionKind, data: &mut Value) {
    // Lookups by get_mut only: indexing would insert what is missing, or panic on a non-object.
    if gvk.group.is_empty() && gvk.kind == "Service" {
        default_protocols(at(data, "spec.ports"));
    }
    if let Some((path, _)) = pod_security::pod_spec(&gvk.group, &gvk.kind, data)
        && let Some(pod_spec) = at(data, path)
    {
        for list in ["containers", "initContainers"] {
            for container in pod_spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                default_protocols(container.get_mut("ports"));
            }
        }
    }
}

fn at<'a>(data: &'a mut Value, path: &str) -> Option<&'a mut Value> {
    path.split('.').try_fold(data, |value, key| value.get_mut(key))
}

/// `protocol: TCP` on every port that names none.
fn default_protocols(ports: Option<&mut Value>) {
    for port in ports.and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(port) = port.as_object_mut()
            && !port.get("protocol").is_some_and(Value::is_string)
        {
            port.insert("protocol".into(), Value::from("TCP"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ports_get_the_apiservers_default_protocol_and_keep_their_own() {
        let mut service = json!({ "spec": { "ports": [{ "port": 60001 }, { "port": 53, "protocol": "UDP" }] } });
        fill_list_map_keys(&GroupVersionKind::gvk("", "v1", "Service"), &mut service);
        assert_eq!(
            service["spec"]["ports"],
            json!([{ "port": 60001, "protocol": "TCP" }, { "port": 53, "protocol": "UDP" }])
        );

        let mut deployment = json!({ "spec": { "template": { "spec": {
            "containers": [{ "name": "c", "ports": [{ "containerPort": 8080 }] }],
            "initContainers": [{ "name": "i", "ports": [{ "containerPort": 1, "protocol": "SCTP" }] }] } } } });
        fill_list_map_keys(&GroupVersionKind::gvk("apps", "v1", "Deployment"), &mut deployment);
        let pod = &deployment["spec"]["template"]["spec"];
        assert_eq!(pod["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(pod["initContainers"][0]["ports"][0]["protocol"], "SCTP");

        let mut odd = json!({ "spec": { "ports": "not a list" } });
        fill_list_map_keys(&GroupVersionKind::gvk("", "v1", "Service"), &mut odd);
        assert_eq!(odd["spec"]["ports"], "not a list", "what is not a list is left to the apiserver to refuse");
        let mut config_map = json!({ "data": { "ports": "x" } });
        fill_list_map_keys(&GroupVersionKind::gvk("", "v1", "ConfigMap"), &mut config_map);
        assert_eq!(config_map, json!({ "data": { "ports": "x" } }));
        for mut bare in [json!({}), json!({ "spec": [1, 2] }), json!({ "spec": { "template": null } })] {
            let before = bare.clone();
            fill_list_map_keys(&GroupVersionKind::gvk("", "v1", "Service"), &mut bare);
            fill_list_map_keys(&GroupVersionKind::gvk("apps", "v1", "Deployment"), &mut bare);
            assert_eq!(bare, before, "nothing is added to what has no ports");
        }
    }
}
