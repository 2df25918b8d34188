//! The control plane's store and reconcile pipeline, the same suite on SQLite and PostgreSQL.
//! PostgreSQL comes from `hack/local-postgres.sh`; a missing one fails the run, never skips.

use serde_json::json;

use crate::postgres;
use wsync::control_plane::decisions::pipeline::PipelineConfig;
use wsync::control_plane::decisions::rules::Lifecycle;
use wsync::control_plane::model::NewWorkspace;
use wsync::control_plane::store::{Store, StoreError};
use wsync::protocol::*;

fn pipeline() -> PipelineConfig {
    PipelineConfig {
        settings: Settings { full_reconciliation_interval_seconds: 60, partial_reconciliation_interval_seconds: 2 },
        lifecycle: Lifecycle { max_running_ms: 3_600_000, max_stopped_ms: 3_600_000, max_terminated_percent: 100 },
        label_key: "agent.gitlab.com/id".into(),
    }
}

fn running_deployment(name: &str, rv: &str) -> serde_json::Value {
    json!({
        "metadata": {"name": name, "resourceVersion": rv},
        "spec": {"replicas": 1},
        "status": {"availableReplicas": 1, "conditions": [
            {"type": "Available", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "reason": "NewReplicaSetAvailable"}]}
    })
}

fn request(update_type: UpdateType, infos: Vec<WorkspaceAgentInfo>) -> ReconcileRequest {
    ReconcileRequest { update_type, workspace_agent_infos: infos }
}

fn report(namespace: &str, name: &str) -> WorkspaceAgentInfo {
    WorkspaceAgentInfo { name: name.into(), namespace: namespace.into(), ..Default::default() }
}

