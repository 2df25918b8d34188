//! The sync loop: a kube-rs `Controller` on the agent's own `WorkspaceSyncStatus`, where one
//! reconcile is one sync cycle (DESIGN §2, "The loop").
//!
//! The Controller never runs two reconciles of one object at once, so a full and a partial
//! cycle never overlap. Deployment changes reach it through `reconcile_all_on`.

use super::applier::{self, ApplyError};
use super::apply_plan::ApplyPolicy;
use super::cluster::{Cluster, api_message};
use super::control_plane::ControlPlaneClient;
use super::cycle::{self, WorkspaceAction};
use super::errors::{ApplyVersion, Recorded};
use super::index::SharedIndex;
use super::ledger::{Ledger, SyncOutcome};
use super::memory;
use super::metrics::{CycleLabels, Metrics, ResultLabel, StatusLabel, UpdateTypeLabel};
use super::pull_secrets::CopyTracker;
use super::workspace::WorkspaceKey;
use crate::crd::{CONDITION_LEDGER_TRUNCATED, WorkspaceSyncStatus, WorkspaceSyncStatusStatus};
use crate::protocol::{ErrorType, UpdateType};
use crate::{Error, Result};
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{Predicate, WatchStreamExt, predicates, reflector, watcher};
use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::Instrument;

#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Leading-edge minimum gap between cycle starts; triggers inside it merge into one cycle.
    pub min_cycle_gap: Duration,
    /// How many workspaces are applied at once.
    pub apply_concurrency: usize,
    /// What the control plane may have applied.
    pub policy: ApplyPolicy,
}

/// What survives between cycles, guarded by one short-lived lock.
struct SyncState {
    ledger: Ledger,
    /// False until the first successful full cycle of this leadership.
    full_done: bool,
    /// The control plane's prerequisites, fetched once per leadership before the first cycle.
    prerequisites: Option<crate::protocol::Prerequisites>,
    consecutive_failures: u32,
}

/// The status as last written: its serialized bytes, compared exactly before the next write
/// (at 10,000 workspaces 340 KB in one allocation, where the parsed copy held every
/// acknowledgement in a map again), and its conditions, whose transition times carry over.
#[derive(Default)]
struct Written {
    json: Option<Box<str>>,
    conditions: Vec<Condition>,
    key: Option<super::ledger::RenderKey>,
}

impl Written {
    fn of(status: Option<&WorkspaceSyncStatusStatus>) -> Self {
        let Some(status) = status else { return Self::default() };
        Self {
            json: serde_json::to_string(status).ok().map(String::into_boxed_str),
            conditions: status.conditions.clone(),
            key: None,
        }
    }
}

fn is_truncated(conditions: &[Condition]) -> bool {
    conditions.iter().any(|c| c.type_ == CONDITION_LEDGER_TRUNCATED)
}

pub struct Context {
    cluster: Cluster,
    control_plane: ControlPlaneClient,
    index: SharedIndex,
    config: LoopConfig,
    state: Mutex<SyncState>,
    /// The status as last written, and the ledger's render key then; held across the write
    /// so writes never reorder.
    written: tokio::sync::Mutex<Written>,
    last_cycle_start: tokio::sync::Mutex<Option<Instant>>,
    apply_slots: Arc<Semaphore>,
    applies: Mutex<JoinSet<()>>,
    /// Who holds a copy of which image pull secret, to copy it again when it changes.
    pull_secret_copies: Mutex<CopyTracker>,
    cycles: AtomicU64,
    metrics: Arc<Metrics>,
}

