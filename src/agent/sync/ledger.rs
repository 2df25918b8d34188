//! The agent's sync state, and its durable form in `WorkspaceSyncStatus.status` (DESIGN §2).
//!
//! Pure data: loading it from the CRD status; `status` renders it back.

use super::error_tracker::{ApplyVersion, ErrorTracker, Failure, Held};
pub use super::outcome::SyncOutcome;
use super::workspace::WorkspaceKey;
use crate::crd::WorkspaceSyncStatusStatus;
use crate::protocol::failure_reason::FailureReason;
use crate::protocol::{ErrorType, Settings, TerminationProgress, UpdateType};
use jiff::{SignedDuration, Timestamp};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// `lastPartialSyncTime` is a heartbeat: refreshed at most this often, so an idle agent
/// does not write its status every cycle.
pub const HEARTBEAT: SignedDuration = SignedDuration::from_secs(60);

/// What the status shows besides the per-workspace maps.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusFields {
    pub settings: Settings,
    /// Why the control plane's last settings were refused, while the last good ones hold.
    pub rejected_settings: Option<String>,
    /// Terminations past `--termination-timeout`, as `namespace/name`.
    pub stuck_terminations: Vec<String>,
    /// What the last answer held past the agent's bounds, which waits for a later answer.
    pub answer_limited: Option<String>,
    pub last_handled_resync: Option<String>,
    pub last_full_sync: Option<Timestamp>,
    pub next_full_sync: Option<Timestamp>,
    pub last_partial_sync: Option<Timestamp>,
    pub outcome: SyncOutcome,
}

/// The largest epoch the status can hold: the apiserver keeps its integers as int64.
pub const MAX_EPOCH: u64 = i64::MAX.unsigned_abs();

/// The most terminations the agent tracks at once: each is a GET every cycle and an entry in
/// the status (about 80 bytes; 100,000 would pass the apiserver's 3 MiB request limit). More
/// wait: the control plane sends them again, and they start as others finish.
pub const MAX_TRACKED_TERMINATIONS: usize = 1_000;

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
    /// What the status shows besides the per-workspace maps, in one struct: the change check
    /// (`render_key`) compares it whole, so no field can be left out of it.
    pub fields: StatusFields,
}

impl Ledger {
    /// Load the ledger a previous run left behind, under a new epoch. The failures that held
    /// come back, acknowledged or not; in-flight applies were never persisted, and the first
    /// full cycle re-applies them. A record the status cannot back (an unreadable workspace or
    /// version, a message index that points nowhere) is skipped: an empty error would otherwise
    /// hold until an apply succeeded.
    pub fn restore(status: Option<&WorkspaceSyncStatusStatus>) -> Self {
        let default = WorkspaceSyncStatusStatus::default();
        let status = status.unwrap_or(&default);
        let (epoch, repaired) = match status.epoch.checked_add(1).filter(|epoch| *epoch <= MAX_EPOCH) {
            Some(epoch) => (epoch, false),
            None => {
                tracing::warn!(
                    epoch = status.epoch,
                    "the status's epoch is at the apiserver's int64 limit (edited by hand?); starting again at 1, \
                     with every restored error older than it"
                );
                (1, true)
            }
        };
        let mut errors = ErrorTracker::new(epoch);
        for record in &status.pending_errors {
            let (Some(key), Ok(mut version)) =
                (WorkspaceKey::parse(&record.workspace), record.version.parse::<ApplyVersion>())
            else {
                tracing::warn!(workspace = %record.workspace, "skipping an unreadable pending error in the ledger");
                continue;
            };
            let Some(message) =
                usize::try_from(record.message).ok().and_then(|i| status.error_messages.get(i)).cloned()
            else {
                tracing::warn!(workspace = %record.workspace, "skipping a pending error whose message is missing from the ledger");
                continue;
            };
            let failure = Failure {
                error_type: record.error_type,
                workload: (record.error_type == ErrorType::Kubernetes)
                    .then(|| FailureReason::of_message(&message))
                    .flatten(),
                message,
                first_seen: record.first_seen.0,
                lasting: false,
            };
            if repaired {
                version.epoch = 0;
            }
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
            // A hand-edited status past the bound keeps the bound: the rest come again in answers.
            terminations: status
                .terminations
                .iter()
                .filter_map(|(k, v)| Some((WorkspaceKey::parse(k)?, *v)))
                .take(MAX_TRACKED_TERMINATIONS)
                .collect(),
            errors,
            report_again: HashSet::new(),
            fields: StatusFields {
                settings: if settings.validate().is_ok() { settings } else { Settings::default() },
                rejected_settings: None,
                stuck_terminations: Vec::new(),
                answer_limited: None,
                last_handled_resync: status.last_handled_resync_request.clone(),
                last_full_sync: status.last_full_sync_time.as_ref().map(|t| t.0),
                next_full_sync: status.next_full_sync_time.as_ref().map(|t| t.0),
                last_partial_sync: status.last_partial_sync_time.as_ref().map(|t| t.0),
                outcome: SyncOutcome::starting(),
            },
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

    /// Bumped on every mutable access to the per-workspace maps.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// A full cycle starts from scratch, as a fresh start would, except for the errors that hold.
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
        Duration::from_secs(self.fields.settings.partial_reconciliation_interval_seconds)
    }

    pub fn full_interval(&self) -> Duration {
        Duration::from_secs(self.fields.settings.full_reconciliation_interval_seconds)
    }

    /// Which kind of cycle is due now. `first_since_leading` covers start, restart and a
    /// leader change; the annotation value is the one on the object right now.
    pub fn cycle_due(&self, now: Timestamp, first_since_leading: bool, resync_request: Option<&str>) -> UpdateType {
        let full_due = self.fields.next_full_sync.is_none_or(|next| now >= next);
        let resync_requested = resync_request.is_some() && resync_request != self.fields.last_handled_resync.as_deref();
        if first_since_leading || full_due || resync_requested { UpdateType::Full } else { UpdateType::Partial }
    }

    /// Record a successful cycle's timing.
    pub fn cycle_succeeded(&mut self, update_type: UpdateType, now: Timestamp, resync_request: Option<&str>) {
        self.fields.outcome = SyncOutcome::synced();
        match update_type {
            UpdateType::Full => {
                self.fields.last_full_sync = Some(now);
                // Settings are bounded, so this holds; checked all the same, as outside input.
                let interval = SignedDuration::try_from(self.full_interval()).unwrap_or(SignedDuration::MAX);
                self.fields.next_full_sync = Some(now.checked_add(interval).unwrap_or(Timestamp::MAX));
                if resync_request.is_some() {
                    self.fields.last_handled_resync = resync_request.map(str::to_string);
                }
            }
            UpdateType::Partial => {
                let stale = self.fields.last_partial_sync.is_none_or(|last| now.duration_since(last) >= HEARTBEAT);
                if stale {
                    self.fields.last_partial_sync = Some(now);
                }
            }
        }
    }

    /// How long until the next cycle: the partial interval, or sooner if a full one falls due.
    pub fn requeue_after(&self, now: Timestamp) -> Duration {
        let partial = self.partial_interval();
        match self.fields.next_full_sync {
            Some(next) => {
                let until_full = Duration::try_from(next.duration_since(now)).unwrap_or(Duration::ZERO);
                partial.min(until_full)
            }
            None => partial,
        }
    }
}

#[cfg(test)]
mod tests;
