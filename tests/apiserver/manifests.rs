//! `kubectl apply -k manifests/` works against the real apiserver.

#[test]
fn manifests_apply_with_server_side_validation() {
    let env = crate::support::env();
    let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");
    let out = crate::support::kubectl_ok(env, &["apply", "-k", manifests, "--dry-run=server"]);
    for object in [
        "customresourcedefinition",
        "clusterrole.rbac",
        "serviceaccount/wsync-agent",
        "deployment.apps/wsync-agent",
        "service/wsync-agent-metrics",
    ] {
        assert!(out.contains(object), "{object} missing from:\n{out}");
    }
}

#[test]
fn the_shared_namespace_overlay_applies_with_namespaced_roles_only() {
    let env = crate::support::env();
    let overlay = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/overlays/shared-namespace");
    // A server-side dry run creates no namespace for the Roles in it to land in.
    crate::support::kubectl_apply(env, "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: workspaces\n");
    let out = crate::support::kubectl_ok(env, &["apply", "-k", overlay, "--dry-run=server"]);
    for object in ["namespace/workspaces", "role.rbac.authorization.k8s.io/wsync-agent", "deployment.apps/wsync-agent"]
    {
        assert!(out.contains(object), "{object} missing from:\n{out}");
    }
    assert!(!out.contains("clusterrole"), "no cluster-wide rights:\n{out}");
}