impl Context {
    pub fn new(
        cluster: Cluster,
        control_plane: ControlPlaneClient,
        index: SharedIndex,
        config: LoopConfig,
        ledger: Ledger,
        written: Option<WorkspaceSyncStatusStatus>,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            cluster,
            control_plane,
            index,
            apply_slots: Arc::new(Semaphore::new(config.apply_concurrency.max(1))),
            config,
            state: Mutex::new(SyncState { ledger, full_done: false, prerequisites: None, consecutive_failures: 0 }),
            written: tokio::sync::Mutex::new(Written::of(written.as_ref())),
            last_cycle_start: tokio::sync::Mutex::new(None),
            applies: Mutex::new(JoinSet::new()),
            pull_secret_copies: Mutex::new(CopyTracker::default()),
            cycles: AtomicU64::new(0),
            metrics,
        }
    }

    /// Stop every apply this term spawned: the Lease is lost, and the next leader re-applies.
    pub fn abort_applies(&self) {
        self.applies.lock().unwrap_or_else(|p| p.into_inner()).abort_all();
    }

    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    fn state(&self) -> MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pull_secret_copies(&self) -> MutexGuard<'_, CopyTracker> {
        self.pull_secret_copies.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Write the ledger to the status if its rendering changed since the last write.
    async fn persist(&self) -> Result<()> {
        let mut written = self.written.lock().await;
        let workspaces = self.index.lock().len();
        let (key, status) = {
            let state = self.state();
            let key = state.ledger.render_key(workspaces);
            if written.json.is_some() && written.key.as_ref() == Some(&key) {
                // Nothing the status shows has changed: no render, no write.
                return Ok(());
            }
            (key, state.ledger.to_status(workspaces, &written.conditions, Timestamp::now()))
        };
        self.metrics.pending_errors.set(status.pending_error_count as i64);
        if is_truncated(&status.conditions) && !is_truncated(&written.conditions) {
            tracing::warn!(
                kept = status.pending_errors.len(),
                pending = status.pending_error_count,
                "too many pending errors for the WorkspaceSyncStatus: it keeps the newest; all are still reported"
            );
        }
        let json = serde_json::value::to_raw_value(&status)?;
        if written.json.as_deref() != Some(json.get()) {
            self.cluster.write_status(&json).await?;
            written.json = Some(json.get().into());
        }
        written.conditions = status.conditions;
        written.key = Some(key);
        Ok(())
    }

    /// Forget what was written, so that the next persist writes the whole status again.
    pub async fn forget_written(&self) {
        *self.written.lock().await = Written::default();
    }

    /// Enforce the leading-edge gap between cycle starts.
    async fn wait_for_gap(&self) {
        let mut last = self.last_cycle_start.lock().await;
        if let Some(previous) = *last {
            let due = previous + self.config.min_cycle_gap;
            tokio::time::sleep_until(due.into()).await;
        }
        *last = Some(Instant::now());
    }

    fn reap_finished_applies(&self) {
        let mut applies = self.applies.lock().unwrap_or_else(|p| p.into_inner());
        while applies.try_join_next().is_some() {}
    }
}

/// One sync cycle.
pub async fn reconcile(wss: Arc<WorkspaceSyncStatus>, ctx: Arc<Context>) -> Result<Action> {
    ctx.wait_for_gap().await;
    ctx.reap_finished_applies();
    let cycle_id = ctx.cycles.fetch_add(1, Ordering::Relaxed) + 1;
    let resync_request = wss.resync_request().map(str::to_string);
    let update_type = {
        let state = ctx.state();
        state.ledger.cycle_due(Timestamp::now(), !state.full_done, resync_request.as_deref())
    };
    let span = tracing::info_span!("sync_cycle", cycle = cycle_id, update_type = %update_type);
    let started = Instant::now();
    let result = run_cycle(&wss, &ctx, update_type, resync_request.as_deref()).instrument(span.clone()).await;
    let _entered = span.enter();
    let metrics = &ctx.metrics;
    let kind = UpdateTypeLabel { update_type: update_type.to_string() };
    metrics.cycle_duration.get_or_create(&kind).observe(started.elapsed().as_secs_f64());
    let outcome = if result.is_ok() { "success" } else { "error" };
    metrics.cycles.get_or_create(&CycleLabels { update_type: update_type.to_string(), result: outcome.into() }).inc();
    match result {
        Ok(requeue) => {
            ctx.state().consecutive_failures = 0;
            metrics.cycle_completed();
            metrics.last_success.get_or_create(&kind).set(Timestamp::now().as_millisecond() as f64 / 1000.0);
            Ok(Action::requeue(requeue))
        }
        Err(error) => {
            let (reason, message) = match &error {
                Error::ControlPlane(e) => (e.reason(), format!("control plane: {e}")),
                Error::Prerequisites(e) => ("PrerequisitesFailed", format!("control plane prerequisites: {e}")),
                Error::Kube(e) => ("KubernetesError", api_message(e)),
                other => ("SyncFailed", other.to_string()),
            };
            tracing::warn!(%error, reason, "sync cycle failed");
            {
                let mut state = ctx.state();
                state.consecutive_failures += 1;
                state.ledger.outcome = SyncOutcome::failed(reason, message);
            }
            if let Err(write_error) = ctx.persist().await {
                tracing::warn!(error = %write_error, "could not record the failure in the status");
            }
            Err(error)
        }
    }
}

