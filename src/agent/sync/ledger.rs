//! The agent's sync state, and its durable form in `WorkspaceSyncStatus.status` (DESIGN §2).
//!
//! Pure data: loading from and rendering to the CRD status, with no I/O.

use super::error_tracker::{ErrorTracker, Failure, Held};
pub use super::outcome::SyncOutcome;
use super::workspace::WorkspaceKey;
use crate::crd::{
    CONDITION_LEDGER_TRUNCATED, CONDITION_READY, CONDITION_SETTINGS_REJECTED, CONDITION_SYNCED,
    CONDITION_TERMINATION_STUCK, PendingErrorRecord, WorkspaceSyncStatusStatus,
};
use crate::protocol::workload::FailureReason;
use crate::protocol::{ErrorType, Settings, TerminationProgress, UpdateType};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// `lastPartialSyncTime` is a heartbeat: refreshed at most this often, so an idle agent
/// does not write its status every cycle.
pub const HEARTBEAT: SignedDuration = SignedDuration::from_secs(60);

/// What the status may take (DESIGN: < 1 MiB at 10,000 workspaces; the apiserver refuses
/// requests over 1.5 MiB). A pathological error set beyond it keeps only the newest errors.
pub const STATUS_BUDGET_BYTES: usize = 900 * 1024;
/// An error record without its workspace name and message, serialized.
const PENDING_ERROR_RECORD_BYTES: usize = 140;

/// See `Ledger::render_key`.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderKey {
    revision: u64,
    workspaces: usize,
    settings: Settings,
    rejected_settings: Option<String>,
    stuck_terminations: Vec<String>,
    last_handled_resync: Option<String>,
    times: [Option<Timestamp>; 3],
    outcome: SyncOutcome,
}

#[derive(Debug, Clone)]
pub struct Ledger {
    acknowledged: HashMap<WorkspaceKey, String>,
    terminations: HashMap<WorkspaceKey, TerminationProgress>,
    errors: ErrorTracker,
    /// Workspaces whose apply succeeded after a failure the control plane may still show:
    /// reported again, without error_details, whatever their acknowledgement says. In memory
    /// only; the full cycle after a restart reports every workspace anyway.
    report_again: HashSet<WorkspaceKey>,
    /// Bumped on every mutable access to the per-workspace maps, so that an idle cycle can
    /// tell the status is unchanged without rendering 10,000 entries.
    revision: u64,
    pub settings: Settings,
    /// Why the control plane's last settings were refused, while the last good ones hold.
    pub rejected_settings: Option<String>,
    /// Terminations past `--termination-timeout`, as `namespace/name`.
    pub stuck_terminations: Vec<String>,
    pub last_handled_resync: Option<String>,
    pub last_full_sync: Option<Timestamp>,
    pub next_full_sync: Option<Timestamp>,
    pub last_partial_sync: Option<Timestamp>,
    pub outcome: SyncOutcome,
}

