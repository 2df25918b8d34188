//! GitLab's `shared_namespace` end to end: the real control plane serves it, the real agent
//! runs as a ServiceAccount with the overlay's namespaced Roles only
//! (manifests/overlays/shared-namespace), and two workspaces live in one namespace from
//! creation to termination. The agent never writes a namespace (the audit log shows it).

use crate::support::system::System;
use crate::support::*;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

/// The overlay as rendered by kustomize, renamed for this test: its ServiceAccount, Roles and
/// shared namespace, without the agent's Deployment, CRD or NetworkPolicy.
fn overlay_rbac(account: &str, namespace: &str) -> String {
    let overlay = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/overlays/shared-namespace");
    let rendered = kubectl_ok(env(), &["kustomize", overlay]);
    assert!(!rendered.contains("kind: ClusterRole"), "the overlay holds no ClusterRole:\n{rendered}");
    rendered
        .split("\n---\n")
        .map(|doc| format!("{}\n", doc.trim_end()))
        .filter(|doc| {
            let kind = doc.lines().find_map(|l| l.strip_prefix("kind: ")).unwrap_or_default();
            let ours = kind == "Namespace" && doc.contains("name: workspaces\n");
            ours || ["ServiceAccount", "Role", "RoleBinding"].contains(&kind)
        })
        .map(|doc| doc.replace("wsync-agent", account).replace(": workspaces\n", &format!(": {namespace}\n")))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workspaces_share_one_namespace_from_creation_to_termination() {
    let env = env();
    let (account, namespace) = (unique_id("shared-sa"), unique_id("shared-ws"));
    kubectl_apply(env, &overlay_rbac(&account, &namespace));
    let user = format!("system:serviceaccount:{AGENT_NAMESPACE}:{account}");
    let denied = [
        ("list", "namespaces"),
        ("create", "namespaces"),
        ("list", "deployments -n default"),
        ("create", "secrets -n default"),
    ];
    assert_cannot(env, &user, &denied);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig_of(env, &account, dir.path());
    let settings = dir.path().join("settings.yaml");
    std::fs::write(&settings, format!("shared_namespace: {namespace}\n")).expect("settings");
    let mark = audit_mark(env);
    let system =
        System::start_as("shared", &["--config", path_str(&settings)], &["--shared-namespace", &namespace], kubeconfig)
            .await;

    for name in ["alice", "bob"] {
        system.cli(&["create", name, "--image", "busybox:1.36", "--env", &format!("OWNER={name}")]);
    }
    for name in ["alice", "bob"] {
        let workspace = system.wait_actual(name, "Running").await;
        assert_eq!(workspace["namespace"], namespace.as_str());
        let selector = get_field(env, &namespace, &format!("networkpolicy/{name}"), "{.spec.podSelector.matchLabels}");
        assert!(selector.is_some_and(|s| s.contains(name)), "{name}'s policy selects its own Pods only");
        let owner = get_field(env, &namespace, &format!("secret/{name}-env-var"), "{.data.OWNER}");
        assert!(owner.is_some(), "{name}'s environment is in its Secret");
    }

    system.cli(&["stop", "alice"]);
    system.wait_actual("alice", "Stopped").await;
    assert_eq!(system.workspace("bob")["actual_state"], "Running", "bob runs on");
    system.cli(&["start", "alice"]);
    system.wait_actual("alice", "Running").await;
    let owner = get_field(env, &namespace, "secret/alice-env-var", "{.data.OWNER}");
    assert_eq!(owner.as_deref(), Some("YWxpY2U="), "partial answers, which leave the Secret out, never prune it");

    system.cli(&["terminate", "alice"]);
    system.wait_actual("alice", "Terminated").await;
    let left = kubectl_ok(env, &["-n", &namespace, "get", "deploy,svc,pvc,sa,networkpolicy,configmap", "-o", "name"]);
    assert!(!left.contains("/alice"), "alice's objects are pruned:\n{left}");
    for object in
        ["deployment.apps/bob", "service/bob", "persistentvolumeclaim/bob-home", "networkpolicy.networking.k8s.io/bob"]
    {
        assert!(left.contains(object), "{object} is bob's and stays:\n{left}");
    }
    assert!(get_field(env, &namespace, "secret/alice-env-var", "{.metadata.name}").is_none());

    system.cli(&["terminate", "bob"]);
    system.wait_actual("bob", "Terminated").await;
    let phase = kubectl_ok(env, &["get", "namespace", &namespace, "-o", "jsonpath={.status.phase}"]);
    assert_eq!(phase, "Active", "the shared namespace is the operator's and stays");

    let namespace_writes = audited(env, mark, &user, |e| e["objectRef"]["resource"] == "namespaces");
    assert!(namespace_writes.is_empty(), "the agent wrote namespaces: {namespace_writes:?}");
    let writes = audited(env, mark, &user, |_| true);
    assert!(!writes.is_empty(), "the audit log has the agent's writes");
    let logs = system.agent.logs();
    assert!(!logs.contains("forbidden") && !logs.contains("Forbidden"), "a permission is missing:\n{logs}");
    kubectl_ok(env, &["delete", "namespace", &namespace, "--wait=false"]);
}

/// The mode is the operator's: an agent in shared-namespace mode does not sync with a control
/// plane that serves no shared namespace, and says so, until the agent config names it. Once a
/// workspace lives there, the setting cannot move.
#[tokio::test(flavor = "multi_thread")]
async fn the_control_plane_cannot_switch_the_agents_namespace_mode() {
    let env = env();
    let namespace = unique_id("shared-mode");
    kubectl_ok(env, &["create", "namespace", &namespace]);
    let system = System::start_configured("shared-mode", &[], &["--shared-namespace", &namespace]).await;
    let refused = eventually("the Synced condition to say PrerequisitesFailed", LONG, || {
        let wss = wss_json(env, &system.id)?;
        let synced = condition(&wss, "Synced")?.clone();
        (synced["reason"] == "PrerequisitesFailed").then_some(synced)
    })
    .await;
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(message.contains("serves no shared_namespace"), "{refused}");

    let dir = tempfile::tempdir().expect("tempdir");
    let (shared, own) = (dir.path().join("shared.yaml"), dir.path().join("own.yaml"));
    std::fs::write(&shared, format!("shared_namespace: {namespace}\n")).expect("settings");
    std::fs::write(&own, "{}\n").expect("settings");
    system.control_plane.cli(&["agents", "set-config", &system.id, path_str(&shared)]);
    system.cli(&["create", "carol", "--image", "busybox:1.36"]);
    let carol = system.wait_actual("carol", "Running").await;
    assert_eq!(carol["namespace"], namespace.as_str());

    let moved = system.control_plane.try_cli(&["agents", "set-config", &system.id, path_str(&own)]);
    let said = String::from_utf8_lossy(&moved.stderr).to_string();
    assert!(!moved.status.success() && said.contains("shared_namespace cannot change"), "{said}");
    system.cli(&["terminate", "carol"]);
    system.wait_actual("carol", "Terminated").await;
    system.control_plane.cli(&["agents", "set-config", &system.id, path_str(&own)]);
    kubectl_ok(env, &["delete", "namespace", &namespace, "--wait=false"]);
}