async fn run_cycle(
    wss: &WorkspaceSyncStatus,
    ctx: &Arc<Context>,
    update_type: UpdateType,
    resync_request: Option<&str>,
) -> Result<Duration> {
    let started = Instant::now();
    if ctx.state().prerequisites.is_none() {
        // No sync runs until the control plane's prerequisites are known; a failure backs off
        // like any other and shows on the WorkspaceSyncStatus.
        let prerequisites = ctx.control_plane.prerequisites().await.map_err(Error::Prerequisites)?;
        tracing::info!(shared_namespace = %prerequisites.shared_namespace, "fetched the control plane's prerequisites");
        ctx.state().prerequisites = Some(prerequisites);
    }
    if update_type == UpdateType::Full {
        // As a restart would: a fresh LIST, no acknowledgements, no terminations.
        let listed = ctx.cluster.list_workspaces().await?;
        ctx.index.lock().replace_all(listed);
        ctx.state().ledger.reset_for_full();
        ctx.pull_secret_copies().clear();
    }
    let namespace_gone = terminated_namespaces(ctx).await?;
    let mut dirty = ctx.index.lock().dirty();
    let to_reread = cycle::to_reread(&dirty, &ctx.state().ledger);
    if !to_reread.is_empty() {
        reread_workspaces(ctx, to_reread).await;
        dirty = ctx.index.lock().dirty();
    }
    let plan = cycle::plan(update_type, &dirty, &ctx.state().ledger, &namespace_gone);
    drop(dirty);
    let sent = plan.request.workspace_agent_infos.len();
    ctx.metrics.workspaces_sent.observe(sent as f64);
    let request_started = Instant::now();
    let response = ctx.control_plane.reconcile(&plan.request).await;
    ctx.metrics.control_plane_duration.observe(request_started.elapsed().as_secs_f64());
    let status = match &response {
        Ok(_) => "201".to_string(),
        Err(crate::ControlPlaneError::Status { status, .. }) => status.to_string(),
        Err(other) => other.reason().to_string(),
    };
    ctx.metrics.control_plane_requests.get_or_create(&StatusLabel { status }).inc();
    let mut response = response?;

    let paused = wss.paused();
    let settled = {
        let mut state = ctx.state();
        let settled = cycle::settle(&mut state.ledger, &plan, &mut response, paused);
        let mut index = ctx.index.lock();
        if update_type == UpdateType::Full {
            cycle::prune_unknown(&mut state.ledger, |key| index.contains(key), &response);
        }
        // Checked under the ledger's lock, so that an apply recovering meanwhile keeps its
        // entry dirty.
        let acknowledged = settled.acknowledged.iter().map(|(key, rv)| (key, rv.as_str()));
        let already = plan.already_acknowledged.iter().map(|d| (d.key(), d.resource_version()));
        for (key, rv) in acknowledged.chain(already) {
            if state.ledger.holds(key, rv) {
                index.mark_clean_if(key, rv);
            }
        }
        drop(index);
        state.ledger.cycle_succeeded(update_type, Timestamp::now(), resync_request);
        state.full_done |= update_type == UpdateType::Full;
        settled
    };
    if let Some(reason) = &settled.rejected_settings {
        tracing::warn!(reason, "ignoring invalid settings from the control plane; keeping the last good ones");
    }
    let returned = response.workspace_rails_infos.len();
    drop(response);
    drop(plan);
    let actions = settled.actions.len();
    let release = update_type == UpdateType::Full || actions >= memory::RELEASE_AFTER_ACTIONS;
    spawn_actions(ctx, settled.actions, release);
    for key in &settled.forgotten {
        ctx.pull_secret_copies().forget(key);
    }
    refresh_pull_secret_copies(ctx).await;
    ctx.persist().await?;
    let requeue = ctx.state().ledger.requeue_after(Timestamp::now());
    tracing::info!(
        sent,
        returned,
        actions,
        paused,
        elapsed_ms = started.elapsed().as_millis() as u64,
        next_in_s = requeue.as_secs_f32(),
        "sync cycle done"
    );
    Ok(requeue)
}

