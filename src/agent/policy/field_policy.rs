//! What an allowed kind may carry (DESIGN §2, "Trust": what). A kind on the allow-list can
//! still reach outside its workspace through its fields: a Service's `externalIPs` intercept
//! other traffic (the CVE-2020-8554 class), a claim's `volumeName` binds another tenant's
//! retained volume, an owner reference ties an object's life to a stranger, a foreign
//! finalizer keeps a namespace `Terminating` for ever, and a Pod template runs on the host.
//! Each rule names the field it refuses. Free of I/O.

use super::pod_security::{self, PodSecurityLevel};
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use serde_json::Value;
use std::collections::BTreeSet;

/// What the fields of a config may hold.
#[derive(Debug, Clone)]
pub struct FieldPolicy {
    pub pod_security: PodSecurityLevel,
    pub service_types: BTreeSet<String>,
}

impl Default for FieldPolicy {
    fn default() -> Self {
        Self { pod_security: PodSecurityLevel::default(), service_types: BTreeSet::from(["ClusterIP".to_string()]) }
    }
}

/// Finalizers Kubernetes itself sets and removes on an object of `kind`: garbage collection's
/// on any, claim protection on a claim. Any other (`kubernetes`, a namespace's, included) is
/// removed by no controller there, and would hold the object, and its namespace, for ever.
fn kubernetes_finalizer(kind: &str, name: &str) -> bool {
    matches!(name, "orphan" | "foregroundDeletion")
        || (kind == "PersistentVolumeClaim" && name == "kubernetes.io/pvc-protection")
}

/// Annotations that loosen a Pod's confinement where the 1.20 apiserver has no field for it
/// (AppArmor) or copies them into the fields (seccomp): each may only name a confined profile.
fn confinement_annotation(key: &str) -> bool {
    key.starts_with("container.apparmor.security.beta.kubernetes.io/")
        || key == "seccomp.security.alpha.kubernetes.io/pod"
        || key.starts_with("container.seccomp.security.alpha.kubernetes.io/")
}

fn confined_profile(value: &Value) -> bool {
    value.as_str().is_some_and(|v| matches!(v, "runtime/default" | "docker/default") || v.starts_with("localhost/"))
}

impl FieldPolicy {
    /// Check one object. `in_config` holds the (kind, name) of every object in the config:
    /// the only owners an object may name.
    pub fn check(
        &self,
        gvk: &GroupVersionKind,
        object: &DynamicObject,
        in_config: &BTreeSet<(String, String)>,
    ) -> Result<(), String> {
        for owner in object.metadata.owner_references.iter().flatten() {
            if !in_config.contains(&(owner.kind.clone(), owner.name.clone())) {
                return Err(format!(
                    "metadata.ownerReferences: {} {} is not in the workspace's config",
                    owner.kind, owner.name
                ));
            }
        }
        let kind = gvk.kind.as_str();
        if let Some(foreign) = object.metadata.finalizers.iter().flatten().find(|f| !kubernetes_finalizer(kind, f)) {
            return Err(format!("metadata.finalizers: {foreign:?} is not one Kubernetes removes from a {kind}"));
        }
        let spec = object.data.get("spec").unwrap_or(&Value::Null);
        match (gvk.group.as_str(), gvk.kind.as_str()) {
            ("", "Service") => self.check_service(spec)?,
            ("", "PersistentVolumeClaim") => check_claim(spec)?,
            ("networking.k8s.io", "NetworkPolicy") => check_network_policy(spec)?,
            _ => {}
        }
        // A template without a spec runs nothing; the apiserver refuses it.
        if let Some((path, pod_spec)) = pod_security::pod_spec(&gvk.group, &gvk.kind, &object.data)
            && !pod_spec.is_null()
        {
            pod_security::check(self.pod_security, path, pod_spec)?;
            check_pod_volumes(path, pod_spec)?;
            // The Pods' own metadata: the template's, or a bare Pod's.
            match path.strip_suffix(".spec") {
                Some(template_path) => {
                    let template = template_path.split('.').fold(&object.data, |value, key| &value[key]);
                    check_pod_metadata(&format!("{template_path}.metadata"), &template["metadata"])?;
                }
                None => check_pod_metadata("metadata", &serde_json::to_value(&object.metadata).unwrap_or_default())?,
            }
        }
        Ok(())
    }

    fn check_service(&self, spec: &Value) -> Result<(), String> {
        let type_ = match spec.get("type") {
            None | Some(Value::Null) => "ClusterIP",
            Some(Value::String(t)) => t.as_str(),
            Some(other) => return Err(format!("spec.type: {other} is not a Service type")),
        };
        if !self.service_types.contains(type_) {
            let allowed: Vec<&str> = self.service_types.iter().map(String::as_str).collect();
            return Err(format!("spec.type: {type_} is not allowed (allowed: {})", allowed.join(", ")));
        }
        if present(spec.get("externalIPs")) {
            return Err("spec.externalIPs: external IPs are never applied".into());
        }
        Ok(())
    }
}

