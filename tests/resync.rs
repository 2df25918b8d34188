//! What full resync promises around it: prerequisites first, and a WorkspaceSyncStatus that
//! comes back when deleted by hand.

mod support;

use std::time::Duration;
use support::stub::{Script, StubControlPlane, is_full};
use support::*;

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn no_sync_runs_until_the_prerequisites_answer_then_a_full_cycle_follows() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("pr");
    create_workspace(&client, &format!("{id}-1"), "ws", Some(&id)).await;
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    stub.set_prerequisites_status(503);
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);

    let message = eventually("PrerequisitesFailed on the WorkspaceSyncStatus", LONG, || {
        let wss = wss_json(env, &id)?;
        let synced = condition(&wss, "Synced")?;
        (synced["reason"] == "PrerequisitesFailed").then(|| synced["message"].to_string())
    })
    .await;
    assert!(message.contains("503"), "{message}");
    eventually("a retry", LONG, || (stub.prerequisites_calls() >= 2).then_some(())).await;
    assert_eq!(stub.count(), 0, "no reconcile request before the prerequisites succeed");

    stub.set_prerequisites_status(200);
    let (index, first) = stub.wait_for("the first cycle", 0, LONG, |_| true).await;
    assert_eq!(index, 0);
    assert!(is_full(&first), "the first cycle after the prerequisites is full");
    assert_eq!(first.request.workspace_agent_infos.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_sync_status_deleted_by_hand_comes_back_and_syncing_goes_on() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("rc");
    let ns = format!("{id}-1");
    create_workspace(&client, &ns, "ws", Some(&id)).await;
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let before = eventually("the WorkspaceSyncStatus", LONG, || {
        let wss = wss_json(env, &id)?;
        wss["status"]["lastFullSyncTime"].is_string().then_some(wss)
    })
    .await;

    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "delete", "wss", &id]);
    let after = eventually("the WorkspaceSyncStatus recreated, with its status", LONG, || {
        let wss = wss_json(env, &id)?;
        (wss["metadata"]["uid"] != before["metadata"]["uid"] && wss["status"]["lastFullSyncTime"].is_string())
            .then_some(wss)
    })
    .await;
    assert_eq!(after["status"]["epoch"], before["status"]["epoch"], "the ledger is written back from memory");

    // Syncing goes on: a change still reaches the control plane.
    let seen = stub.count();
    kubectl_ok(env, &["-n", &ns, "scale", "deployment/ws", "--replicas=0"]);
    stub.wait_for("the change after recreation", seen, LONG, |r| {
        r.request.workspace_agent_infos.iter().any(|i| i.namespace == ns)
    })
    .await;
    assert!(agent.logs().contains("WorkspaceSyncStatus was deleted"), "a log line says what happened");
}