/// Read again the Deployments whose info the index dropped, so that the cycle can report
/// them. One GET each; a failure leaves the entry dirty for the next cycle.
async fn reread_workspaces(ctx: &Context, keys: Vec<WorkspaceKey>) {
    let limit = ctx.config.apply_concurrency.max(1);
    let reads = futures::stream::iter(keys).map(|key| async move {
        let read = ctx.cluster.get_workspace(&key).await;
        (key, read)
    });
    let mut reads = reads.buffer_unordered(limit);
    while let Some((key, read)) = reads.next().await {
        match read {
            Ok(Some(deployment)) => ctx.index.lock().refresh(deployment),
            // Gone, or no longer this agent's: the watch removes it from the index.
            Ok(None) => {
                tracing::debug!(workspace = %key.name(), namespace = %key.namespace(), "a re-read Deployment is gone")
            }
            Err(error) => {
                tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), error = %api_message(&error), "could not read a workspace's Deployment; retrying next cycle")
            }
        }
    }
}

/// Tracked terminations whose namespace is gone: they report `Terminated`.
async fn terminated_namespaces(ctx: &Context) -> Result<HashSet<WorkspaceKey>> {
    let keys: Vec<WorkspaceKey> = ctx.state().ledger.terminations().keys().cloned().collect();
    let mut gone = HashSet::new();
    for key in keys {
        if !ctx.cluster.namespace_exists(key.namespace()).await? {
            gone.insert(key);
        }
    }
    Ok(gone)
}

/// Run a cycle's actions with bounded concurrency from one task, so that only as many apply
/// futures exist as run at once; then, if `release`, release the cycle's memory (at once when
/// there is nothing to run).
fn spawn_actions(ctx: &Arc<Context>, actions: Vec<WorkspaceAction>, release: bool) {
    if actions.is_empty() {
        if release {
            release_memory(ctx);
        }
        return;
    }
    let ctx2 = ctx.clone();
    let limit = ctx.config.apply_concurrency.max(1);
    let task = async move {
        futures::stream::iter(actions).for_each_concurrent(limit, |action| run_action(ctx2.clone(), action)).await;
        if release {
            release_memory(&ctx2);
        }
    };
    ctx.applies.lock().unwrap_or_else(|p| p.into_inner()).spawn(task.in_current_span());
}

/// After a big cycle: pack the long-lived per-workspace state into fresh allocations, then
/// hand the freed memory back (src/agent/memory.rs).
fn release_memory(ctx: &Context) {
    ctx.index.lock().compact();
    ctx.state().ledger.compact();
    ctx.cluster.compact_caches();
    memory::release_free_memory();
}

