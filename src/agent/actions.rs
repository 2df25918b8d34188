//! Running what a cycle's answer asks for: applies and terminations, with bounded
//! concurrency, each result recorded under its version, and the follow-up it calls for.

use super::context::Context;
use super::error::ApplyError;
use super::metrics::ResultLabel;
use super::sync::cycle::WorkspaceAction;
use super::sync::error_tracker::{ApplyVersion, FollowUp};
use super::sync::workspace::WorkspaceKey;
use crate::runtime::LockExt;
use futures::StreamExt;
use jiff::Timestamp;
use std::sync::Arc;
use tracing::Instrument;

/// Run a cycle's actions with bounded concurrency from one task, so that only as many apply
/// futures exist as run at once; then, if `release`, release the cycle's memory (at once when
/// there is nothing to run).
pub fn spawn(ctx: &Arc<Context>, actions: Vec<WorkspaceAction>, release: bool) {
    if actions.is_empty() {
        if release {
            ctx.release_memory();
        }
        return;
    }
    let ctx2 = ctx.clone();
    let limit = ctx.config.apply_concurrency.max(1);
    let task = async move {
        futures::stream::iter(actions).for_each_concurrent(limit, |action| run(ctx2.clone(), action)).await;
        if release {
            ctx2.release_memory();
        }
    };
    ctx.applies.lock_unpoisoned().spawn(task.in_current_span());
}

/// One workspace's apply or termination. The shared slots cap applies across cycles.
async fn run(ctx: Arc<Context>, action: WorkspaceAction) {
    let Ok(_slot) = ctx.apply_slots.clone().acquire_owned().await else {
        return;
    };
    match action {
        WorkspaceAction::Apply { key, config, image_pull_secrets, version } => {
            let result = ctx.applier.apply(&key, &config, &image_pull_secrets).await;
            record_result(&ctx, &key, version, result).await;
        }
        WorkspaceAction::Refuse { key, reason, version } => {
            record_result(&ctx, &key, version, Err(ApplyError::applier(reason))).await;
        }
        WorkspaceAction::Terminate { key } => {
            if let Err(error) = ctx.applier.terminate(&key).await {
                fail_now(&ctx, &key, &error, "Terminate");
                ctx.persist_logged().await;
                warn(&ctx, &key, "TerminationFailed", "Terminate", &error.message).await;
            }
        }
    }
}

/// Copy again the pull secrets whose source changed; a failed copy is the workspace's error.
/// The cycle writes the ledger after.
pub async fn refresh_pull_secret_copies(ctx: &Context) {
    for (key, error) in ctx.applier.refresh_pull_secret_copies().await {
        fail_now(ctx, &key, &error, "CopyPullSecret");
        warn(ctx, &key, "ApplyFailed", "CopyPullSecret", &error.message).await;
    }
}

/// A failure no apply's version covers (a termination, a pull secret copy): pending at once.
fn fail_now(ctx: &Context, key: &WorkspaceKey, error: &ApplyError, action: &str) {
    tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), message = %error, "{action} failed");
    ctx.state().ledger.errors_mut().fail_now(key, error, Timestamp::now());
}

async fn warn(ctx: &Context, key: &WorkspaceKey, reason: &str, action: &str, message: &str) {
    let on_deployment = ctx.index.lock().contains(key);
    ctx.cluster.warn_workspace(key, on_deployment, reason, action, message).await;
}

async fn record_result(ctx: &Context, key: &WorkspaceKey, version: ApplyVersion, result: Result<(), ApplyError>) {
    let failure = result.as_ref().err().map(|error| error.message.clone());
    if let Some(message) = &failure {
        tracing::warn!(workspace = %key.name(), namespace = %key.namespace(), %version, %message, "apply failed");
    }
    let recorded = ctx.state().ledger.errors_mut().record(key, version, result, Timestamp::now());
    ctx.metrics.applies.get_or_create(&ResultLabel { result: recorded.metric_label().into() }).inc();
    match recorded.follow_up() {
        FollowUp::PersistAndWarn => {
            ctx.persist_logged().await;
            warn(ctx, key, "ApplyFailed", "Apply", &failure.unwrap_or_default()).await;
        }
        // A Deployment not in the index yet is reported when the watch brings it.
        FollowUp::ReportAgain => {
            if ctx.index.lock().contains(key) {
                ctx.state().ledger.report_again(key);
                ctx.index.lock().mark_dirty(key);
                ctx.index.notify();
            }
        }
        FollowUp::Nothing => {}
    }
}