async fn suite(store: Store) {
    // Agents: a token, stored hashed, finds its agent and nothing else.
    let token = store
        .create_agent("a1", &[ImagePullSecret { name: "regcred".into(), namespace: "default".into() }])
        .await
        .unwrap();
    let agent = store.agent_by_token(&token).await.unwrap().expect("the agent");
    assert_eq!(agent.id, "a1");
    assert!(store.agent_by_token("not-a-token").await.unwrap().is_none());
    assert!(matches!(store.create_agent("a1", &[]).await, Err(StoreError::Conflict(_))));
    let other_token = store.create_agent("a2", &[]).await.unwrap();
    let other = store.agent_by_token(&other_token).await.unwrap().expect("the other agent");

    let new = NewWorkspace { memory: Some("64Mi".into()), ..NewWorkspace::new("ws", "busybox:1.36") };
    let created = store.create_workspace("a1", &new).await.unwrap();
    assert_eq!((created.desired_state, created.actual_state), (DesiredState::Running, ActualState::CreationRequested));
    assert!(matches!(store.create_workspace("a1", &new).await, Err(StoreError::NameTaken(_))));
    let ns = created.namespace.clone();

    // Never responded: a partial returns it with config, and the pull secrets.
    let answer = store.reconcile(&agent, request(UpdateType::Partial, vec![]), &pipeline()).await.unwrap();
    assert_eq!(answer.workspace_rails_infos.len(), 1);
    let info = &answer.workspace_rails_infos[0];
    assert!(info.config_to_apply.contains("kind: Deployment"));
    assert_eq!(info.image_pull_secrets.len(), 1);
    assert_eq!(answer.settings.map(|s| s.partial_reconciliation_interval_seconds), Some(2));
    // Stamped: the next idle partial returns nothing.
    let answer = store.reconcile(&agent, request(UpdateType::Partial, vec![]), &pipeline()).await.unwrap();
    assert!(answer.workspace_rails_infos.is_empty());

    // A report persists the actual state and acknowledges the resourceVersion.
    let mut running = report(&ns, "ws");
    running.latest_k8s_deployment_info = Some(running_deployment("ws", "42").into());
    let answer = store.reconcile(&agent, request(UpdateType::Partial, vec![running]), &pipeline()).await.unwrap();
    let info = &answer.workspace_rails_infos[0];
    assert_eq!(info.actual_state, ActualState::Running);
    assert_eq!(info.deployment_resource_version.as_deref(), Some("42"));
    assert_eq!(store.workspace("a1", "ws").await.unwrap().unwrap().actual_state, ActualState::Running);

    // An error is kept with its message until a report without one.
    let mut failed = report(&ns, "ws");
    failed.error_details = Some(ErrorDetails {
        error_type: ErrorType::Applier,
        error_message: "Deployment.apps \"ws\" is invalid".into(),
    });
    store.reconcile(&agent, request(UpdateType::Partial, vec![failed]), &pipeline()).await.unwrap();
    let stored = store.workspace("a1", "ws").await.unwrap().unwrap();
    assert_eq!(stored.actual_state, ActualState::Error);
    let error = stored.error.expect("the error is persisted");
    assert_eq!((error.error_type.as_str(), error.message.as_str()), ("applier", "Deployment.apps \"ws\" is invalid"));
    let mut healthy = report(&ns, "ws");
    healthy.latest_k8s_deployment_info = Some(running_deployment("ws", "43").into());
    store.reconcile(&agent, request(UpdateType::Partial, vec![healthy]), &pipeline()).await.unwrap();
    assert!(store.workspace("a1", "ws").await.unwrap().unwrap().error.is_none());

    // A desired-state change is returned in the next partial, with replicas 0.
    store.set_desired("a1", "ws", DesiredState::Stopped).await.unwrap();
    let answer = store.reconcile(&agent, request(UpdateType::Partial, vec![]), &pipeline()).await.unwrap();
    assert_eq!(answer.workspace_rails_infos[0].desired_state, DesiredState::Stopped);
    assert!(answer.workspace_rails_infos[0].config_to_apply.contains("replicas: 0"));

    // An agent's error message is stored at the agent's own cap, whatever it sends.
    let mut shouting = report(&ns, "ws");
    shouting.error_details =
        Some(ErrorDetails { error_type: ErrorType::Applier, error_message: "x".repeat(64 * 1024) });
    store.reconcile(&agent, request(UpdateType::Partial, vec![shouting]), &pipeline()).await.unwrap();
    let stored = store.workspace("a1", "ws").await.unwrap().expect("ws").error.expect("the error");
    assert!(stored.message.len() <= MAX_MESSAGE_BYTES && stored.message.ends_with("(truncated)"));

    // An agent sees only its own workspaces: a report about another's is that agent's orphan,
    // acknowledged without config, and the owner's workspace is untouched.
    let answer =
        store.reconcile(&other, request(UpdateType::Full, vec![report(&ns, "ws")]), &pipeline()).await.unwrap();
    assert!(answer.workspace_rails_infos.iter().all(|i| i.config_to_apply.is_empty()));
    assert_eq!(store.workspace("a1", "ws").await.unwrap().expect("ws").desired_state, DesiredState::Stopped);
    assert!(store.workspace(&other.id, "ws").await.unwrap().is_none());

    // Terminated is final; once the agent reports it Terminated, a full leaves it out.
    store.set_desired("a1", "ws", DesiredState::Terminated).await.unwrap();
    assert!(matches!(store.set_desired("a1", "ws", DesiredState::Running).await, Err(StoreError::Conflict(_))));
    let mut gone = report(&ns, "ws");
    gone.termination_progress = Some(TerminationProgress::Terminated);
    store.reconcile(&agent, request(UpdateType::Partial, vec![gone]), &pipeline()).await.unwrap();
    let answer = store.reconcile(&agent, request(UpdateType::Full, vec![]), &pipeline()).await.unwrap();
    assert!(answer.workspace_rails_infos.is_empty());

    concurrent_reconciles_of_one_agent_all_succeed(&store, &other).await;
    orphans_are_recorded_acknowledged_and_settled_by_an_operator(&store).await;
    a_changed_admin_credential_ends_every_session(&store).await;
    super::people::people_on_both_databases(&store).await;
}

