//! Running what a cycle's answer asks for: applies and terminations, with bounded
//! concurrency, each result recorded under its version, and the follow-up it calls for.
//! One action per workspace at a time (`Intents`); each apply has a deadline; a failed apply
//! is retried with its config, backing off from 1 s to the partial interval, until it
//! succeeds or a newer intent replaces it.

use super::context::Context;
use super::error::ApplyError;
use super::metrics::{ReasonLabel, ResultLabel};
use super::policy::drift::LiveObjects;
use super::sync::backoff::Backoff;
use super::sync::cycle::WorkspaceAction;
use super::sync::deployment_failure::WorkloadFailure;
use super::sync::error_tracker::{ApplyVersion, FollowUp, Recorded};
use super::sync::workspace::WorkspaceKey;
use crate::runtime::LockExt;
use futures::StreamExt;
use jiff::Timestamp;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Run a cycle's actions with bounded concurrency from one task, so that only as many apply
/// futures exist as run at once; then, if `release`, release the cycle's memory (at once when
/// there is nothing to run).
/// `live` is a full resync's LIST: a first attempt sends only what drifted; a retry sends all.
pub fn spawn(ctx: &Arc<Context>, actions: Vec<WorkspaceAction>, release: bool, live: Option<Arc<LiveObjects>>) {
    if actions.is_empty() {
        if release {
            ctx.release_memory();
        }
        return;
    }
    let ctx2 = ctx.clone();
    let limit = ctx.parts.config.apply_concurrency.max(1);
    let task = async move {
        futures::stream::iter(actions)
            .for_each_concurrent(limit, |action| run(ctx2.clone(), action, live.clone()))
            .await;
        if release {
            ctx2.release_memory();
        }
    };
    ctx.applies.lock_unpoisoned().spawn(task.in_current_span());
}

/// One workspace's apply or termination, as its newest intent: an older one still running for
/// the workspace is aborted first, and this one waits until it is gone.
async fn run(ctx: Arc<Context>, action: WorkspaceAction, live: Option<Arc<LiveObjects>>) {
    let key = action.key().clone();
    let carries = match &action {
        WorkspaceAction::Apply { config, image_pull_secrets, .. } => {
            Some(super::intents::digest(config, image_pull_secrets))
        }
        WorkspaceAction::Terminate { .. } | WorkspaceAction::Refuse { .. } => None,
    };
    let started = ctx.intents.start(&key, carries);
    let serial = started.serial;
    let handed_over = started.run(perform(&ctx, action, serial, live.as_deref())).await.unwrap_or(false);
    if !handed_over {
        ctx.intents.finish(&key, serial);
    }
}

/// Returns whether the intent went on in a task of its own (a failed apply's retries), so
/// that the stream of this cycle's actions does not wait for them.
async fn perform(ctx: &Arc<Context>, action: WorkspaceAction, serial: u64, live: Option<&LiveObjects>) -> bool {
    match action {
        WorkspaceAction::Apply { key, config, image_pull_secrets, version } => {
            let result = apply_once(ctx, &key, &config, &image_pull_secrets, live).await;
            let failed = result.is_err();
            record_result(ctx, &key, version, result).await;
            if !failed {
                return false;
            }
            let Some(next) = ctx.intents.hand_over(&key, serial) else { return false };
            let ctx2 = ctx.clone();
            let task = async move {
                next.run(retry(&ctx2, &key, &config, &image_pull_secrets, serial)).await;
                ctx2.intents.finish(&key, serial);
            };
            ctx.applies.lock_unpoisoned().spawn(task.in_current_span());
            true
        }
        WorkspaceAction::Refuse { key, reason, version } => {
            record_result(ctx, &key, version, Err(ApplyError::refused(reason))).await;
            false
        }
        WorkspaceAction::Terminate { key } => {
            let Ok(_slot) = ctx.apply_slots.clone().acquire_owned().await else { return false };
            if let Err(error) = ctx.parts.applier.terminate(&key).await {
                fail_now(ctx, &key, &error, "Terminate");
                ctx.persist_logged().await;
                warn(ctx, &key, "TerminationFailed", "Terminate", &error.message).await;
            }
            false
        }
    }
}

