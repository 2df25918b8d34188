//! The sync loop: a kube-rs `Controller` on the agent's own `WorkspaceSyncStatus`, where one
//! reconcile is one sync cycle (DESIGN §2, "The loop").
//!
//! The Controller never runs two reconciles of one object at once, so a full and a partial
//! cycle never overlap. Deployment changes reach it through `reconcile_all_on`.

use super::actions;
use super::context::Context;
use super::error::{Error, Result, api_message};
use super::metrics::{CycleLabels, StatusLabel, UpdateTypeLabel};
use super::retry::{retry_transient, when};
use super::sync::backoff::Backoff;
use super::sync::cycle;
use super::sync::outcome;
use super::sync::workspace::WorkspaceKey;
use crate::crd::WorkspaceSyncStatus;
use crate::protocol::UpdateType;
use crate::runtime::LockExt;
use futures::StreamExt;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{Predicate, WatchStreamExt, predicates, reflector, watcher};
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// One sync cycle.
pub async fn reconcile(wss: Arc<WorkspaceSyncStatus>, ctx: Arc<Context>) -> Result<Action> {
    ctx.wait_for_gap().await;
    ctx.reap_finished_applies();
    let cycle_id = ctx.cycles.fetch_add(1, Ordering::Relaxed) + 1;
    let resync_request = wss.resync_request().map(str::to_string);
    let update_type = {
        let state = ctx.state();
        let from_scratch = !state.full_done || state.answer_lost;
        state.ledger.cycle_due(Timestamp::now(), from_scratch, resync_request.as_deref())
    };
    let span = tracing::info_span!("sync_cycle", cycle = cycle_id, update_type = %update_type);
    let started = Instant::now();
    ctx.parts.metrics.cycle_started(update_type);
    let result = run_cycle(&wss, &ctx, update_type, resync_request.as_deref()).instrument(span.clone()).await;
    let _entered = span.enter();
    let metrics = &ctx.parts.metrics;
    let kind = UpdateTypeLabel { update_type: update_type.to_string() };
    metrics.cycle_duration.get_or_create(&kind).observe(started.elapsed().as_secs_f64());
    let outcome = if result.is_ok() { "success" } else { "error" };
    metrics.cycles.get_or_create(&CycleLabels { update_type: update_type.to_string(), result: outcome.into() }).inc();
    match result {
        Ok(requeue) => {
            {
                let mut state = ctx.state();
                state.consecutive_failures = 0;
                state.answer_lost &= update_type != UpdateType::Full;
                metrics.set_intervals(state.ledger.partial_interval(), state.ledger.full_interval());
            }
            metrics.cycle_completed();
            metrics.last_success.get_or_create(&kind).set(Timestamp::now().as_millisecond() as f64 / 1000.0);
            Ok(Action::requeue(requeue))
        }
        Err(error) => {
            let failed = outcome::failed_cycle(&error);
            tracing::warn!(%error, reason = failed.reason, "sync cycle failed");
            {
                let mut state = ctx.state();
                state.consecutive_failures = state.consecutive_failures.saturating_add(1);
                state.ledger.fields.outcome = failed;
                if error.answer_lost() {
                    tracing::info!("the control plane may have committed the lost answer; the next cycle is full");
                    state.answer_lost = true;
                }
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
        let prerequisites = ctx.parts.control_plane.prerequisites().await.map_err(Error::Prerequisites)?;
        ctx.parts
            .cluster
            .config()
            .namespace_mode
            .check_served(&prerequisites.shared_namespace)
            .map_err(Error::NamespaceModeMismatch)?;
        tracing::info!(shared_namespace = %prerequisites.shared_namespace, "fetched the control plane's prerequisites");
        ctx.state().prerequisites = Some(prerequisites);
    }
    if update_type == UpdateType::Full {
        // As a restart would: a fresh LIST, no acknowledgements, no terminations.
        let listed = ctx.parts.cluster.list_workspaces().await?;
        ctx.parts.index.lock().replace_all(listed);
        ctx.state().ledger.reset_for_full();
        ctx.parts.applier.forget_all_copies();
    }
    let namespace_gone = terminated_namespaces(ctx).await;
    let now = Timestamp::now();
    // A Pod failure whose grace ended since the last cycle is observed again now.
    let since = std::mem::replace(&mut ctx.state().pods_checked_at, now);
    let due = ctx.pod_failures.lock_unpoisoned().counting_since(since, now);
    if !due.is_empty() {
        let mut index = ctx.parts.index.lock();
        due.iter().for_each(|key| index.mark_dirty(key));
    }
    let mut dirty = ctx.parts.index.lock().dirty();
    let to_reread = cycle::to_reread(&dirty, &ctx.state().ledger);
    if !to_reread.is_empty() {
        reread_workspaces(ctx, to_reread).await;
        dirty = ctx.parts.index.lock().dirty();
    }
    let workload_changes = {
        // Lock order: Pods, then the state (the Pod watch takes the index after the Pods).
        let pods = ctx.pod_failures.lock_unpoisoned();
        cycle::observe_workloads(&dirty, &pods, &mut ctx.state().ledger, now)
    };
    actions::report_workload_changes(ctx, workload_changes).await;
    let plan = cycle::plan(update_type, &dirty, &ctx.state().ledger, &namespace_gone);
    drop(dirty);
    let sent = plan.request.workspace_agent_infos.len();
    ctx.parts.metrics.workspaces_sent.observe(sent as f64);
    let request_started = Instant::now();
    let response = ctx.parts.control_plane.reconcile(&plan.request).await;
    ctx.parts.metrics.control_plane_duration.observe(request_started.elapsed().as_secs_f64());
    let status = match &response {
        Ok(_) => crate::protocol::RECONCILE_SUCCESS.to_string(),
        Err(error) => error.status_label(),
    };
    ctx.parts.metrics.control_plane_requests.get_or_create(&StatusLabel { status }).inc();
    let mut response = response?;
    crate::runtime::failpoint::hit("after-answer");

    let paused = wss.paused();
    let settled = {
        let mut state = ctx.state();
        let in_flight = |key: &WorkspaceKey, config: &str, secrets: &[crate::protocol::ImagePullSecret]| {
            ctx.intents.carries(key, || super::intents::digest(config, secrets))
        };
        let settled = cycle::settle(&mut state.ledger, &plan, &mut response, paused, in_flight);
        let mut index = ctx.parts.index.lock();
        if update_type == UpdateType::Full {
            cycle::prune_unknown(&mut state.ledger, |key| index.contains(key), &response.response);
        }
        for (key, rv) in cycle::clean_after_answer(&settled, &plan, &state.ledger) {
            index.mark_clean_if(key, rv);
        }
        drop(index);
        state.ledger.cycle_succeeded(update_type, Timestamp::now(), resync_request);
        state.full_done |= update_type == UpdateType::Full;
        settled
    };
    let newly_stuck = {
        let mut state = ctx.state();
        let state = &mut *state;
        let running: Vec<WorkspaceKey> =
            state.ledger.terminations().keys().filter(|key| !namespace_gone.contains(key)).cloned().collect();
        let timeout =
            jiff::SignedDuration::try_from(ctx.parts.config.termination_timeout).unwrap_or(jiff::SignedDuration::MAX);
        let newly = state.termination_clock.tick(&running, Timestamp::now(), timeout);
        state.ledger.fields.stuck_terminations =
            state.termination_clock.stuck().iter().map(|key| key.to_string()).collect();
        ctx.parts.metrics.terminations_stuck.set(state.ledger.fields.stuck_terminations.len() as i64);
        newly
    };
    actions::report_stuck_terminations(ctx, newly_stuck).await;
    if let Some(limited) = &settled.limited {
        tracing::warn!(limited, "the answer held more than the agent takes at once; the rest waits");
    }
    if let Some(reason) = &settled.rejected_settings {
        tracing::warn!(reason, "ignoring invalid settings from the control plane; keeping the last good ones");
    }
    let returned = response.response.workspace_rails_infos.len();
    drop(response);
    drop(plan);
    let actions = settled.actions.len();
    let applies = settled.actions.iter().any(|action| matches!(action, cycle::WorkspaceAction::Apply { .. }));
    // A full resync compares with the cluster as it is now, and sends only what drifted.
    let live = if update_type == UpdateType::Full && applies {
        let listed = Instant::now();
        let live = ctx.parts.applier.live_objects().await;
        tracing::info!(
            objects = live.len(),
            elapsed_ms = listed.elapsed().as_millis() as u64,
            "listed what the agent applied, for the drift check"
        );
        Some(Arc::new(live))
    } else {
        None
    };
    actions::spawn(ctx, settled.actions, cycle::releases_memory(update_type, actions), live);
    for key in &settled.forgotten {
        ctx.parts.applier.forget(key);
    }
    actions::refresh_pull_secret_copies(ctx).await;
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
    let limit = ctx.parts.config.apply_concurrency.max(1);
    let reads = futures::stream::iter(keys).map(|key| async move {
        let read = ctx.parts.cluster.get_workspace(&key).await;
        (key, read)
    });
    let mut reads = reads.buffer_unordered(limit);
    while let Some((key, read)) = reads.next().await {
        match read {
            Ok(Some(deployment)) => ctx.parts.index.lock().refresh(deployment),
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

/// Tracked terminations whose namespace (in a shared namespace: whose inventories) is gone:
/// they report `Terminated`. One that cannot be
/// read (a malformed name in a hand-edited status, a refused GET) stays `Terminating` and
/// never fails the cycle.
async fn terminated_namespaces(ctx: &Context) -> HashSet<WorkspaceKey> {
    let keys: Vec<WorkspaceKey> = ctx.state().ledger.terminations().keys().cloned().collect();
    let limit = ctx.parts.config.apply_concurrency.max(1);
    let reads = futures::stream::iter(keys).map(|key| async move {
        let done = ctx.parts.applier.termination_done(&key).await;
        (key, done)
    });
    let mut reads = reads.buffer_unordered(limit);
    let mut gone = HashSet::new();
    while let Some((key, done)) = reads.next().await {
        match done {
            Ok(true) => {
                gone.insert(key);
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), error = %api_message(&error), "could not read a terminating workspace's namespace; it stays Terminating")
            }
        }
    }
    gone
}

/// Back off exponentially after failures, capped at the partial interval.
pub fn error_policy(_wss: Arc<WorkspaceSyncStatus>, _error: &Error, ctx: Arc<Context>) -> Action {
    let state = ctx.state();
    Action::requeue(Backoff::cycles(state.ledger.partial_interval()).after(state.consecutive_failures))
}

/// Run the Controller until `shutdown` resolves.
pub async fn run(ctx: Arc<Context>, shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static) {
    let agent_id = ctx.parts.cluster.config().agent_id.clone();
    let api = ctx.parts.cluster.ledger_api();
    let (reader, writer) = reflector::store();
    let recreate = ctx.clone();
    // Only spec and annotation changes (and a recreated object) start a cycle: the agent's
    // own status writes must not.
    let ledger_events = watcher(api, watcher::Config::default().fields(&format!("metadata.name={agent_id}")))
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

    let changes = tokio_stream::wrappers::WatchStream::from_changes(ctx.parts.index.subscribe()).map(|_| ());

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
    let mut applies = std::mem::take(&mut *ctx.applies.lock_unpoisoned());
    applies.shutdown().await;
    ctx.persist_logged().await;
}

fn uid(wss: &WorkspaceSyncStatus) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    wss.uid()?.hash(&mut hasher);
    Some(hasher.finish())
}

/// How often a leader checks that its CRD is still installed.
const CRD_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// Someone deleted the CRD (and so every WorkspaceSyncStatus): `/readyz` turns false and the
/// agent says why; when the CRD is back, the leader writes its WorkspaceSyncStatus again from
/// memory, and syncing goes on. Runs for one term.
pub async fn watch_crd(ctx: Arc<Context>) {
    let mut missing = false;
    loop {
        tokio::time::sleep(CRD_CHECK_INTERVAL).await;
        match ctx.parts.cluster.check_crd().await {
            Ok(()) if missing => {
                tracing::info!("the WorkspaceSyncStatus CRD is back; writing the status again");
                missing = false;
                ctx.parts.metrics.set_crd_present();
                recreate_ledger_object(&ctx).await;
                ctx.parts.index.notify();
            }
            Ok(()) => {}
            Err(Error::CrdMissing) if !missing => {
                tracing::error!(
                    "the WorkspaceSyncStatus CRD was deleted; not ready, and nothing syncs until it is back \
                     (kubectl apply -k manifests/)"
                );
                missing = true;
                ctx.parts.metrics.set_crd_absent();
            }
            Err(Error::CrdMissing) => {}
            Err(error) => tracing::debug!(%error, "could not check the WorkspaceSyncStatus CRD; checking again"),
        }
    }
}

/// Someone deleted the WorkspaceSyncStatus: write it again from memory, until it is back or
/// this term ends (a successor then writes its own).
async fn recreate_ledger_object(ctx: &Context) {
    tracing::warn!("the WorkspaceSyncStatus was deleted; recreating it from the agent's memory");
    ctx.forget_written().await;
    let term_over = when(ctx.parts.leading.clone(), false);
    let recreated = retry_transient("recreating the WorkspaceSyncStatus", Backoff::RECREATE, term_over, || {
        ctx.parts.cluster.ensure_ledger_object()
    })
    .await;
    if recreated.is_ok() {
        ctx.persist_logged().await;
    }
}

#[cfg(test)]
mod verifier;
