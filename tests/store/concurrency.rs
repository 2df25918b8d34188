//! The store under concurrency and a moving clock, on SQLite and PostgreSQL (#19): an
//! operator's write is never lost to a reconcile that ran meanwhile, Terminated stays final
//! however calls interleave, and a clock that jumps ahead does not terminate every workspace
//! at once.

use crate::postgres;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use wsync::control_plane::decisions::pipeline::PipelineConfig;
use wsync::control_plane::decisions::rules::Lifecycle;
use wsync::control_plane::model::{Clock, NewWorkspace, workspace_namespace};
use wsync::control_plane::store::Store;
use wsync::protocol::*;

const HOUR_MS: i64 = 3_600_000;

fn pipeline(max_terminated_percent: u8) -> PipelineConfig {
    PipelineConfig {
        settings: Settings { full_reconciliation_interval_seconds: 60, partial_reconciliation_interval_seconds: 2 },
        lifecycle: Lifecycle { max_running_ms: 36 * HOUR_MS, max_stopped_ms: 744 * HOUR_MS, max_terminated_percent },
        label_key: "agent.gitlab.com/id".into(),
    }
}

async fn create(store: &Store, agent: &str, name: &str) {
    let new = NewWorkspace::new(name, "busybox:1.36");
    store.create_workspace(agent, &new).await.expect("create");
}

fn full_report(agent: &str, names: &[String]) -> ReconcileRequest {
    let infos = names
        .iter()
        .map(|name| WorkspaceAgentInfo {
            name: name.clone(),
            namespace: workspace_namespace(agent, name),
            ..Default::default()
        })
        .collect();
    ReconcileRequest { update_type: UpdateType::Full, workspace_agent_infos: infos }
}

/// Reconciles that report (and so rewrite) every row of an agent run while the operator stops
/// one workspace after another; then Terminate and Start race on fresh ones.
async fn no_lost_update(store: Store) {
    let token = store.create_agent("race", &[]).await.unwrap();
    let agent = store.agent_by_token(&token).await.unwrap().expect("the agent");
    const N: usize = 40;
    let names: Vec<String> = (0..N).map(|i| format!("w-{i}")).collect();
    for name in &names {
        create(&store, "race", name).await;
    }
    let config = pipeline(100);
    let mut lost = Vec::new();
    for name in &names {
        let reconciles = (0..3).map(|_| store.reconcile(&agent, full_report("race", &names), &config));
        let (answers, stopped) =
            tokio::join!(futures::future::join_all(reconciles), store.set_desired("race", name, DesiredState::Stopped));
        stopped.expect("stop").expect("the workspace");
        for answer in answers {
            answer.expect("a reconcile");
        }
        if store.workspace("race", name).await.unwrap().unwrap().desired_state != DesiredState::Stopped {
            lost.push(name.clone());
        }
    }
    assert!(lost.is_empty(), "Stop lost to a concurrent reconcile for {lost:?}");

    let mut revived = Vec::new();
    for i in 0..N {
        let name = format!("t-{i}");
        create(&store, "race", &name).await;
        store.set_desired("race", &name, DesiredState::Stopped).await.unwrap();
        let (terminated, started) = tokio::join!(
            store.set_desired("race", &name, DesiredState::Terminated),
            store.set_desired("race", &name, DesiredState::Running)
        );
        terminated.expect("terminate").expect("the workspace");
        // Start either ran first (then Terminate won) or was refused as final.
        let _ = started;
        if store.workspace("race", &name).await.unwrap().unwrap().desired_state != DesiredState::Terminated {
            revived.push(name);
        }
    }
    assert!(revived.is_empty(), "Terminated revived by a concurrent Start: {revived:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn no_lost_update_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    no_lost_update(Store::connect(&format!("sqlite://{}/race.db", dir.path().display())).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_lost_update_on_postgres() {
    let url = postgres::fresh_database("races").await;
    no_lost_update(Store::connect(&url).await.unwrap()).await;
}

/// 30 stopped workspaces, and the clock jumps a year ahead: each reconcile terminates at most
/// 10% of them (3), the longest-stopped first, and stamps them with the store's clock.
async fn lifecycle_guard(store: Store, now: Arc<AtomicI64>) {
    let token = store.create_agent("jump", &[]).await.unwrap();
    let agent = store.agent_by_token(&token).await.unwrap().expect("the agent");
    for i in 0..30 {
        let name = format!("w-{i:02}");
        create(&store, "jump", &name).await;
        store.set_desired("jump", &name, DesiredState::Stopped).await.unwrap();
    }
    let config = pipeline(10);
    let idle = || ReconcileRequest { update_type: UpdateType::Partial, workspace_agent_infos: vec![] };
    store.reconcile(&agent, idle(), &config).await.unwrap();
    let terminated = |list: &[wsync::control_plane::model::Workspace]| {
        list.iter().filter(|w| w.desired_state == DesiredState::Terminated).map(|w| w.name.clone()).collect::<Vec<_>>()
    };
    assert!(terminated(&store.workspaces("jump").await.unwrap()).is_empty(), "nothing is due yet");

    let jumped = now.fetch_add(365 * 24 * HOUR_MS, Ordering::SeqCst) + 365 * 24 * HOUR_MS;
    store.reconcile(&agent, idle(), &config).await.unwrap();
    let after_one = store.workspaces("jump").await.unwrap();
    assert_eq!(terminated(&after_one), ["w-00", "w-01", "w-02"], "the longest-stopped three, no more");
    for w in after_one.iter().filter(|w| w.desired_state == DesiredState::Terminated) {
        assert!(w.desired_state_updated_at >= jumped, "stamped by the store's clock: {}", w.desired_state_updated_at);
    }
    store.reconcile(&agent, idle(), &config).await.unwrap();
    assert_eq!(terminated(&store.workspaces("jump").await.unwrap()).len(), 6, "three more a reconcile");
}

/// A clock that a test moves; every read advances it a millisecond, as the system clock would.
fn test_clock() -> (Clock, Arc<AtomicI64>) {
    let now = Arc::new(AtomicI64::new(1_700_000_000_000));
    let reading = now.clone();
    (Clock::from_fn(move || reading.fetch_add(1, Ordering::SeqCst)), now)
}

#[tokio::test]
async fn the_lifecycle_guard_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let (clock, now) = test_clock();
    let store = Store::connect(&format!("sqlite://{}/jump.db", dir.path().display())).await.unwrap();
    lifecycle_guard(store.with_clock(clock), now).await;
}