/// One workspace's apply or termination. The shared slots cap applies across cycles.
async fn run_action(ctx: Arc<Context>, action: WorkspaceAction) {
    let Ok(_slot) = ctx.apply_slots.clone().acquire_owned().await else {
        return;
    };
    match action {
        WorkspaceAction::Apply { key, config, image_pull_secrets, version } => {
            let result =
                applier::apply_workspace(&ctx.cluster, &ctx.config.policy, &key, &config, &image_pull_secrets).await;
            let result = result.map(|applied| ctx.pull_secret_copies().copied(&key, &applied.pull_secrets));
            record_result(&ctx, &key, version, result).await;
        }
        WorkspaceAction::Terminate { key } => {
            ctx.pull_secret_copies().forget(&key);
            if let Err((error_type, message)) =
                applier::terminate_workspace(&ctx.cluster, &ctx.config.policy, &key).await
            {
                tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), %message, "termination failed");
                ctx.state().ledger.errors_mut().fail_now(&key, error_type, &message, Timestamp::now());
                persist_logged(&ctx).await;
                emit_failure_event(&ctx, &key, "TerminationFailed", "Terminate", &message).await;
            }
        }
    }
}

/// Copy every tracked pull secret whose source changed since its last copy. A source that is
/// gone is an error for each workspace holding a copy; their next apply clears it.
async fn refresh_pull_secret_copies(ctx: &Arc<Context>) {
    let sources = ctx.pull_secret_copies().sources();
    for source in sources {
        let reference = crate::agent::pull_secrets::source_ref(&source);
        let current = match ctx.cluster.get_secret(&source).await {
            Ok(current) => current,
            Err(error) => {
                tracing::warn!(source = %reference, error = %api_message(&error), "could not read an image pull secret");
                continue;
            }
        };
        let rv = current.as_ref().and_then(|s| s.metadata.resource_version.clone());
        let stale = ctx.pull_secret_copies().stale_holders(&source, rv.as_deref());
        for key in stale {
            let result = match &current {
                Some(secret) => applier::copy_pull_secret(&ctx.cluster, secret, &source, key.namespace()).await,
                None => Err((ErrorType::Kubernetes, format!("image pull secret {reference} does not exist"))),
            };
            match result {
                Ok(()) => {
                    tracing::info!(source = %reference, namespace = %key.namespace(), "copied a changed image pull secret again")
                }
                Err((error_type, message)) => {
                    tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), %message, "image pull secret copy failed");
                    ctx.state().ledger.errors_mut().fail_now(&key, error_type, &message, Timestamp::now());
                    emit_failure_event(ctx, &key, "ApplyFailed", "CopyPullSecret", &message).await;
                }
            }
        }
    }
}

/// An Event on the workspace's Deployment when it exists, else on the WorkspaceSyncStatus.
async fn emit_failure_event(ctx: &Context, key: &WorkspaceKey, reason: &str, action: &str, message: &str) {
    let on_deployment = ctx.index.lock().contains(key);
    let regarding = match on_deployment {
        true => ctx.cluster.deployment_reference(key).await,
        false => None,
    };
    let note = match &regarding {
        Some(_) => message.to_string(),
        None => format!("workspace {key}: {message}"),
    };
    let regarding = regarding.unwrap_or_else(|| ctx.cluster.ledger_reference());
    ctx.cluster.warn_event(&regarding, key, reason, action, &note).await;
}

async fn record_result(ctx: &Arc<Context>, key: &WorkspaceKey, version: ApplyVersion, result: Result<(), ApplyError>) {
    let failure = result.as_ref().err().map(|(_, message)| message.clone());
    if let Some(message) = &failure {
        tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), %version, %message, "apply failed");
    }
    let recorded = ctx.state().ledger.errors_mut().record(key, version, result, Timestamp::now());
    let outcome = match recorded {
        Recorded::Failed => "failure",
        Recorded::Stale => "stale",
        Recorded::Healthy | Recorded::Recovered => "success",
    };
    ctx.metrics.applies.get_or_create(&ResultLabel { result: outcome.into() }).inc();
    match recorded {
        // Written at once, so that a kill -9 right after loses nothing.
        Recorded::Failed => {
            persist_logged(ctx).await;
            let message = failure.unwrap_or_default();
            emit_failure_event(ctx, key, "ApplyFailed", "Apply", &message).await;
        }
        // The control plane may still show the old error: report the workspace again, as one
        // it has not seen at this version (a report without error_details clears the error).
        // A Deployment not in the index yet is reported when the watch brings it.
        Recorded::Recovered => {
            if ctx.index.lock().contains(key) {
                ctx.state().ledger.report_again(key);
                ctx.index.lock().mark_dirty(key);
                ctx.index.notify();
            }
        }
        Recorded::Healthy | Recorded::Stale => {}
    }
}