impl Ledger {
    /// Load the ledger a previous run left behind, under a new epoch. Pending errors come back;
    /// in-flight applies were never persisted, and the first full cycle re-applies them.
    pub fn restore(status: Option<&WorkspaceSyncStatusStatus>) -> Self {
        let default = WorkspaceSyncStatusStatus::default();
        let status = status.unwrap_or(&default);
        let mut errors = ErrorTracker::new(status.epoch + 1);
        for record in &status.pending_errors {
            let (Some(key), Ok(version)) = (WorkspaceKey::parse(&record.workspace), record.version.parse()) else {
                tracing::warn!(workspace = %record.workspace, "skipping an unreadable pending error in the ledger");
                continue;
            };
            let message = status.error_messages.get(record.message as usize).cloned().unwrap_or_default();
            let failure = Failure {
                error_type: record.error_type,
                workload: (record.error_type == ErrorType::Kubernetes)
                    .then(|| FailureReason::of_message(&message))
                    .flatten(),
                message,
                first_seen: record.first_seen.0,
                lasting: false,
            };
            errors.restore(key, Held { version, failure, acknowledged: record.acknowledged });
        }
        let settings =
            match (status.full_reconciliation_interval_seconds, status.partial_reconciliation_interval_seconds) {
                (Some(full), Some(partial)) => Settings {
                    full_reconciliation_interval_seconds: full,
                    partial_reconciliation_interval_seconds: partial,
                },
                _ => Settings::default(),
            };
        let parse_map = |map: &BTreeMap<String, String>| {
            map.iter().filter_map(|(k, v)| Some((WorkspaceKey::parse(k)?, v.clone()))).collect()
        };
        Self {
            acknowledged: parse_map(&status.acknowledged),
            terminations: status.terminations.iter().filter_map(|(k, v)| Some((WorkspaceKey::parse(k)?, *v))).collect(),
            errors,
            report_again: HashSet::new(),
            settings: if settings.validate().is_ok() { settings } else { Settings::default() },
            rejected_settings: None,
            stuck_terminations: Vec::new(),
            last_handled_resync: status.last_handled_resync_request.clone(),
            last_full_sync: status.last_full_sync_time.as_ref().map(|t| t.0),
            next_full_sync: status.next_full_sync_time.as_ref().map(|t| t.0),
            last_partial_sync: status.last_partial_sync_time.as_ref().map(|t| t.0),
            outcome: SyncOutcome::starting(),
            revision: 0,
        }
    }

    pub fn acknowledged(&self) -> &HashMap<WorkspaceKey, String> {
        &self.acknowledged
    }

    /// Copy the acknowledgements into fresh allocations, as `WorkspaceIndex::compact` does.
    /// The content is unchanged, so the revision stays.
    pub fn compact(&mut self) {
        self.acknowledged = self.acknowledged.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    }

    /// True when the control plane holds this version of the workspace's Deployment and
    /// need not hear of it again.
    pub fn holds(&self, key: &WorkspaceKey, resource_version: &str) -> bool {
        self.acknowledged.get(key).is_some_and(|rv| rv == resource_version) && !self.report_again.contains(key)
    }

    /// After a recovery: report the workspace again, so that the control plane clears the
    /// error it shows.
    pub fn report_again(&mut self, key: &WorkspaceKey) {
        self.report_again.insert(key.clone());
    }

    pub fn must_report_again(&self, key: &WorkspaceKey) -> bool {
        self.report_again.contains(key)
    }

    /// The control plane has heard of the workspace since its recovery.
    pub fn reported_again(&mut self, key: &WorkspaceKey) {
        self.report_again.remove(key);
    }

    pub fn acknowledged_mut(&mut self) -> &mut HashMap<WorkspaceKey, String> {
        self.revision += 1;
        &mut self.acknowledged
    }

    pub fn terminations(&self) -> &HashMap<WorkspaceKey, TerminationProgress> {
        &self.terminations
    }

    pub fn terminations_mut(&mut self) -> &mut HashMap<WorkspaceKey, TerminationProgress> {
        self.revision += 1;
        &mut self.terminations
    }

    pub fn errors(&self) -> &ErrorTracker {
        &self.errors
    }

    pub fn errors_mut(&mut self) -> &mut ErrorTracker {
        self.revision += 1;
        &mut self.errors
    }

    /// Everything `to_status` renders, cheaply comparable: equal keys render equal statuses.
    pub fn render_key(&self, workspaces: usize) -> RenderKey {
        RenderKey {
            revision: self.revision,
            workspaces,
            settings: self.settings,
            rejected_settings: self.rejected_settings.clone(),
            stuck_terminations: self.stuck_terminations.clone(),
            last_handled_resync: self.last_handled_resync.clone(),
            times: [self.last_full_sync, self.next_full_sync, self.last_partial_sync],
            outcome: self.outcome.clone(),
        }
    }

    /// A full cycle starts from scratch, as a fresh start would, except for unacknowledged errors.
    pub fn reset_for_full(&mut self) {
        self.revision += 1;
        self.acknowledged.clear();
        self.terminations.clear();
        self.report_again.clear();
    }

