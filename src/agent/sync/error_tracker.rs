//! The versioned error tracker (DESIGN §2, "Error tracker").
//!
//! Every apply gets a version, `<epoch>.<sequence>`, where the epoch is bumped once per agent
//! start and stored in the ledger, so versions order applies across restarts. A result is kept
//! only if the workspace still holds that version: an old failure never marks a healthy
//! workspace, and an old success never clears a newer failure.
//!
//! A failure holds until an apply of its workspace succeeds. Once the control plane has
//! acknowledged it, it is no longer sent as new, but it goes with every report of the
//! workspace, partial or full, and stays in the status, so that no report, restart or full
//! resync makes a failing workspace look healthy.

use super::workspace::WorkspaceKey;
use crate::agent::error::ApplyError;
use crate::protocol::failure_reason::FailureReason;
use crate::protocol::{ErrorDetails, ErrorType};
use jiff::Timestamp;
use std::collections::HashMap;
use std::fmt;

pub use crate::protocol::{MAX_MESSAGE_BYTES, cap_message, cap_message_to};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApplyVersion {
    pub epoch: u64,
    pub sequence: u64,
}

impl fmt::Display for ApplyVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.epoch, self.sequence)
    }
}

impl std::str::FromStr for ApplyVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (epoch, sequence) = s.split_once('.').ok_or_else(|| format!("bad version {s:?}"))?;
        Ok(Self {
            epoch: epoch.parse().map_err(|_| format!("bad epoch in {s:?}"))?,
            sequence: sequence.parse().map_err(|_| format!("bad sequence in {s:?}"))?,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub error_type: ErrorType,
    pub message: String,
    pub first_seen: Timestamp,
    /// Retrying cannot heal it (not kept in the status: a restored error retries normally).
    pub lasting: bool,
    /// Not an apply's: the workload's own failure (`sync::deployment_failure`), which ends when the
    /// workspace's Deployment says so. Read back from the message on a restore.
    pub workload: Option<FailureReason>,
}

impl Failure {
    /// The failure as a report carries it.
    pub fn details(&self) -> ErrorDetails {
        ErrorDetails { error_type: self.error_type, error_message: self.message.clone() }
    }
}

/// A failure that holds, under the version that produced it, and whether the control plane
/// has acknowledged it. An acknowledged failure is no longer sent as a new error, but goes
/// with every report of its workspace while it holds, so that no report clears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub version: ApplyVersion,
    pub failure: Failure,
    pub acknowledged: bool,
}

impl Held {
    fn new(version: ApplyVersion, failure: Failure) -> Self {
        Self { version, failure, acknowledged: false }
    }
}

/// One workspace's applies: the latest finished apply's failure, while no later apply has
/// succeeded, and the apply running now, whose result settles it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Applies {
    failed: Option<Held>,
    in_flight: Option<ApplyVersion>,
}

/// What recording a result did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The workspace has moved on to a newer version; the result was dropped.
    Stale,
    /// A failure is now pending.
    Failed,
    /// Success, and nothing was pending.
    Healthy,
    /// Success after a failure the control plane may still show: it should hear of the
    /// workspace again.
    Recovered,
    /// A retry failed as the attempt before it did: the pending error stands as it was.
    StillFailing,
}

/// What the loop does after recording a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowUp {
    Nothing,
    /// Write the ledger at once (a kill -9 right after loses nothing), and emit a Warning Event.
    PersistAndWarn,
    /// The control plane may still show the old error: write the ledger at once (a restart
    /// must not bring the failure back), and report the workspace again, as one it has not
    /// seen at this version (a report without error_details clears the error).
    PersistAndReportAgain,
}