#[tokio::test]
async fn the_lifecycle_guard_on_postgres() {
    let url = postgres::fresh_database("jump").await;
    let (clock, now) = test_clock();
    lifecycle_guard(Store::connect(&url).await.unwrap().with_clock(clock), now).await;
}

/// Workspaces created while reconciles commit, on SQLite: a creation reads (settings,
/// quotas) before it writes, and a deferred transaction could not upgrade to a writer once
/// the reconcile writer committed meanwhile ("database is locked", a 500 at the door).
#[tokio::test(flavor = "multi_thread")]
async fn creations_while_reconciles_commit_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&format!("sqlite://{}/busy.db", dir.path().display())).await.unwrap();
    let token = store.create_agent("busy", &[]).await.unwrap();
    let agent = store.agent_by_token(&token).await.unwrap().expect("the agent");
    let config = pipeline(100);
    let names: Vec<String> = (0..30).map(|i| format!("w-{i}")).collect();
    for name in &names {
        let reconciles = (0..3).map(|_| store.reconcile(&agent, full_report("busy", &[]), &config));
        let new = NewWorkspace::new(name.as_str(), "busybox:1.36");
        let (answers, created) =
            tokio::join!(futures::future::join_all(reconciles), store.create_workspace("busy", &new));
        created.unwrap_or_else(|e| panic!("creating {name} while reconciles commit: {e}"));
        for answer in answers {
            answer.expect("a reconcile");
        }
    }
}

/// Many agents reconcile at once, as a busy control plane sees them (on SQLite in one writer's
/// shared commits, on PostgreSQL side by side on the pool): each agent's rows get its own
/// report, its orphan is recorded under it, and an agent reporting a new error (on PostgreSQL
/// the locked path) is answered like the rest.
async fn agents_side_by_side(store: Store) {
    const AGENTS: usize = 12;
    let mut agents = Vec::new();
    for a in 0..AGENTS {
        let id = format!("side-{a}");
        let token = store.create_agent(&id, &[]).await.unwrap();
        for w in 0..5 {
            create(&store, &id, &format!("w-{w}")).await;
        }
        agents.push(store.agent_by_token(&token).await.unwrap().expect("the agent"));
    }
    let report = |agent: &str, round: usize| {
        let mut infos: Vec<WorkspaceAgentInfo> = (0..5)
            .map(|w| {
                let name = format!("w-{w}");
                let namespace = workspace_namespace(agent, &name);
                let info = serde_json::json!({"metadata": {"name": name, "namespace": namespace,
                    "resourceVersion": format!("{agent}/{name}/{round}")}});
                WorkspaceAgentInfo {
                    name,
                    namespace,
                    latest_k8s_deployment_info: Some(info.into()),
                    ..Default::default()
                }
            })
            .collect();
        infos.push(WorkspaceAgentInfo {
            name: "stray".into(),
            namespace: format!("{agent}-stray"),
            ..Default::default()
        });
        if agent.ends_with('3') {
            infos[0].error_details =
                Some(ErrorDetails { error_type: ErrorType::Applier, error_message: "boom".into() });
        }
        ReconcileRequest { update_type: UpdateType::Partial, workspace_agent_infos: infos }
    };
    let config = pipeline(100);
    for round in 0..3 {
        let reconciles = agents.iter().map(|agent| store.reconcile(agent, report(&agent.id, round), &config));
        for (agent, answer) in agents.iter().zip(futures::future::join_all(reconciles).await) {
            answer.unwrap_or_else(|e| panic!("{}'s reconcile in round {round}: {e}", agent.id));
        }
    }
    for agent in &agents {
        for w in 0..5 {
            let name = format!("w-{w}");
            let saved = store.workspace(&agent.id, &name).await.unwrap().expect("the workspace");
            assert_eq!(saved.deployment_resource_version, Some(format!("{}/{name}/2", agent.id)), "{}", agent.id);
        }
        let orphans = store.orphans(&agent.id).await.unwrap();
        assert_eq!(orphans.iter().map(|o| o.namespace.as_str()).collect::<Vec<_>>(), [format!("{}-stray", agent.id)]);
    }
    let failing = store.workspace("side-3", "w-0").await.unwrap().expect("the workspace");
    assert_eq!(failing.error.map(|e| e.message), Some("boom".into()), "the error reached its row");
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_side_by_side_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    agents_side_by_side(Store::connect(&format!("sqlite://{}/side.db", dir.path().display())).await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn agents_side_by_side_on_postgres() {
    let url = postgres::fresh_database("side_by_side").await;
    agents_side_by_side(Store::connect(&url).await.unwrap()).await;
}