    /// Keep only the workspaces `known` still answers for.
    pub fn retain(&mut self, known: impl Fn(&WorkspaceKey) -> bool) {
        self.revision += 1;
        self.errors.retain(&known);
        self.acknowledged.retain(|key, _| known(key));
        self.terminations.retain(|key, _| known(key));
        self.report_again.retain(|key| known(key));
    }

    pub fn forget(&mut self, key: &WorkspaceKey) {
        self.revision += 1;
        self.acknowledged.remove(key);
        self.terminations.remove(key);
        self.report_again.remove(key);
        self.errors.forget(key);
    }

    pub fn partial_interval(&self) -> Duration {
        Duration::from_secs(self.settings.partial_reconciliation_interval_seconds)
    }

    pub fn full_interval(&self) -> Duration {
        Duration::from_secs(self.settings.full_reconciliation_interval_seconds)
    }

    /// Which kind of cycle is due now. `first_since_leading` covers start, restart and a
    /// leader change; the annotation value is the one on the object right now.
    pub fn cycle_due(&self, now: Timestamp, first_since_leading: bool, resync_request: Option<&str>) -> UpdateType {
        let full_due = self.next_full_sync.is_none_or(|next| now >= next);
        let resync_requested = resync_request.is_some() && resync_request != self.last_handled_resync.as_deref();
        if first_since_leading || full_due || resync_requested { UpdateType::Full } else { UpdateType::Partial }
    }

    /// Record a successful cycle's timing.
    pub fn cycle_succeeded(&mut self, update_type: UpdateType, now: Timestamp, resync_request: Option<&str>) {
        self.outcome = SyncOutcome::synced();
        match update_type {
            UpdateType::Full => {
                self.last_full_sync = Some(now);
                // Settings are bounded, so this holds; checked all the same, as outside input.
                let interval = SignedDuration::try_from(self.full_interval()).unwrap_or(SignedDuration::MAX);
                self.next_full_sync = Some(now.checked_add(interval).unwrap_or(Timestamp::MAX));
                if resync_request.is_some() {
                    self.last_handled_resync = resync_request.map(str::to_string);
                }
            }
            UpdateType::Partial => {
                let stale = self.last_partial_sync.is_none_or(|last| now.duration_since(last) >= HEARTBEAT);
                if stale {
                    self.last_partial_sync = Some(now);
                }
            }
        }
    }

