//! The ledger never leaks (issue 7.4): a few hundred workspaces come and go (created,
//! terminated, forgotten by the control plane, deleted out of band), and after a full cycle the
//! `WorkspaceSyncStatus` holds entries only for workspaces the cluster or control plane knows.

use crate::support::stub::{Reply, Script, StubControlPlane};
use crate::support::*;
use futures::StreamExt;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wsync::protocol::{
    ActualState, DesiredState, ReconcileResponse, Settings, TerminationProgress, WorkspaceRailsInfo,
};

const LONG: Duration = Duration::from_secs(120);
const LIVE: usize = 200;
const GONE: usize = 100;
const GONE_WITH_ERRORS: usize = 50;
const TERMINATED: usize = 10;

fn keys(wss: &Value, field: &str) -> BTreeSet<String> {
    wss["status"][field].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default()
}

fn size(wss: &Value) -> usize {
    serde_json::to_vec(wss).map(|bytes| bytes.len()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_full_cycle_the_ledger_holds_only_workspaces_someone_knows() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("leak");
    let (live_ns, gone_ns) = (format!("{id}-live"), format!("{id}-gone"));
    let mut workspaces: Vec<(String, String)> = Vec::new();
    workspaces.extend((0..LIVE).map(|i| (live_ns.clone(), format!("ws-{i}"))));
    workspaces.extend((0..GONE).map(|i| (gone_ns.clone(), format!("ws-{i}"))));
    workspaces.extend((0..TERMINATED).map(|i| (format!("{id}-t{i}"), "ws".to_string())));
    futures::stream::iter(workspaces.iter())
        .for_each_concurrent(16, |(ns, name)| {
            let client = client.clone();
            let id = id.clone();
            async move {
                create_workspace(&client, ns, name, Some(&id)).await;
            }
        })
        .await;

    // The control plane: acknowledges every reported Deployment, hands half the `gone`
    // workspaces a config that fails, never acknowledges an error, terminates the `t*` ones,
    // and, once `forgotten` is set, no longer knows the `gone` ones at all.
    let forgotten = Arc::new(AtomicBool::new(false));
    let failing: BTreeSet<(String, String)> =
        (0..GONE_WITH_ERRORS).map(|i| (gone_ns.clone(), format!("ws-{i}"))).collect();
    let stub = StubControlPlane::start(Script::default()).await;
    {
        let (forgotten, gone_ns, prefix) = (forgotten.clone(), gone_ns.clone(), format!("{id}-t"));
        stub.set_responder(move |request| {
            let mut infos = Vec::new();
            for info in &request.workspace_agent_infos {
                let key = (info.namespace.clone(), info.name.clone());
                if info.error_details.is_some() || (forgotten.load(Ordering::SeqCst) && key.0 == gone_ns) {
                    continue;
                }
                let rv = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.resource_version());
                let mut rails = WorkspaceRailsInfo {
                    name: key.1.clone(),
                    namespace: key.0.clone(),
                    desired_state: DesiredState::Running,
                    actual_state: ActualState::Running,
                    deployment_resource_version: rv,
                    config_to_apply: String::new(),
                    image_pull_secrets: vec![],
                };
                if key.0.starts_with(&prefix) {
                    rails.desired_state = DesiredState::Terminated;
                    rails.actual_state = match info.termination_progress {
                        Some(TerminationProgress::Terminated) => ActualState::Terminated,
                        _ => ActualState::Terminating,
                    };
                } else if failing.contains(&key) {
                    rails.config_to_apply = config_map(&key.0, "no-inventory");
                }
                infos.push(rails);
            }
            let settings =
                Settings { full_reconciliation_interval_seconds: 600, partial_reconciliation_interval_seconds: 1 };
            Reply::created(&ReconcileResponse { workspace_rails_infos: infos, settings: Some(settings) })
        });
    }
    let agent = AgentProcess::start(env, &id, &stub.url, &[]);

    let before = eventually("every workspace acknowledged, errors pending, terminations done", LONG, || {
        let wss = wss_json(env, &id)?;
        let status = &wss["status"];
        let settled = keys(&wss, "acknowledged").len() == LIVE + GONE
            && status["pendingErrorCount"] == GONE_WITH_ERRORS
            && keys(&wss, "terminations").is_empty();
        settled.then_some(wss)
    })
    .await;
    for i in 0..TERMINATED {
        assert!(!kubectl(env, &["get", "namespace", &format!("{id}-t{i}")]).status.success(), "terminated");
    }

    // Out of band: the `gone` Deployments are deleted, and the control plane forgets them.
    kubectl_ok(env, &["-n", &gone_ns, "delete", "deployments", "--all", "--wait=false"]);
    forgotten.store(true, Ordering::SeqCst);
    let partials = agent.cycles("partial");
    eventually("partial cycles after the deletion", LONG, || (agent.cycles("partial") > partials + 2).then_some(()))
        .await;

    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "annotate", &format!("wss/{id}"), "wsync.dev/resync-requested=leak-1"]);
    let after = eventually("the requested full cycle", LONG, || {
        let wss = wss_json(env, &id)?;
        (wss["status"]["lastHandledResyncRequest"] == "leak-1").then_some(wss)
    })
    .await;
    let live: BTreeSet<String> = (0..LIVE).map(|i| format!("{live_ns}/ws-{i}")).collect();
    assert_eq!(keys(&after, "acknowledged"), live, "only the live workspaces stay acknowledged");
    assert!(keys(&after, "terminations").is_empty());
    assert_eq!(after["status"]["pendingErrorCount"], 0, "errors of workspaces nobody knows are gone");
    assert_eq!(after["status"]["pendingErrors"].as_array().map_or(0, Vec::len), 0);
    assert_eq!(after["status"]["errorMessages"].as_array().map_or(0, Vec::len), 0, "no orphaned messages");
    assert_eq!(after["status"]["workspaces"], LIVE);
    eprintln!(
        "WorkspaceSyncStatus size: {} bytes with {} workspaces and {GONE_WITH_ERRORS} pending errors; {} bytes with {LIVE} after the full cycle",
        size(&before),
        LIVE + GONE,
        size(&after)
    );
}
