//! Property tests of what a hostile control plane can send: the YAML parse and the apply plan
//! over generated streams (DESIGN §2, "Trust"). Whatever the stream, nothing panics, nothing
//! planned lies outside the workspace namespace, is cluster-scoped, RBAC or outside the field
//! policy, and what is parsed stays within the byte budget.

use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use proptest::prelude::*;
use serde_json::Value;
use wsync::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;
use wsync::agent::policy::plan::{ApplyPolicy, plan};
use wsync::yaml::{MAX_CONFIG_BYTES, parse_objects};

const WORKSPACE: &str = "ws-ns";

fn namespaced(gvk: &GroupVersionKind) -> bool {
    !matches!(gvk.kind.as_str(), "Namespace" | "ClusterRole" | "ClusterRoleBinding" | "PersistentVolume" | "Node")
}

fn kind() -> impl Strategy<Value = (&'static str, &'static str)> {
    prop::sample::select(vec![
        ("v1", "ConfigMap"),
        ("v1", "Secret"),
        ("v1", "Service"),
        ("v1", "PersistentVolumeClaim"),
        ("v1", "ServiceAccount"),
        ("apps/v1", "Deployment"),
        ("v1", "Namespace"),
        ("v1", "PersistentVolume"),
        ("v1", "Pod"),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        ("rbac.authorization.k8s.io/v1", "Role"),
        ("batch/v1", "Job"),
    ])
}

/// A field some rule is about, or nothing, in YAML at the given indent under `spec`.
fn spec_field() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "",
        "  type: LoadBalancer\n",
        "  type: ClusterIP\n",
        "  externalIPs: [1.2.3.4]\n",
        "  volumeName: pv-1\n",
        "  selector: {matchLabels: {a: b}}\n",
        "  template:\n    spec:\n      hostPID: true\n      containers: [{name: c, image: i}]\n",
        "  template:\n    spec:\n      containers: [{name: c, image: i, securityContext: {privileged: true}}]\n",
        "  template:\n    spec:\n      volumes: [{name: r, hostPath: {path: /}}]\n      containers: [{name: c, image: i}]\n",
        "  template:\n    spec:\n      containers: [{name: c, image: i}]\n",
        "  hostNetwork: true\n  containers: [{name: c, image: i}]\n",
        "  list: &a [x, x, x, x]\n  more: [*a, *a, *a, *a]\n",
        "  oops: [\n",
    ])
}

fn meta_field() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "",
        "  finalizers: [example.com/stuck]\n",
        "  finalizers: [kubernetes.io/pvc-protection]\n",
        "  ownerReferences: [{apiVersion: v1, kind: Node, name: n, uid: u}]\n",
        "  labels: {cli-utils.sigs.k8s.io/inventory-id: inv}\n",
        "  annotations: {config.k8s.io/owning-inventory: inv}\n",
        "  annotations: {config.k8s.io/owning-inventory: other}\n",
    ])
}

fn document() -> impl Strategy<Value = String> {
    (
        kind(),
        "[a-z]{1,6}",
        prop::sample::select(vec!["", WORKSPACE, "kube-system", "other"]),
        meta_field(),
        spec_field(),
    )
        .prop_map(|((api_version, kind), name, namespace, meta, spec)| {
            let namespace = if namespace.is_empty() { String::new() } else { format!("  namespace: {namespace}\n") };
            format!(
                "apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n{namespace}{meta}spec:\n{spec}"
            )
        })
}

fn stream() -> impl Strategy<Value = String> {
    let inventory = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: inventory\n  namespace: {WORKSPACE}\n  labels: {{cli-utils.sigs.k8s.io/inventory-id: inv}}\n"
    );
    (prop::collection::vec(document(), 0..6), any::<bool>()).prop_map(move |(docs, with_inventory)| {
        let mut all = if with_inventory { vec![inventory.clone()] } else { vec![] };
        all.extend(docs);
        all.join("---\n")
    })
}

fn pod_spec(object: &DynamicObject) -> Option<&Value> {
    let kind = object.types.as_ref()?.kind.as_str();
    match kind {
        "Pod" => object.data.get("spec"),
        "Deployment" | "Job" => object.data.get("spec")?.get("template")?.get("spec"),
        _ => None,
    }
}

/// The rules, checked independently of the code that enforces them.
fn within_policy(object: &DynamicObject) -> Result<(), String> {
    let types = object.types.as_ref().ok_or("no types")?;
    let gvk = GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
    let what = format!("{} {:?}", gvk.kind, object.metadata.name);
    if object.metadata.namespace.as_deref() != Some(WORKSPACE) {
        return Err(format!("{what} outside the workspace namespace"));
    }
    if !namespaced(&gvk) || gvk.group.starts_with("rbac.") {
        return Err(format!("{what}: cluster-scoped or RBAC"));
    }
    let allowed = |name: &str| DEFAULT_ALLOWED_KINDS.contains(&name);
    let name = if gvk.group.is_empty() { gvk.kind.clone() } else { format!("{}/{}", gvk.group, gvk.kind) };
    if !allowed(&name) {
        return Err(format!("{what}: kind not allowed"));
    }
    let spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
    let set = |v: Option<&Value>| v.is_some_and(|v| !v.is_null() && v != &Value::Array(vec![]));
    if gvk.kind == "Service" && (set(spec.get("externalIPs")) || spec.get("type").is_some_and(|t| t != "ClusterIP")) {
        return Err(format!("{what}: Service fields"));
    }
    if gvk.kind == "PersistentVolumeClaim" && (set(spec.get("volumeName")) || set(spec.get("selector"))) {
        return Err(format!("{what}: claim fields"));
    }
    if object.metadata.finalizers.iter().flatten().any(|f| !f.starts_with("kubernetes.io/")) {
        return Err(format!("{what}: a foreign finalizer"));
    }
    if object.metadata.owner_references.iter().flatten().any(|o| o.kind == "Node") {
        return Err(format!("{what}: an owner outside the config"));
    }
    if let Some(pod) = pod_spec(object) {
        let text = pod.to_string();
        for field in ["hostPID", "hostNetwork", "hostPath", "privileged"] {
            if text.contains(field) {
                return Err(format!("{what}: {field}"));
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_planned_object_is_always_within_the_policy(stream in stream()) {
        let policy = ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), "wsync-system");
        let Ok(objects) = parse_objects(&stream) else { return Ok(()) };
        if let Ok(inventories) = plan(objects, WORKSPACE, &policy, namespaced) {
            for inventory in &inventories {
                prop_assert!(within_policy(&inventory.inventory).is_ok(), "{:?}", within_policy(&inventory.inventory));
                for (_, member) in &inventory.members {
                    prop_assert!(within_policy(member).is_ok(), "{:?}\n{stream}", within_policy(member));
                }
            }
        }
    }

    #[test]
    fn any_text_parses_or_fails_without_panic(text in ".{0,400}") {
        let _ = parse_objects(&text);
    }

}

proptest! {
    // Each case parses up to a few hundred thousand items: few cases, wide ranges.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn what_is_parsed_stays_within_the_byte_budget(width in 1usize..400, copies in 1usize..400) {
        let items = "item,".repeat(width);
        let aliases = "*a,".repeat(copies);
        let stream = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\nlist: &a [{items}]\nmore: [{aliases}]\n");
        if let Ok(objects) = parse_objects(&stream) {
            let bytes = serde_json::to_vec(&objects).map(|v| v.len()).unwrap_or(0);
            prop_assert!(bytes <= 2 * MAX_CONFIG_BYTES, "{bytes} bytes from {} of YAML", stream.len());
        }
    }
}
