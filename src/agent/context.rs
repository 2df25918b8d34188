//! What one term as leader shares between its cycles and its applies: the cluster handles,
//! the index, the ledger and what was last written of it.

use super::apply::Applier;
use super::control_plane_client::ControlPlaneClient;
use super::error::Result;
use super::k8s::Cluster;
use super::metrics::Metrics;
use super::metrics::ReasonLabel;
use super::sync::index::SharedIndex;
use super::sync::ledger::Ledger;
use super::sync::pod_failures::PodFailures;
use super::sync::status::RenderKey;
use super::sync::status_write::{STATUS_WRITE_FAILED, StatusWriteHealth, failure_reason};
use crate::crd::{CONDITION_LEDGER_TRUNCATED, WorkspaceSyncStatusStatus};
use crate::runtime::LockExt;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Leading-edge minimum gap between cycle starts; triggers inside it merge into one cycle.
    pub min_cycle_gap: Duration,
    /// How many workspaces are applied at once.
    pub apply_concurrency: usize,
    /// How long one apply may take before it is reported, retried, and frees its slot.
    pub apply_timeout: Duration,
    /// How long a termination may run before it is reported as stuck.
    pub termination_timeout: Duration,
}

/// What survives between cycles, guarded by one short-lived lock.
pub struct SyncState {
    pub ledger: Ledger,
    /// False until the first successful full cycle of this leadership.
    pub full_done: bool,
    /// The last cycle's answer never arrived (or could not be read): the control plane may
    /// have committed it, so the next cycle is full.
    pub answer_lost: bool,
    /// The control plane's prerequisites, fetched once per leadership before the first cycle.
    pub prerequisites: Option<crate::protocol::Prerequisites>,
    pub consecutive_failures: u32,
    pub termination_clock: super::sync::termination_clock::TerminationClock,
    /// When a cycle last looked for Pod failures whose grace ended.
    pub pods_checked_at: Timestamp,
}

/// The status as last written: its serialized bytes, compared exactly before the next write
/// (at 10,000 workspaces 340 KB in one allocation, where the parsed copy held every
/// acknowledgement in a map again), and its conditions, whose transition times carry over.
#[derive(Default)]
struct Written {
    json: Option<Box<str>>,
    conditions: Vec<Condition>,
    key: Option<RenderKey>,
    /// Whether the last writes failed, and when that was last said.
    health: StatusWriteHealth,
}

impl Written {
    fn of(status: Option<&WorkspaceSyncStatusStatus>) -> Self {
        let Some(status) = status else { return Self::default() };
        Self {
            json: serde_json::to_string(status).ok().map(String::into_boxed_str),
            conditions: status.conditions.clone(),
            key: None,
            health: StatusWriteHealth::default(),
        }
    }
}

fn is_truncated(conditions: &[Condition]) -> bool {
    conditions.iter().any(|c| c.type_ == CONDITION_LEDGER_TRUNCATED)
}

pub struct Context {
    /// The handles a term is built from.
    pub parts: Parts,
    state: Mutex<SyncState>,
    /// The status as last written, and the ledger's render key then; held across the write
    /// so writes never reorder.
    written: tokio::sync::Mutex<Written>,
    last_cycle_start: tokio::sync::Mutex<Option<Instant>>,
    pub apply_slots: Arc<Semaphore>,
    pub intents: super::intents::Intents,
    pub applies: Mutex<JoinSet<()>>,
    pub cycles: AtomicU64,
    /// The failing Pods of the workspaces, kept by the Pod watch.
    pub pod_failures: Arc<Mutex<PodFailures>>,
}

/// The parts a term is built from.
pub struct Parts {
    pub cluster: Cluster,
    pub applier: Applier,
    pub control_plane: ControlPlaneClient,
    pub index: SharedIndex,
    pub config: LoopConfig,
    pub metrics: Arc<Metrics>,
    pub leading: watch::Receiver<bool>,
}

impl Context {
    pub fn new(parts: Parts, ledger: Ledger, written: Option<&WorkspaceSyncStatusStatus>) -> Self {
        Self {
            apply_slots: Arc::new(Semaphore::new(parts.config.apply_concurrency.max(1))),
            intents: Default::default(),
            parts,
            state: Mutex::new(SyncState {
                ledger,
                full_done: false,
                answer_lost: false,
                prerequisites: None,
                consecutive_failures: 0,
                termination_clock: Default::default(),
                pods_checked_at: Timestamp::now(),
            }),
            pod_failures: Default::default(),
            written: tokio::sync::Mutex::new(Written::of(written)),
            last_cycle_start: tokio::sync::Mutex::new(None),
            applies: Mutex::new(JoinSet::new()),
            cycles: AtomicU64::new(0),
        }
    }

    /// Stop every apply this term spawned: the Lease is lost, and the next leader re-applies.
    pub fn abort_applies(&self) {
        self.applies.lock_unpoisoned().abort_all();
    }