/// A claim is bound by the cluster's provisioner, never to a volume the config picks.
fn check_claim(spec: &Value) -> Result<(), String> {
    for field in ["volumeName", "selector"] {
        if present(spec.get(field)) {
            return Err(format!("spec.{field}: a claim may not pick its volume"));
        }
    }
    Ok(())
}

/// What every Pod of a template carries: finalizers the ReplicaSet controller copies into each
/// Pod (a Pod held by one keeps its namespace `Terminating`), and confinement annotations.
fn check_pod_metadata(path: &str, metadata: &Value) -> Result<(), String> {
    for finalizer in metadata.get("finalizers").and_then(Value::as_array).into_iter().flatten() {
        if !finalizer.as_str().is_some_and(|f| kubernetes_finalizer("Pod", f)) {
            return Err(format!("{path}.finalizers: {finalizer} is not one Kubernetes removes from a Pod"));
        }
    }
    for (key, value) in metadata.get("annotations").and_then(Value::as_object).into_iter().flatten() {
        if confinement_annotation(key) && !confined_profile(value) {
            return Err(format!("{path}.annotations.{key}: {value} is not a confined profile"));
        }
    }
    Ok(())
}

/// A generic ephemeral volume's claim is created from its template by the cluster: it may no
/// more pick its volume than a claim in the config.
fn check_pod_volumes(path: &str, pod_spec: &Value) -> Result<(), String> {
    for (index, volume) in pod_spec.get("volumes").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let claim = &volume["ephemeral"]["volumeClaimTemplate"]["spec"];
        check_claim(claim).map_err(|e| format!("{path}.volumes[{index}].ephemeral.volumeClaimTemplate.{e}"))?;
    }
    Ok(())
}

/// A NetworkPolicy selects Pods of its own namespace only, which the namespace rule keeps the
/// workspace's: it must say which (`spec.podSelector`, `{}` for all, as GitLab sends it), and
/// name only the policy types there are.
fn check_network_policy(spec: &Value) -> Result<(), String> {
    if !spec.get("podSelector").is_some_and(Value::is_object) {
        return Err("spec.podSelector: a NetworkPolicy must select the workspace's Pods".into());
    }
    for type_ in spec.get("policyTypes").and_then(Value::as_array).into_iter().flatten() {
        if !matches!(type_.as_str(), Some("Ingress" | "Egress")) {
            return Err(format!("spec.policyTypes: {type_} is not Ingress or Egress"));
        }
    }
    Ok(())
}