    /// How long until the next cycle: the partial interval, or sooner if a full one falls due.
    pub fn requeue_after(&self, now: Timestamp) -> Duration {
        let partial = self.partial_interval();
        match self.next_full_sync {
            Some(next) => {
                let until_full = Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO);
                partial.min(until_full)
            }
            None => partial,
        }
    }

    /// Render the ledger as the CRD status. Conditions keep their transition time while their
    /// status holds, so an unchanged ledger renders byte-identical and is not written again.
    pub fn to_status(
        &self,
        workspaces: usize,
        previous_conditions: &[Condition],
        now: Timestamp,
    ) -> WorkspaceSyncStatusStatus {
        let mut messages: Vec<String> = Vec::new();
        let mut message_index: HashMap<&str, u32> = HashMap::new();
        let mut pending_errors = Vec::new();
        let held = self.errors.held();
        let total_held = held.len();
        let kept = self.newest_within_budget(held);
        let truncated = kept.len() < total_held;
        for (key, held) in kept {
            let failure = &held.failure;
            let index = *message_index.entry(failure.message.as_str()).or_insert_with(|| {
                messages.push(failure.message.clone());
                (messages.len() - 1) as u32
            });
            pending_errors.push(PendingErrorRecord {
                workspace: key.to_string(),
                error_type: failure.error_type,
                version: held.version.to_string(),
                first_seen: Time(failure.first_seen),
                message: index,
                acknowledged: held.acknowledged,
            });
        }
        let ready = if self.outcome.ok {
            SyncOutcome { ok: true, reason: "Ready".into(), message: "the agent is syncing".into() }
        } else {
            self.outcome.clone()
        };
        let mut conditions = vec![
            condition(CONDITION_READY, &ready, previous_conditions, now),
            condition(CONDITION_SYNCED, &self.outcome, previous_conditions, now),
        ];
        if truncated {
            let message = format!(
                "the status holds the newest {} of {total_held} errors; the others are still sent to the \
                 control plane, but would not survive a restart",
                pending_errors.len()
            );
            let outcome = SyncOutcome { ok: true, reason: "ErrorBudgetExceeded".into(), message };
            conditions.push(condition(CONDITION_LEDGER_TRUNCATED, &outcome, previous_conditions, now));
        }
        if let Some(reason) = &self.rejected_settings {
            let message = format!("kept the last good settings: the control plane sent {reason}");
            let outcome = SyncOutcome { ok: true, reason: "SettingsOutOfBounds".into(), message };
            conditions.push(condition(CONDITION_SETTINGS_REJECTED, &outcome, previous_conditions, now));
        }
        if let Some(first) = self.stuck_terminations.first() {
            let more = self.stuck_terminations.len().saturating_sub(1);
            let others = if more > 0 { format!(" and {more} more") } else { String::new() };
            let message = format!(
                "workspace {first}{others} still terminating past --termination-timeout; the agent keeps trying \
                 (each workspace's error says what holds its namespace)"
            );
            let outcome = SyncOutcome { ok: true, reason: "NamespaceNotDeleted".into(), message };
            conditions.push(condition(CONDITION_TERMINATION_STUCK, &outcome, previous_conditions, now));
        }
        WorkspaceSyncStatusStatus {
            conditions,
            last_full_sync_time: self.last_full_sync.map(Time),
            next_full_sync_time: self.next_full_sync.map(Time),
            last_partial_sync_time: self.last_partial_sync.map(Time),
            last_handled_resync_request: self.last_handled_resync.clone(),
            full_reconciliation_interval_seconds: Some(self.settings.full_reconciliation_interval_seconds),
            partial_reconciliation_interval_seconds: Some(self.settings.partial_reconciliation_interval_seconds),
            epoch: self.errors.epoch(),
            acknowledged: self.acknowledged.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            terminations: self.terminations.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            pending_error_count: self.errors.pending_count() as u64,
            error_count: total_held as u64,
            pending_errors,
            error_messages: messages,
            workspaces: workspaces as u64,
        }
    }
}

impl Ledger {
    /// The errors the status can hold within its size budget, newest first kept, in
    /// the tracker's stable order. Sizes are estimated from the serialized form.
    fn newest_within_budget<'a>(
        &self,
        mut held: Vec<(&'a WorkspaceKey, &'a Held)>,
    ) -> Vec<(&'a WorkspaceKey, &'a Held)> {
        let key_bytes = |key: &WorkspaceKey| key.namespace().len() + key.name().len() + 8;
        let fixed = 4096
            + self.acknowledged.iter().map(|(key, rv)| key_bytes(key) + rv.len() + 4).sum::<usize>()
            + self.terminations.keys().map(|key| key_bytes(key) + 16).sum::<usize>();
        let mut left = STATUS_BUDGET_BYTES.saturating_sub(fixed);
        held.sort_by(|a, b| b.1.failure.first_seen.cmp(&a.1.failure.first_seen).then_with(|| a.0.cmp(b.0)));
        let mut messages: HashSet<&str> = HashSet::new();
        let mut kept = Vec::new();
        for entry in held {
            let message = entry.1.failure.message.as_str();
            let cost = PENDING_ERROR_RECORD_BYTES
                + key_bytes(entry.0)
                + if messages.contains(message) { 0 } else { message.len() + 4 };
            if cost > left {
                break;
            }
            left -= cost;
            messages.insert(message);
            kept.push(entry);
        }
        kept.sort_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.version.cmp(&b.1.version)));
        kept
    }
}

fn condition(type_: &str, outcome: &SyncOutcome, previous: &[Condition], now: Timestamp) -> Condition {
    let status = if outcome.ok { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: outcome.reason.clone(),
        message: outcome.message.clone(),
        last_transition_time: since,
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests;