async fn persist_logged(ctx: &Context) {
    if let Err(error) = ctx.persist().await {
        tracing::warn!(%error, "could not write the ledger; the next cycle retries");
    }
}

/// Back off exponentially after failures, capped at the partial interval.
pub fn error_policy(_wss: Arc<WorkspaceSyncStatus>, _error: &Error, ctx: Arc<Context>) -> Action {
    let state = ctx.state();
    Action::requeue(backoff(state.consecutive_failures, state.ledger.partial_interval()))
}

pub fn backoff(consecutive_failures: u32, cap: Duration) -> Duration {
    let exponent = consecutive_failures.saturating_sub(1).min(16);
    Duration::from_millis(500u64 << exponent).min(cap)
}

/// Run the Controller until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let config = ctx.cluster.config().clone();
    let api = ctx.cluster.ledger_api();
    let (reader, writer) = reflector::store();
    let recreate = ctx.clone();
    // Only spec and annotation changes (and a recreated object) start a cycle: the agent's
    // own status writes must not.
    let ledger_events = watcher(api, watcher::Config::default().fields(&format!("metadata.name={}", config.agent_id)))
        .default_backoff()
        // The status is the ledger's durable copy (340 KB at 10,000 workspaces); the loop
        // never reads it from the watch, so the reflector does not keep it.
        .modify(|wss: &mut WorkspaceSyncStatus| wss.status = None)
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(_)) = event {
                let ctx = recreate.clone();
                tokio::spawn(async move { recreate_ledger_object(&ctx).await });
            }
        })
        .applied_objects()
        .predicate_filter(predicates::generation.combine(predicates::annotations).combine(uid), Default::default());

    let changes = tokio_stream::wrappers::WatchStream::from_changes(ctx.index.subscribe()).map(|_| ());

    Controller::for_stream(ledger_events, reader)
        .reconcile_all_on(changes)
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "reconcile did not complete");
            }
        })
        .await;
    // Applies still running are dropped: they were never reported, and the next leader's
    // full cycle re-applies. What is recorded so far is written before the Lease goes.
    let mut applies = std::mem::take(&mut *ctx.applies.lock().unwrap_or_else(|p| p.into_inner()));
    applies.shutdown().await;
    persist_logged(&ctx).await;
}

fn uid(wss: &WorkspaceSyncStatus) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    wss.uid()?.hash(&mut hasher);
    Some(hasher.finish())
}

async fn recreate_ledger_object(ctx: &Context) {
    tracing::warn!("the WorkspaceSyncStatus was deleted; recreating it from the agent's memory");
    ctx.forget_written().await;
    let mut delay = Duration::from_millis(200);
    loop {
        match ctx.cluster.ensure_ledger_object().await {
            Ok(_) => break,
            Err(error) => {
                tracing::warn!(%error, "could not recreate the WorkspaceSyncStatus; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
    persist_logged(ctx).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps_at_the_partial_interval() {
        let cap = Duration::from_secs(10);
        assert_eq!(backoff(1, cap), Duration::from_millis(500));
        assert_eq!(backoff(2, cap), Duration::from_secs(1));
        assert_eq!(backoff(4, cap), Duration::from_secs(4));
        assert_eq!(backoff(10, cap), cap);
        assert_eq!(backoff(u32::MAX, cap), cap);
    }
}