/// What a start records of its admin credential, on both databases: the same one keeps the
/// sessions, another (a new token file, or a switch to or from the stored token) ends them.
async fn a_changed_admin_credential_ends_every_session(store: &Store) {
    let open = || async { store.open_session(60_000, None).await.unwrap().0 };
    let live = |cookie: String| async move { store.session(&cookie).await.unwrap().is_some() };
    assert!(store.admin_credential_in_use(Some("hash-a")).await.unwrap(), "the first file");
    let cookie = open().await;
    assert!(!store.admin_credential_in_use(Some("hash-a")).await.unwrap());
    assert!(live(cookie.clone()).await, "the same file keeps its sessions");
    assert!(store.admin_credential_in_use(Some("hash-b")).await.unwrap());
    assert!(!live(cookie).await, "another file ends them");
    let cookie = open().await;
    assert!(store.admin_credential_in_use(None).await.unwrap(), "back to the stored token");
    assert!(!live(cookie).await);
    let cookie = open().await;
    assert!(!store.admin_credential_in_use(None).await.unwrap());
    assert!(live(cookie).await);
}

/// A control plane restored from an old backup: a workspace the agent reports is an orphan,
/// recorded with its first sighting, acknowledged (so an idle cycle is `[]` again), never sent
/// config, and gone only when an operator adopts or terminates it.
async fn orphans_are_recorded_acknowledged_and_settled_by_an_operator(store: &Store) {
    let token = store.create_agent("o1", &[]).await.unwrap();
    let agent = store.agent_by_token(&token).await.unwrap().expect("agent");
    let mut seen = report("old-ns", "old");
    seen.latest_k8s_deployment_info = Some(running_deployment("old", "41").into());
    let answer = store.reconcile(&agent, request(UpdateType::Full, vec![seen.clone()]), &pipeline()).await.unwrap();
    let info = answer.workspace_rails_infos.iter().find(|i| i.name == "old").expect("acknowledged");
    assert_eq!(info.deployment_resource_version.as_deref(), Some("41"));
    assert!(info.config_to_apply.is_empty() && info.desired_state != DesiredState::Terminated);
    let first = store.orphans("o1").await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!((first[0].namespace.as_str(), first[0].name.as_str()), ("old-ns", "old"));
    seen.latest_k8s_deployment_info = Some(running_deployment("old", "42").into());
    store.reconcile(&agent, request(UpdateType::Partial, vec![seen]), &pipeline()).await.unwrap();
    let again = store.orphans("o1").await.unwrap();
    assert_eq!(again[0].first_seen, first[0].first_seen, "the first sighting is kept");
    assert_eq!(again[0].deployment_resource_version.as_deref(), Some("42"));

    use wsync::control_plane::model::OrphanFate;
    let adopted = store
        .settle_orphan("o1", "old-ns", "old", OrphanFate::Adopt { image: "ide:1".into() })
        .await
        .unwrap()
        .expect("adopted");
    assert_eq!((adopted.namespace.as_str(), adopted.image.as_str()), ("old-ns", "ide:1"));
    assert_eq!(adopted.desired_state, DesiredState::Running);
    assert_eq!(adopted.actual_state, ActualState::Running, "adopted with the state it was last reported in");
    assert_eq!(adopted.deployment_resource_version.as_deref(), Some("42"));
    assert!(store.orphans("o1").await.unwrap().is_empty());
    assert!(store.settle_orphan("o1", "old-ns", "old", OrphanFate::Terminate).await.unwrap().is_none());

    store.reconcile(&agent, request(UpdateType::Full, vec![report("other-ns", "stray")]), &pipeline()).await.unwrap();
    let terminated =
        store.settle_orphan("o1", "other-ns", "stray", OrphanFate::Terminate).await.unwrap().expect("terminated");
    assert_eq!(terminated.desired_state, DesiredState::Terminated);
    let answer = store.reconcile(&agent, request(UpdateType::Partial, vec![]), &pipeline()).await.unwrap();
    let stray = answer.workspace_rails_infos.iter().find(|i| i.name == "stray").expect("returned to terminate");
    assert_eq!(stray.desired_state, DesiredState::Terminated);
}