impl Recorded {
    /// The `wsync_applies_total` result label.
    pub fn metric_label(self) -> &'static str {
        match self {
            Recorded::Failed => "failure",
            Recorded::Stale => "stale",
            Recorded::Healthy | Recorded::Recovered => "success",
            Recorded::StillFailing => "retry_failure",
        }
    }

    pub fn follow_up(self) -> FollowUp {
        match self {
            Recorded::Failed => FollowUp::PersistAndWarn,
            Recorded::Recovered => FollowUp::PersistAndReportAgain,
            Recorded::Healthy | Recorded::Stale | Recorded::StillFailing => FollowUp::Nothing,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ErrorTracker {
    entries: HashMap<WorkspaceKey, Applies>,
    /// Workload failures (`sync::deployment_failure`), tracked beside the applies': an apply's success
    /// does not end one, only the workload's own state does. Reported once per reason.
    workloads: HashMap<WorkspaceKey, Held>,
    epoch: u64,
    next_sequence: u64,
}

impl ErrorTracker {
    pub fn new(epoch: u64) -> Self {
        Self { entries: HashMap::new(), workloads: HashMap::new(), epoch, next_sequence: 0 }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    fn next_version(&mut self) -> ApplyVersion {
        self.next_sequence = self.next_sequence.saturating_add(1);
        ApplyVersion { epoch: self.epoch, sequence: self.next_sequence }
    }

    /// Start an apply: the workspace is in flight under a new version until its result
    /// arrives. A failure that holds still holds meanwhile: only a success ends it.
    pub fn begin(&mut self, key: &WorkspaceKey) -> ApplyVersion {
        let version = self.next_version();
        self.entries.entry(key.clone()).or_default().in_flight = Some(version);
        version
    }

    /// Store an apply's result if the workspace still holds its version.
    pub fn record(
        &mut self,
        key: &WorkspaceKey,
        version: ApplyVersion,
        result: Result<(), ApplyError>,
        now: Timestamp,
    ) -> Recorded {
        let Some(applies) = self.entries.get_mut(key).filter(|a| a.in_flight == Some(version)) else {
            return Recorded::Stale;
        };
        match result {
            Ok(()) => self.succeeded(key),
            Err(error) => {
                // The same failure again is the same episode: it keeps its first sighting.
                let failure = failure_of(&error, now);
                let first_seen = match &applies.failed {
                    Some(held) if held.failure.message == failure.message => held.failure.first_seen,
                    _ => now,
                };
                *applies =
                    Applies { failed: Some(Held::new(version, Failure { first_seen, ..failure })), in_flight: None };
                Recorded::Failed
            }
        }
    }

    fn succeeded(&mut self, key: &WorkspaceKey) -> Recorded {
        let had_failed = self.entries.remove(key).is_some_and(|applies| applies.failed.is_some());
        if let Some(capacity) = crate::allocator::drained_capacity(self.entries.len(), self.entries.capacity()) {
            self.entries.shrink_to(capacity);
        }
        if had_failed { Recorded::Recovered } else { Recorded::Healthy }
    }

    /// Record a failure that no apply produced (namespace or termination trouble), under a new
    /// version that supersedes anything in flight.
    pub fn fail_now(&mut self, key: &WorkspaceKey, error: &ApplyError, now: Timestamp) {
        let version = self.next_version();
        let failed = Some(Held::new(version, failure_of(error, now)));
        self.entries.insert(key.clone(), Applies { failed, in_flight: None });
    }

    /// What the workload's state says now: a failure of `reason`, or none. Pending under a
    /// new version when its reason is new; ended (the control plane must hear of the
    /// workspace again) when none is seen.
    pub fn observe_workload(
        &mut self,
        key: &WorkspaceKey,
        seen: Option<(FailureReason, &str)>,
        now: Timestamp,
    ) -> Recorded {
        let current = self.workloads.get(key).and_then(|held| held.failure.workload);
        match (current, seen) {
            (Some(current), Some((reason, _))) if current == reason => Recorded::StillFailing,
            (_, Some((reason, message))) => {
                let version = self.next_version();
                let failure = Failure {
                    error_type: ErrorType::Kubernetes,
                    message: cap_message(message),
                    first_seen: now,
                    lasting: false,
                    workload: Some(reason),
                };
                self.workloads.insert(key.clone(), Held::new(version, failure));
                Recorded::Failed
            }
            (Some(_), None) => {
                self.workloads.remove(key);
                Recorded::Recovered
            }
            (None, None) => Recorded::Healthy,
        }
    }

    /// The failure that holds for a workspace, acknowledged or not: an apply's before the
    /// workload's. Every report of the workspace carries it, whatever the cycle, so that a
    /// report never clears a failure that still holds (DESIGN §2, "Error tracker").
    pub fn holding(&self, key: &WorkspaceKey) -> Option<&Held> {
        self.apply_failure(key).or_else(|| self.workloads.get(key))
    }

    /// The latest finished apply's failure, while no later apply has succeeded.
    fn apply_failure(&self, key: &WorkspaceKey) -> Option<&Held> {
        self.entries.get(key).and_then(|applies| applies.failed.as_ref())
    }

    /// Every failure that holds, in a stable order: what the status keeps, so that a restart
    /// or a full resync still knows it.
    pub fn held(&self) -> Vec<(&WorkspaceKey, &Held)> {
        let applies = self.entries.iter().filter_map(|(key, applies)| Some((key, applies.failed.as_ref()?)));
        let mut held: Vec<_> = applies.chain(&self.workloads).collect();
        held.sort_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.version.cmp(&b.1.version)));
        held
    }

    /// Failures the control plane has not acknowledged, one per workspace (the one that
    /// holds), in a stable order: what a cycle sends as new `error_details`.
    /// Only failures are visited: the applies merely in flight (10,000 in a full resync) are not.
    pub fn pending(&self) -> Vec<(&WorkspaceKey, &Held)> {
        let applies = self.entries.iter().filter_map(|(key, applies)| Some((key, applies.failed.as_ref()?)));
        let workloads = self.workloads.iter().filter(|(key, _)| self.apply_failure(key).is_none());
        let mut pending: Vec<_> = applies.chain(workloads).filter(|(_, held)| !held.acknowledged).collect();
        pending.sort_by(|a, b| a.0.cmp(b.0));
        pending
    }

    pub fn pending_count(&self) -> usize {
        self.pending().len()
    }

    /// The control plane has seen the failure sent under `version`: it is no longer sent as
    /// new, unless a newer failure has replaced it since. It still holds.
    pub fn acknowledge(&mut self, key: &WorkspaceKey, version: ApplyVersion) -> bool {
        let apply = self.entries.get_mut(key).and_then(|applies| applies.failed.as_mut());
        let held = match apply {
            Some(held) if held.version == version => Some(held),
            _ => self.workloads.get_mut(key).filter(|held| held.version == version),
        };
        held.map(|held| held.acknowledged = true).is_some()
    }

    /// The failure a retry of the workspace's last apply would settle, unless a newer apply
    /// has begun since.
    pub fn retryable(&self, key: &WorkspaceKey) -> Option<ApplyVersion> {
        self.apply_failure(key).filter(|_| !self.in_flight(key)).map(|held| held.version)
    }

    /// Store a retry's result, if the failure it retried (`retryable`) still stands. A retry
    /// that fails again with the same message leaves the failure as it was, so that retries
    /// neither rewrite the status nor re-report the error each time.
    pub fn record_retry(
        &mut self,
        key: &WorkspaceKey,
        retried: ApplyVersion,
        result: Result<(), ApplyError>,
        now: Timestamp,
    ) -> Recorded {
        let Some(held) = self.apply_failure(key).filter(|held| held.version == retried && !self.in_flight(key)) else {
            return Recorded::Stale;
        };
        match result {
            Ok(()) => self.succeeded(key),
            Err(error) if cap_message(&error.message) == held.failure.message => Recorded::StillFailing,
            Err(error) => {
                let version = self.next_version();
                let failed = Some(Held::new(version, failure_of(&error, now)));
                self.entries.insert(key.clone(), Applies { failed, in_flight: None });
                Recorded::Failed
            }
        }
    }

    /// Whether the failure that holds is one retrying cannot heal (`ApplyError::lasting`).
    pub fn is_lasting(&self, key: &WorkspaceKey) -> bool {
        self.apply_failure(key).is_some_and(|held| held.failure.lasting)
    }

    pub fn in_flight(&self, key: &WorkspaceKey) -> bool {
        self.entries.get(key).is_some_and(|applies| applies.in_flight.is_some())
    }

    pub fn forget(&mut self, key: &WorkspaceKey) {
        self.entries.remove(key);
        self.workloads.remove(key);
    }

    /// Keep only the workspaces `known` still answers for.
    pub fn retain(&mut self, mut known: impl FnMut(&WorkspaceKey) -> bool) {
        self.entries.retain(|key, _| known(key));
        self.workloads.retain(|key, _| known(key));
    }

    /// Load a failure from the ledger. Restored versions keep their old epoch, so any new
    /// apply (under the new epoch) supersedes them.
    /// Of two records for one workspace (a hand-edited status), the newer version wins.
    pub fn restore(&mut self, key: WorkspaceKey, held: Held) {
        if held.failure.workload.is_some() {
            if self.workloads.get(&key).is_none_or(|current| current.version < held.version) {
                self.workloads.insert(key, held);
            }
        } else {
            if self.apply_failure(&key).is_none_or(|current| current.version < held.version) {
                self.entries.insert(key, Applies { failed: Some(held), in_flight: None });
            }
        }
    }

    #[cfg(test)]
    fn version_of(&self, key: &WorkspaceKey) -> Option<ApplyVersion> {
        let applies = self.entries.get(key)?;
        applies.in_flight.or(applies.failed.as_ref().map(|held| held.version))
    }
}

fn failure_of(error: &ApplyError, now: Timestamp) -> Failure {
    Failure {
        error_type: error.error_type,
        message: cap_message(&error.message),
        first_seen: now,
        lasting: error.lasting,
        workload: None,
    }
}

#[cfg(test)]
mod tests;
