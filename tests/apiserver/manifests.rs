//! `kubectl apply -k manifests/` works against the real apiserver.

#[test]
fn manifests_apply_with_server_side_validation() {
    let env = crate::support::env();
    let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests");
    let out = crate::support::kubectl_ok(env, &["apply", "-k", manifests, "--dry-run=server"]);
    for object in
        ["customresourcedefinition", "clusterrole.rbac", "serviceaccount/wsync-agent", "deployment.apps/wsync-agent"]
    {
        assert!(out.contains(object), "{object} missing from:\n{out}");
    }
}