/// Two replicas may overlap for a moment: their reconciles wait for each other, and none fails
/// (on PostgreSQL, rows locked in different orders used to deadlock).
async fn concurrent_reconciles_of_one_agent_all_succeed(store: &Store, agent: &wsync::control_plane::model::Agent) {
    let names: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    for name in &names {
        let new = NewWorkspace::new(name.as_str(), "busybox:1.36");
        store.create_workspace(&agent.id, &new).await.unwrap();
    }
    let namespace = |name: &str| wsync::control_plane::model::workspace_namespace(&agent.id, name);
    let runs = (0..16).map(|round| {
        let mut infos: Vec<WorkspaceAgentInfo> = names
            .iter()
            .map(|name| WorkspaceAgentInfo {
                latest_k8s_deployment_info: Some(running_deployment(name, &format!("{}", 100 + round)).into()),
                ..report(&namespace(name), name)
            })
            .collect();
        // Reported in a different order each time.
        infos.rotate_left(round % names.len());
        async move { store.reconcile(agent, request(UpdateType::Partial, infos), &pipeline()).await }
    });
    for result in futures::future::join_all(runs).await {
        result.expect("a concurrent reconcile");
    }
}

#[tokio::test]
async fn sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&format!("sqlite://{}/store.db", dir.path().display())).await.unwrap();
    suite(store).await;
    // Reopening migrates nothing twice and finds the data.
    let again = Store::connect(&format!("sqlite://{}/store.db", dir.path().display())).await.unwrap();
    assert!(again.workspace("a1", "ws").await.unwrap().is_some());
}

/// On SQLite, reconciles that queue while one commits share the next commit, each in a
/// savepoint: one that fails (here, on a corrupt row) fails alone and saves nothing, and every
/// other one in its batch is saved and answered.
#[tokio::test]
async fn sqlite_reconciles_committed_together_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/store.db", dir.path().display());
    let store = Store::connect(&url).await.unwrap();
    let mut agents = Vec::new();
    for id in ["good", "broken"] {
        let token = store.create_agent(id, &[]).await.unwrap();
        agents.push(store.agent_by_token(&token).await.unwrap().expect("the agent"));
        let new = NewWorkspace::new("ws", "busybox:1.36");
        store.create_workspace(id, &new).await.unwrap();
    }
    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    sqlx::query("UPDATE workspaces SET desired_state = 'Bogus' WHERE agent_id = 'broken'").execute(&raw).await.unwrap();

    let namespace = |agent: &str| wsync::control_plane::model::workspace_namespace(agent, "ws");
    let runs = (0..40).map(|round| {
        let agent = &agents[round % 2];
        let info = WorkspaceAgentInfo {
            latest_k8s_deployment_info: Some(running_deployment("ws", &format!("{}", 100 + round)).into()),
            ..report(&namespace(&agent.id), "ws")
        };
        let store = &store;
        async move {
            (agent.id.clone(), store.reconcile(agent, request(UpdateType::Partial, vec![info]), &pipeline()).await)
        }
    });
    for (agent, result) in futures::future::join_all(runs).await {
        match agent.as_str() {
            "good" => assert_eq!(result.expect("the good agent's reconcile").workspace_rails_infos.len(), 1),
            _ => assert!(matches!(result, Err(StoreError::Corrupt(_))), "{result:?}"),
        }
    }
    let good = store.workspace("good", "ws").await.unwrap().unwrap();
    assert_eq!(good.actual_state, ActualState::Running);
    assert!(good.responded_to_agent_at.is_some());
    let (reported,): (Option<i64>,) =
        sqlx::query_as("SELECT last_reported_at FROM workspaces WHERE agent_id = 'broken'")
            .fetch_one(&raw)
            .await
            .unwrap();
    assert_eq!(reported, None, "nothing of a failed reconcile is saved");
}