/// Set to something other than null, "" or an empty list or map.
fn present(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(kind: &str, api_version: &str, body: Value) -> Result<(), String> {
        let mut value = json!({ "apiVersion": api_version, "kind": kind, "metadata": { "name": "x" } });
        if let (Some(target), Some(extra)) = (value.as_object_mut(), body.as_object()) {
            for (k, v) in extra {
                target.insert(k.clone(), v.clone());
            }
        }
        let object: DynamicObject = serde_json::from_value(value).expect("object");
        let gvk = GroupVersionKind::try_from(object.types.as_ref().expect("types")).expect("gvk");
        let in_config = BTreeSet::from([("ConfigMap".to_string(), "mine".to_string())]);
        FieldPolicy::default().check(&gvk, &object, &in_config)
    }

    #[test]
    fn services_are_cluster_ip_without_external_ips() {
        assert!(check("Service", "v1", json!({ "spec": { "ports": [{ "port": 80 }] } })).is_ok());
        assert!(check("Service", "v1", json!({ "spec": { "type": "ClusterIP", "externalIPs": [] } })).is_ok());
        let error = check("Service", "v1", json!({ "spec": { "externalIPs": ["8.8.8.8"] } })).unwrap_err();
        assert!(error.starts_with("spec.externalIPs"), "{error}");
        for type_ in ["LoadBalancer", "NodePort", "ExternalName"] {
            let error = check("Service", "v1", json!({ "spec": { "type": type_ } })).unwrap_err();
            assert!(error.contains(type_), "{error}");
        }
        let mut open = FieldPolicy::default();
        open.service_types.insert("NodePort".into());
        let object: DynamicObject = serde_json::from_value(
            json!({ "apiVersion": "v1", "kind": "Service", "metadata": { "name": "x" }, "spec": { "type": "NodePort" } }),
        )
        .unwrap();
        let gvk = GroupVersionKind::gvk("", "v1", "Service");
        assert!(open.check(&gvk, &object, &BTreeSet::new()).is_ok(), "the operator may allow more types");
    }

    #[test]
    fn claims_do_not_pick_their_volume() {
        assert!(check("PersistentVolumeClaim", "v1", json!({ "spec": { "resources": {} } })).is_ok());
        for spec in
            [json!({ "volumeName": "pv-of-another-tenant" }), json!({ "selector": { "matchLabels": { "a": "b" } } })]
        {
            let error = check("PersistentVolumeClaim", "v1", json!({ "spec": spec })).unwrap_err();
            assert!(error.contains("may not pick its volume"), "{error}");
        }
    }

    #[test]
    fn owners_are_in_the_config_and_finalizers_are_kubernetes_own() {
        let owned = |kind: &str, name: &str| json!({ "metadata": { "name": "x", "ownerReferences": [{ "apiVersion": "v1", "kind": kind, "name": name, "uid": "u" }] } });
        assert!(check("ConfigMap", "v1", owned("ConfigMap", "mine")).is_ok());
        let error = check("ConfigMap", "v1", owned("Namespace", "kube-system")).unwrap_err();
        assert!(error.starts_with("metadata.ownerReferences"), "{error}");
        let finalized = |f: &str| json!({ "metadata": { "name": "x", "finalizers": [f] } });
        assert!(check("PersistentVolumeClaim", "v1", finalized("kubernetes.io/pvc-protection")).is_ok());
        assert!(check("ConfigMap", "v1", finalized("foregroundDeletion")).is_ok());
        // No controller removes these from a ConfigMap: each would hold it, and its namespace.
        for stuck in ["example.com/never-done", "kubernetes", "kubernetes.io/pvc-protection"] {
            let error = check("ConfigMap", "v1", finalized(stuck)).unwrap_err();
            assert!(error.starts_with("metadata.finalizers"), "{error}");
        }
    }

    fn deployment(template_metadata: Value, volumes: Value) -> Value {
        json!({ "spec": { "template": { "metadata": template_metadata,
            "spec": { "containers": [{ "name": "c", "image": "i" }], "volumes": volumes } } } })
    }

    #[test]
    fn a_templates_pods_carry_no_finalizer_or_unconfined_profile() {
        assert!(check("Deployment", "apps/v1", deployment(json!({ "labels": { "a": "b" } }), json!([]))).is_ok());
        let error = check("Deployment", "apps/v1", deployment(json!({ "finalizers": ["x.io/never"] }), json!([])));
        assert!(error.unwrap_err().starts_with("spec.template.metadata.finalizers"));
        for (key, value) in [
            ("container.apparmor.security.beta.kubernetes.io/c", "unconfined"),
            ("seccomp.security.alpha.kubernetes.io/pod", "unconfined"),
            ("container.seccomp.security.alpha.kubernetes.io/c", "unconfined"),
        ] {
            let error = check("Deployment", "apps/v1", deployment(json!({ "annotations": { key: value } }), json!([])));
            assert!(error.unwrap_err().starts_with("spec.template.metadata.annotations."), "{key}");
            let confined = deployment(json!({ "annotations": { key: "runtime/default" } }), json!([]));
            assert!(check("Deployment", "apps/v1", confined).is_ok(), "{key}");
        }
        let pod = json!({ "metadata": { "name": "x",
            "annotations": { "container.apparmor.security.beta.kubernetes.io/c": "unconfined" } },
            "spec": { "containers": [{ "name": "c", "image": "i" }] } });
        assert!(check("Pod", "v1", pod).unwrap_err().starts_with("metadata.annotations."));
    }

    #[test]
    fn an_ephemeral_volume_does_not_pick_its_volume() {
        let ephemeral =
            |spec: Value| json!([{ "name": "scratch", "ephemeral": { "volumeClaimTemplate": { "spec": spec } } }]);
        let plain = ephemeral(json!({ "accessModes": ["ReadWriteOnce"], "resources": {} }));
        assert!(check("Deployment", "apps/v1", deployment(json!({}), plain)).is_ok());
        let picked = ephemeral(json!({ "volumeName": "retained-volume-of-another-tenant" }));
        let error = check("Deployment", "apps/v1", deployment(json!({}), picked)).unwrap_err();
        assert!(
            error.starts_with("spec.template.spec.volumes[0].ephemeral.volumeClaimTemplate.spec.volumeName"),
            "{error}"
        );
    }

    #[test]
    fn network_policies_select_the_workspaces_pods() {
        let gitlab = json!({ "spec": { "podSelector": {}, "policyTypes": ["Ingress", "Egress"],
            "egress": [{ "to": [{ "ipBlock": { "cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"] } }] }] } });
        assert!(check("NetworkPolicy", "networking.k8s.io/v1", gitlab).is_ok());
        let error = check("NetworkPolicy", "networking.k8s.io/v1", json!({ "spec": {} })).unwrap_err();
        assert!(error.starts_with("spec.podSelector"), "{error}");
        let odd = json!({ "spec": { "podSelector": {}, "policyTypes": ["Everything"] } });
        assert!(check("NetworkPolicy", "networking.k8s.io/v1", odd).unwrap_err().starts_with("spec.policyTypes"));
    }

    #[test]
    fn pod_templates_meet_the_level() {
        let host = json!({ "spec": { "template": { "spec": { "hostPID": true, "containers": [{ "name": "c", "image": "i" }] } } } });
        let error = check("Deployment", "apps/v1", host).unwrap_err();
        assert!(error.contains("hostPID"), "{error}");
        let plain = json!({ "spec": { "template": { "spec": { "containers": [{ "name": "c", "image": "i" }] } } } });
        assert!(check("Deployment", "apps/v1", plain).is_ok());
    }
}