/// One attempt, in one of the shared slots (which cap applies across cycles), within the
/// apply deadline.
async fn apply_once(
    ctx: &Context,
    key: &WorkspaceKey,
    config: &str,
    pull_secrets: &[crate::protocol::ImagePullSecret],
    live: Option<&LiveObjects>,
) -> Result<(), ApplyError> {
    let Ok(_slot) = ctx.apply_slots.clone().acquire_owned().await else {
        return Err(ApplyError::kubernetes("the agent is stopping"));
    };
    let deadline = ctx.parts.config.apply_timeout;
    match tokio::time::timeout(deadline, ctx.parts.applier.apply(key, config, pull_secrets, live)).await {
        Ok(result) => result,
        Err(_) => Err(ApplyError::kubernetes(format!(
            "the apply did not finish within {deadline:?} (--apply-timeout); it is retried"
        ))),
    }
}

/// Retry a failed apply with the config it last received, until it succeeds, the failure is
/// superseded, or a newer intent aborts this one. A refusal by the apply policy cannot heal
/// by itself, so it is retried at the slow end only.
async fn retry(
    ctx: &Arc<Context>,
    key: &WorkspaceKey,
    config: &str,
    pull_secrets: &[crate::protocol::ImagePullSecret],
    serial: u64,
) {
    for attempt in 1u32.. {
        let partial = ctx.state().ledger.partial_interval();
        let lasting = ctx.state().ledger.errors().is_lasting(key);
        let schedule = Backoff { first: Duration::from_secs(1), cap: partial.max(Duration::from_secs(1)) };
        let wait = if lasting { schedule.cap } else { schedule.after(attempt) };
        tokio::time::sleep(jitter(wait)).await;
        let Some(retried) = ctx.state().ledger.errors().retryable(key) else { return };
        if !ctx.intents.is_current(key, serial) {
            return;
        }
        let result = apply_once(ctx, key, config, pull_secrets, None).await;
        let message = result.as_ref().err().map(|e| e.message.clone());
        let recorded = ctx.state().ledger.errors_mut().record_retry(key, retried, result, Timestamp::now());
        tracing::info!(workspace = %key.name(), namespace = %key.namespace(), attempt, outcome = recorded.metric_label(), "retried a failed apply");
        follow_up(ctx, key, recorded, message.as_deref()).await;
        if matches!(recorded, Recorded::Recovered | Recorded::Stale) {
            return;
        }
    }
}

/// Between half and all of `wait`, so that many workspaces failing at once do not retry in step.
fn jitter(wait: Duration) -> Duration {
    let mut byte = [0u8; 1];
    let spread = getrandom::fill(&mut byte).map(|()| u32::from(byte[0])).unwrap_or(128);
    wait / 2 + (wait / 2).mul_f64(f64::from(spread) / 255.0)
}

/// Copy again the pull secrets whose source changed; a failed copy is the workspace's error.
/// The cycle writes the ledger after.
pub async fn refresh_pull_secret_copies(ctx: &Context) {
    for (key, error) in ctx.parts.applier.refresh_pull_secret_copies().await {
        fail_now(ctx, &key, &error, "CopyPullSecret");
        warn(ctx, &key, "ApplyFailed", "CopyPullSecret", &error.message).await;
    }
}