#[tokio::test]
async fn sqlite_in_memory_is_refused_with_a_reason() {
    let error = Store::connect("sqlite::memory:").await.err().expect("refused");
    assert!(error.to_string().contains("in memory"), "{error}");
    let stray = std::fs::read_dir(".").expect("the working directory").flatten();
    let stray: Vec<_> = stray.filter(|e| e.file_name().to_string_lossy().starts_with("sqlx-in-memory")).collect();
    assert!(stray.is_empty(), "no file left behind: {stray:?}");
}

#[tokio::test]
async fn postgres() {
    let url = postgres::fresh_database("store").await;
    suite(Store::connect(&url).await.unwrap()).await;
}

/// `/healthz` asks the store: a database that stops answering is unhealthy, with the reason.
#[tokio::test]
async fn health_follows_the_database() {
    let url = postgres::fresh_database("health").await;
    let store = Store::connect(&url).await.unwrap();
    store.health().await.expect("healthy");
    let database = url.rsplit_once('/').map(|(_, name)| name.to_string()).unwrap();
    let pool = sqlx::AnyPool::connect(postgres::admin_url()).await.expect("PostgreSQL is reachable");
    sqlx::query(&format!("DROP DATABASE {database} WITH (FORCE)")).execute(&pool).await.unwrap();
    let error = store.health().await.expect_err("the database is gone");
    assert!(error.to_string().contains("database"), "{error}");

    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::connect(&format!("sqlite://{}/store.db", dir.path().display())).await.unwrap();
    sqlite.health().await.expect("SQLite and its writer are healthy");
}

/// Each error an agent reports is kept in the workspace's history once, the newest five of
/// them: an agent that sends a new message every cycle cannot grow the table.
async fn error_history_keeps_the_newest_errors(store: Store) {
    let token = store.create_agent("h1", &[]).await.unwrap();
    let agent = store.agent_by_token(&token).await.unwrap().expect("the agent");
    store.create_workspace("h1", &NewWorkspace::new("ws", "busybox:1.36")).await.unwrap();
    let ns = wsync::control_plane::model::workspace_namespace("h1", "ws");
    let failing = |message: &str| WorkspaceAgentInfo {
        error_details: Some(ErrorDetails { error_type: ErrorType::Kubernetes, error_message: message.into() }),
        ..report(&ns, "ws")
    };
    for message in ["first", "first", "second", "third", "fourth", "fifth", "sixth", "seventh"] {
        store.reconcile(&agent, request(UpdateType::Partial, vec![failing(message)]), &pipeline()).await.unwrap();
    }
    let history = store.error_history("h1", "ws", "ws").await.unwrap();
    let messages: Vec<&str> = history.iter().map(|r| r.message.as_str()).collect();
    assert_eq!(messages, ["seventh", "sixth", "fifth", "fourth", "third"], "newest first, once each");
    assert!(store.error_history("h1", "a", "b").await.unwrap().is_empty(), "only the page's names");
}

fn ticking_clock() -> wsync::control_plane::model::Clock {
    let now = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(1_700_000_000_000));
    wsync::control_plane::model::Clock::from_fn(move || now.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
}

#[tokio::test]
async fn error_history_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&format!("sqlite://{}/history.db", dir.path().display())).await.unwrap();
    error_history_keeps_the_newest_errors(store.with_clock(ticking_clock())).await;
}

#[tokio::test]
async fn error_history_on_postgres() {
    let url = postgres::fresh_database("history").await;
    error_history_keeps_the_newest_errors(Store::connect(&url).await.unwrap().with_clock(ticking_clock())).await;
}
