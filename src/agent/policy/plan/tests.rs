use super::*;
use crate::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;

fn objects(yaml: &str) -> Vec<DynamicObject> {
    crate::yaml::parse_objects(yaml).expect("valid yaml")
}

fn policy() -> ApplyPolicy {
    ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), "wsync-system")
}

/// Namespaced unless it is one of the cluster-scoped kinds these tests use.
fn namespaced(gvk: &GroupVersionKind) -> bool {
    !matches!(gvk.kind.as_str(), "Namespace" | "ClusterRoleBinding" | "PersistentVolume")
}

const INVENTORY: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: ws-inventory
  namespace: ws-ns
  labels:
    cli-utils.sigs.k8s.io/inventory-id: ws-inv
";

fn member(kind: &str, api_version: &str, name: &str, namespace: &str, owner: Option<&str>) -> String {
    let annotations =
        owner.map(|o| format!("\n  annotations:\n    config.k8s.io/owning-inventory: {o}")).unwrap_or_default();
    format!(
        "---\napiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {namespace}{annotations}\n"
    )
}

#[test]
fn groups_members_under_their_inventory_by_id() {
    let stream = format!(
        "{INVENTORY}{}{}",
        member("Deployment", "apps/v1", "ws", "ws-ns", Some("ws-inv")),
        member("Service", "v1", "ws", "ws-ns", Some("ws-inv"))
    );
    let plans = plan(objects(&stream), "ws-ns", &policy(), namespaced).unwrap();
    assert_eq!(plans.len(), 1);
    assert_eq!(plans[0].id, "ws-inv");
    let keys: Vec<String> = plans[0].member_refs().iter().map(MemberRef::key).collect();
    assert_eq!(keys, ["ws-ns_ws__Service", "ws-ns_ws_apps_Deployment"]);
}

#[test]
fn member_keys_round_trip() {
    let r = MemberRef { namespace: "ns".into(), name: "ws".into(), group: "apps".into(), kind: "Deployment".into() };
    assert_eq!(r.key(), "ns_ws_apps_Deployment");
    assert_eq!(MemberRef::parse(&r.key()), Some(r));
    let core = MemberRef::parse("ns_cfg__ConfigMap").unwrap();
    assert_eq!(core.group, "");
    assert_eq!(MemberRef::parse("garbage"), None);
}

#[test]
fn an_object_without_owning_inventory_refuses_the_stream() {
    let stream = format!("{INVENTORY}{}", member("Service", "v1", "ws", "ws-ns", None));
    let err = plan(objects(&stream), "ws-ns", &policy(), namespaced).unwrap_err();
    assert!(err.contains("Service ws-ns/ws") && err.contains("owning-inventory"), "{err}");
}

#[test]
fn an_unknown_owning_inventory_refuses_the_stream() {
    let stream = format!("{INVENTORY}{}", member("Service", "v1", "ws", "ws-ns", Some("other")));
    let err = plan(objects(&stream), "ws-ns", &policy(), namespaced).unwrap_err();
    assert!(err.contains("\"other\""), "{err}");
}

#[test]
fn rbac_is_refused_even_when_allowed() {
    let stream = format!(
        "{INVENTORY}{}",
        member("ClusterRoleBinding", "rbac.authorization.k8s.io/v1", "admin", "ws-ns", Some("ws-inv"))
    );
    let permissive = ApplyPolicy::new(["rbac.authorization.k8s.io/ClusterRoleBinding", "ConfigMap"], "wsync-system");
    let err = plan(objects(&stream), "ws-ns", &permissive, namespaced).unwrap_err();
    assert!(err.contains("ClusterRoleBinding.rbac.authorization.k8s.io") && err.contains("RBAC"), "{err}");
}