/// Terminations past `--termination-timeout`: each is its workspace's `kubernetes` error, naming
/// what holds the namespace, and a Warning Event. The control plane's Terminated keeps them
/// going; the namespace's deletion was asked for already.
pub async fn report_stuck_terminations(ctx: &Context, keys: Vec<WorkspaceKey>) {
    let shared = ctx.parts.cluster.config().namespace_mode.shared().is_some();
    for key in keys {
        let holdup = if shared {
            ctx.parts.applier.shared_termination_holdup(&key).await
        } else {
            ctx.parts.cluster.namespace_holdup(key.namespace()).await
        };
        let holdup = match holdup {
            Ok(Some(holdup)) => holdup,
            Ok(None) => continue,
            Err(error) => format!("what holds it could not be read: {}", super::error::api_message(&error)),
        };
        let timeout = ctx.parts.config.termination_timeout;
        let what = if shared {
            format!("workspace {}'s objects are", key.name())
        } else {
            format!("namespace {} is", key.namespace())
        };
        let error = ApplyError::kubernetes(format!(
            "{what} still terminating after {timeout:?} (--termination-timeout): {holdup}"
        ));
        fail_now(ctx, &key, &error, "Terminate");
        warn(ctx, &key, "TerminationStuck", "Terminate", &error.message).await;
    }
}

/// Workload failures the cycle's observations found begun or ended. A new one is written to
/// the ledger at once, counted and emitted as an Event on the Deployment; an ended one makes
/// the control plane hear of the workspace again, without the error.
pub async fn report_workload_changes(ctx: &Context, changed: Vec<(WorkspaceKey, Recorded, Option<WorkloadFailure>)>) {
    let began = changed.iter().any(|(_, recorded, _)| *recorded == Recorded::Failed);
    if began {
        ctx.persist_logged().await;
    }
    for (key, recorded, failure) in changed {
        match (recorded, failure) {
            (Recorded::Failed, Some(failure)) => {
                tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), reason = %failure.reason, message = %failure.message, "a workspace's workload is failing");
                let reason = ReasonLabel { reason: failure.reason.as_str().into() };
                ctx.parts.metrics.workspace_failures.get_or_create(&reason).inc();
                warn(ctx, &key, "WorkspaceFailing", "Observe", &failure.message).await;
            }
            _ => {
                tracing::info!(workspace = %key.name(), namespace = %key.namespace(), "a workspace's workload failure ended");
                report_again(ctx, &key);
            }
        }
    }
}

/// A failure no apply's version covers (a termination, a pull secret copy): pending at once.
fn fail_now(ctx: &Context, key: &WorkspaceKey, error: &ApplyError, action: &str) {
    tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), message = %error, "{action} failed");
    ctx.state().ledger.errors_mut().fail_now(key, error, Timestamp::now());
}

async fn warn(ctx: &Context, key: &WorkspaceKey, reason: &str, action: &str, message: &str) {
    let on_deployment = ctx.parts.index.lock().contains(key);
    ctx.parts.cluster.warn_workspace(key, on_deployment, reason, action, message).await;
}

async fn record_result(ctx: &Context, key: &WorkspaceKey, version: ApplyVersion, result: Result<(), ApplyError>) {
    let failure = result.as_ref().err().map(|error| error.message.clone());
    if let Some(message) = &failure {
        tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), %version, %message, "apply failed");
    }
    let recorded = ctx.state().ledger.errors_mut().record(key, version, result, Timestamp::now());
    follow_up(ctx, key, recorded, failure.as_deref()).await;
}

/// Count a recorded result, and do what it calls for.
async fn follow_up(ctx: &Context, key: &WorkspaceKey, recorded: Recorded, failure: Option<&str>) {
    ctx.parts.metrics.applies.get_or_create(&ResultLabel { result: recorded.metric_label().into() }).inc();
    match recorded.follow_up() {
        FollowUp::PersistAndWarn => {
            ctx.persist_logged().await;
            warn(ctx, key, "ApplyFailed", "Apply", failure.unwrap_or_default()).await;
        }
        FollowUp::PersistAndReportAgain => {
            report_again(ctx, key);
            ctx.persist_logged().await;
        }
        FollowUp::Nothing => {}
    }
}

/// The control plane may still show an error that no longer holds: report the workspace again.
/// A Deployment not in the index yet is reported when the watch brings it.
fn report_again(ctx: &Context, key: &WorkspaceKey) {
    if ctx.parts.index.lock().contains(key) {
        ctx.state().ledger.report_again(key);
        ctx.parts.index.lock().mark_dirty(key);
        ctx.parts.index.notify();
    }
}
