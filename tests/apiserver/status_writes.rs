//! A WorkspaceSyncStatus the agent cannot write is loud, never a silent stall (#37): the
//! apiserver refuses every write (here: the agent's Role lacks `workspacesyncstatuses/status`),
//! and the agent says so in an Event, a metric and its log, `kubectl wsync status` shows it,
//! and workspaces keep syncing. An epoch edited to int64's maximum is repaired at start.

use crate::kubectl_plugin::ok as kubectl_wsync;
use crate::support::system::System;
use crate::support::*;
use std::time::Duration;
use wsync::crd::WorkspaceSyncStatus;

const LONG: Duration = Duration::from_secs(120);

/// The manifests' RBAC for ServiceAccount `account`, without the right to write the status.
fn rbac_without_status_writes(account: &str) -> String {
    let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/base/rbac.yaml")).expect("rbac");
    let rule = "  - apiGroups: [\"wsync.dev\"]\n    resources: [\"workspacesyncstatuses/status\"]\n    verbs: [\"get\", \"patch\", \"update\"]\n";
    assert!(rbac.contains(rule), "the status rule moved:\n{rbac}");
    rbac.replace(rule, "")
        .replace("wsync-agent", account)
        .replace("namespace: wsync-system", &format!("namespace: {AGENT_NAMESPACE}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_status_the_agent_cannot_write_is_said_and_syncing_goes_on() {
    let env = env();
    let account = unique_id("no-status");
    let rbac = rbac_without_status_writes(&account);
    kubectl_apply_in(env, AGENT_NAMESPACE, &rbac);
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = kubeconfig_of(env, &account, dir.path());
    let system = System::start_as("nostatus", &[], &[], kubeconfig).await;
    system.cli(&["create", "ann", "--image", "busybox:1.36"]);
    system.wait_actual("ann", "Running").await;

    let said = eventually("a StatusWriteFailed Event", LONG, || {
        let selector = format!("reason=StatusWriteFailed,involvedObject.name={}", system.id);
        let out =
            kubectl_ok(env, &["-n", AGENT_NAMESPACE, "get", "events", "--field-selector", &selector, "-o", "name"]);
        (!out.trim().is_empty()).then_some(out)
    })
    .await;
    assert_eq!(said.lines().count(), 1, "said once, not at every cycle: {said}");
    let metrics = system.agent.metrics();
    assert!(metrics.contains("wsync_status_write_failing 1"), "{metrics}");
    assert!(metrics.contains("status_write_failures_total{reason=\"Forbidden\"}"), "{metrics}");
    let logs = system.agent.logs();
    assert_eq!(logs.matches("could not write the WorkspaceSyncStatus").count(), 1, "said once:\n{logs}");
    let status = kubectl_wsync(&["wsync", "-n", AGENT_NAMESPACE, "status", &system.id, "-o", "wide"]);
    assert!(
        status.contains("StatusWriteFailed") && status.contains("cannot write its WorkspaceSyncStatus"),
        "{status}"
    );

    system.cli(&["stop", "ann"]);
    system.wait_actual("ann", "Stopped").await;
    kubectl_ok(env, &["delete", "clusterrole,clusterrolebinding", &account, "--ignore-not-found"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_epoch_edited_to_the_int64_limit_is_repaired_at_start() {
    let env = env();
    let mut system = System::start("epoch").await;
    system.cli(&["create", "bea", "--image", "busybox:1.36"]);
    system.wait_actual("bea", "Running").await;
    system.agent.terminate();
    let api: kube::Api<WorkspaceSyncStatus> = kube::Api::namespaced(admin_client(env).await, AGENT_NAMESPACE);
    let edit = serde_json::json!({ "status": { "epoch": i64::MAX } });
    api.patch_status(&system.id, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&edit))
        .await
        .expect("the apiserver holds int64's maximum");
    system.agent.restart();
    let epoch = eventually("the repaired epoch written", LONG, || {
        let wss = wss_json(env, &system.id)?;
        let epoch = wss["status"]["epoch"].as_u64()?;
        (epoch < 1_000).then_some(epoch)
    })
    .await;
    assert_eq!(epoch, 1);
    system.cli(&["stop", "bea"]);
    system.wait_actual("bea", "Stopped").await;
    let logs = system.agent.logs();
    assert!(logs.contains("starting again at 1") && !logs.contains("could not write"), "{logs}");
}