#[test]
fn kinds_outside_the_allow_list_are_refused() {
    let stream = format!("{INVENTORY}{}", member("Job", "batch/v1", "j", "ws-ns", Some("ws-inv")));
    let err = plan(objects(&stream), "ws-ns", &policy(), namespaced).unwrap_err();
    assert!(err.contains("Job.batch ws-ns/j") && err.contains("allowed kinds"), "{err}");
}

#[test]
fn cluster_scoped_objects_are_refused() {
    let allow_pv = ApplyPolicy::new(["ConfigMap", "PersistentVolume"], "wsync-system");
    let stream = format!("{INVENTORY}{}", member("PersistentVolume", "v1", "pv", "ws-ns", Some("ws-inv")));
    let err = plan(objects(&stream), "ws-ns", &allow_pv, namespaced).unwrap_err();
    assert!(err.contains("cluster-scoped"), "{err}");
}

#[test]
fn objects_in_another_namespace_are_refused() {
    let stream = format!("{INVENTORY}{}", member("Secret", "v1", "stolen", "kube-system", Some("ws-inv")));
    let err = plan(objects(&stream), "ws-ns", &policy(), namespaced).unwrap_err();
    assert!(err.contains("Secret kube-system/stolen") && err.contains("outside"), "{err}");
}

#[test]
fn objects_without_a_namespace_land_in_the_workspace_namespace() {
    let stream = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: inv\n  labels:\n    cli-utils.sigs.k8s.io/inventory-id: i\n---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s\n  annotations:\n    config.k8s.io/owning-inventory: i\n";
    let plans = plan(objects(stream), "ws-ns", &policy(), namespaced).unwrap();
    assert_eq!(plans[0].inventory.metadata.namespace.as_deref(), Some("ws-ns"));
    assert_eq!(plans[0].members[0].1.metadata.namespace.as_deref(), Some("ws-ns"));
}

#[test]
fn protected_namespaces_are_refused() {
    for ns in ["default", "kube-system", "kube-public", "wsync-system"] {
        let err = plan(vec![], ns, &policy(), namespaced).unwrap_err();
        assert!(err.contains("protected"), "{ns}: {err}");
    }
    assert!(!policy().protected_namespace("ws-ns"));
}

#[test]
fn members_are_applied_in_install_order_not_the_configs() {
    let stream = format!(
        "{INVENTORY}{}{}{}{}{}",
        member("Deployment", "apps/v1", "ws", "ws-ns", Some("ws-inv")),
        member("Service", "v1", "ws", "ws-ns", Some("ws-inv")),
        member("ServiceAccount", "v1", "ws", "ws-ns", Some("ws-inv")),
        member("ResourceQuota", "v1", "ws", "ws-ns", Some("ws-inv")),
        member("Secret", "v1", "ws-env", "ws-ns", Some("ws-inv")),
    );
    let plans = plan(objects(&stream), "ws-ns", &policy(), namespaced).unwrap();
    let kinds: Vec<&str> = plans[0].members.iter().map(|(m, _)| m.kind.as_str()).collect();
    assert_eq!(kinds, ["ResourceQuota", "ServiceAccount", "Secret", "Service", "Deployment"]);
}

#[test]
fn a_full_resync_lists_every_allowed_kind_but_secrets_and_what_the_mode_refuses() {
    let policy = ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), "wsync-system");
    let listed = policy.listable_kinds();
    assert!(listed.contains(&(String::new(), "ConfigMap".into())));
    assert!(listed.contains(&("apps".into(), "Deployment".into())));
    assert!(listed.contains(&(String::new(), "ResourceQuota".into())));
    assert!(!listed.iter().any(|(_, kind)| kind == "Secret"), "the agent reads no Secret: {listed:?}");
    let shared = policy.with_namespace_mode(NamespaceMode::Shared("workspaces".into())).listable_kinds();
    assert!(!shared.iter().any(|(_, kind)| kind == "ResourceQuota" || kind == "LimitRange"), "{shared:?}");
    assert!(shared.contains(&(String::new(), "Service".into())));
}