    pub fn state(&self) -> MutexGuard<'_, SyncState> {
        self.state.lock_unpoisoned()
    }

    /// Write the ledger to the status if its rendering changed since the last write.
    pub async fn persist(&self) -> Result<()> {
        let mut written = self.written.lock().await;
        let workspaces = self.parts.index.lock().len();
        let (key, status) = {
            let state = self.state();
            let key = state.ledger.render_key(workspaces);
            if written.json.is_some() && written.key.as_ref() == Some(&key) {
                // Nothing the status shows has changed: no render, no write.
                return Ok(());
            }
            (key, state.ledger.to_status(workspaces, &written.conditions, Timestamp::now()))
        };
        self.parts.metrics.pending_errors.set(status.pending_error_count as i64);
        if is_truncated(&status.conditions) && !is_truncated(&written.conditions) {
            tracing::warn!(
                kept = status.pending_errors.len(),
                pending = status.pending_error_count,
                "too many pending errors for the WorkspaceSyncStatus: it keeps the newest; all are still reported"
            );
        }
        let json = serde_json::value::to_raw_value(&status)?;
        if written.json.as_deref() != Some(json.get()) {
            crate::runtime::failpoint::hit("before-status-write");
            if let Err(error) = self.parts.cluster.write_status(&json).await {
                let said = self.status_write_failed(&mut written.health, &error);
                // The Event is published after the lock: an apiserver that does not answer
                // must not stall every other writer behind it.
                drop(written);
                if let Some(note) = said {
                    self.parts.cluster.warn_agent(STATUS_WRITE_FAILED, "WriteStatus", &note).await;
                }
                return Err(error);
            }
            if let Some(recovered) = written.health.written() {
                tracing::info!(
                    failures = recovered.failures,
                    since = %recovered.since,
                    "the WorkspaceSyncStatus is written again"
                );
                self.parts.metrics.status_write_failing.set(0);
            }
            written.json = Some(json.get().into());
        }
        written.conditions = status.conditions;
        written.key = Some(key);
        Ok(())
    }

    /// A refused status write is loud: counted at every failure, and said in the log and (by
    /// the caller) an Event on the WorkspaceSyncStatus when it starts, changes reason, and
    /// every 5 minutes: the Event's note, when it is to be said. The cycle goes on failing
    /// (and retrying) while the rest of the agent keeps syncing.
    fn status_write_failed(&self, health: &mut StatusWriteHealth, error: &super::error::Error) -> Option<String> {
        let (code, reason) = match error {
            super::error::Error::Kube(kube::Error::Api(status)) => (Some(status.code), status.reason.as_str()),
            _ => (None, ""),
        };
        let reason = failure_reason(code, reason);
        let metrics = &self.parts.metrics;
        metrics.status_write_failures.get_or_create(&ReasonLabel { reason: reason.clone() }).inc();
        metrics.status_write_failing.set(1);
        if !health.failed(&reason, Timestamp::now()) {
            return None;
        }
        tracing::error!(%reason, %error, "could not write the WorkspaceSyncStatus; the agent keeps syncing and retries");
        Some(format!(
            "the agent cannot write its WorkspaceSyncStatus ({reason}): {error}. It keeps syncing; what it \
             learns is not saved until a write succeeds, and a restart begins with a full cycle"
        ))
    }

    /// `persist`, for callers that can only log a failure: the next cycle writes again.
    pub async fn persist_logged(&self) {
        if let Err(error) = self.persist().await {
            tracing::warn!(%error, "could not write the ledger; the next cycle retries");
        }
    }

    /// Forget what was written, so that the next persist writes the whole status again.
    /// Whether the writes were failing is kept: the next write that succeeds says it ended.
    pub async fn forget_written(&self) {
        let mut written = self.written.lock().await;
        let health = std::mem::take(&mut written.health);
        *written = Written { health, ..Written::default() };
    }

    /// Enforce the leading-edge gap between cycle starts.
    pub async fn wait_for_gap(&self) {
        let mut last = self.last_cycle_start.lock().await;
        if let Some(previous) = *last {
            // A gap past what an Instant can hold (a mistyped flag) waits as long as tokio can.
            match previous.checked_add(self.parts.config.min_cycle_gap) {
                Some(due) => tokio::time::sleep_until(due.into()).await,
                None => tokio::time::sleep(self.parts.config.min_cycle_gap).await,
            }
        }
        *last = Some(Instant::now());
    }

    pub fn reap_finished_applies(&self) {
        let mut applies = self.applies.lock_unpoisoned();
        while applies.try_join_next().is_some() {}
    }

    /// After a big cycle: pack the long-lived per-workspace state into fresh allocations, then
    /// hand the freed memory back (src/allocator.rs).
    pub fn release_memory(&self) {
        self.parts.index.lock().compact();
        self.state().ledger.compact();
        self.parts.applier.compact_caches();
        crate::allocator::release_free_memory();
    }
}
