//! The versioned error tracker (DESIGN §2, "Error tracker").
//!
//! Every apply gets a version, `<epoch>.<sequence>`, where the epoch is bumped once per agent
//! start and stored in the ledger, so versions order applies across restarts. A result is kept
//! only if the workspace still holds that version: an old failure never marks a healthy
//! workspace, and an old success never clears a newer failure.

use super::workspace::WorkspaceKey;
use crate::agent::error::ApplyError;
use crate::protocol::ErrorType;
use crate::protocol::workload::FailureReason;
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
    /// Not an apply's: the workload's own failure (`sync::workload`), which ends when the
    /// workspace's Deployment says so. Read back from the message on a restore.
    pub workload: Option<FailureReason>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tracked {
    /// An apply is running. It hides an older failure, which its result will settle.
    InFlight {
        version: ApplyVersion,
        after_failure: bool,
    },
    Failed {
        version: ApplyVersion,
        failure: Failure,
    },
    /// The control plane acknowledged the failure and shows it until the workspace is
    /// reported without one: the next success must be reported. Kept in memory only; a
    /// restart's full cycle reports every workspace anyway.
    Shown,
}

/// A workload failure (`sync::workload`), tracked beside the apply's: an apply's success does
/// not end it, only the workload's own state does. Reported once per reason.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WorkloadEntry {
    version: ApplyVersion,
    failure: Failure,
    /// The control plane acknowledged it.
    shown: bool,
}

#[cfg(test)]
impl Tracked {
    fn version(&self) -> Option<ApplyVersion> {
        match self {
            Tracked::InFlight { version, .. } | Tracked::Failed { version, .. } => Some(*version),
            Tracked::Shown => None,
        }
    }
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
    /// The control plane may still show the old error: report the workspace again, as one it
    /// has not seen at this version (a report without error_details clears the error).
    ReportAgain,
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
            Recorded::Recovered => FollowUp::ReportAgain,
            Recorded::Healthy | Recorded::Stale | Recorded::StillFailing => FollowUp::Nothing,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ErrorTracker {
    entries: HashMap<WorkspaceKey, Tracked>,
    workloads: HashMap<WorkspaceKey, WorkloadEntry>,
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
        self.next_sequence += 1;
        ApplyVersion { epoch: self.epoch, sequence: self.next_sequence }
    }

    /// Start an apply: the workspace is in flight under a new version until its result arrives.
    pub fn begin(&mut self, key: &WorkspaceKey) -> ApplyVersion {
        let version = self.next_version();
        let after_failure = match self.entries.get(key) {
            Some(Tracked::Failed { .. } | Tracked::Shown) => true,
            Some(Tracked::InFlight { after_failure, .. }) => *after_failure,
            None => false,
        };
        self.entries.insert(key.clone(), Tracked::InFlight { version, after_failure });
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
        let Some(Tracked::InFlight { version: current, after_failure }) = self.entries.get(key) else {
            return Recorded::Stale;
        };
        if *current != version {
            return Recorded::Stale;
        }
        let after_failure = *after_failure;
        match result {
            Ok(()) => {
                self.entries.remove(key);
                if let Some(capacity) = crate::allocator::drained_capacity(self.entries.len(), self.entries.capacity())
                {
                    self.entries.shrink_to(capacity);
                }
                if after_failure { Recorded::Recovered } else { Recorded::Healthy }
            }
            Err(error) => {
                let failure = Failure {
                    error_type: error.error_type,
                    message: cap_message(&error.message),
                    first_seen: now,
                    lasting: error.lasting,
                    workload: None,
                };
                self.entries.insert(key.clone(), Tracked::Failed { version, failure });
                Recorded::Failed
            }
        }
    }

    /// Record a failure that no apply produced (namespace or termination trouble), under a new
    /// version that supersedes anything in flight.
    pub fn fail_now(&mut self, key: &WorkspaceKey, error: &ApplyError, now: Timestamp) {
        let version = self.next_version();
        let failure = Failure {
            error_type: error.error_type,
            message: cap_message(&error.message),
            first_seen: now,
            lasting: error.lasting,
            workload: None,
        };
        self.entries.insert(key.clone(), Tracked::Failed { version, failure });
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
        let current = self.workloads.get(key).and_then(|entry| entry.failure.workload);
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
                self.workloads.insert(key.clone(), WorkloadEntry { version, failure, shown: false });
                Recorded::Failed
            }
            (Some(_), None) => {
                self.workloads.remove(key);
                Recorded::Recovered
            }
            (None, None) => Recorded::Healthy,
        }
    }

    /// The workload failure that holds for a workspace, acknowledged or not: whenever the
    /// workspace is reported without an apply's failure, this goes as its error, so that a
    /// report never clears a failure that still holds.
    pub fn workload_failure(&self, key: &WorkspaceKey) -> Option<&Failure> {
        self.workloads.get(key).map(|entry| &entry.failure)
    }

    /// Pending failures, in a stable order: what a cycle sends as `error_details`. An apply's
    /// failure takes the one slot before the workload's.
    pub fn pending(&self) -> Vec<(&WorkspaceKey, ApplyVersion, &Failure)> {
        let applies = self.entries.iter().filter_map(|(key, tracked)| match tracked {
            Tracked::Failed { version, failure } => Some((key, *version, failure)),
            Tracked::InFlight { .. } | Tracked::Shown => None,
        });
        let workloads = self
            .workloads
            .iter()
            .filter(|(key, entry)| !entry.shown && !matches!(self.entries.get(*key), Some(Tracked::Failed { .. })))
            .map(|(key, entry)| (key, entry.version, &entry.failure));
        let mut pending: Vec<_> = applies.chain(workloads).collect();
        pending.sort_by(|a, b| a.0.cmp(b.0));
        pending
    }

    pub fn pending_count(&self) -> usize {
        self.pending().len()
    }

    /// The control plane has seen the failure sent under `version`: it is no longer pending,
    /// unless a newer apply has replaced it since.
    pub fn acknowledge(&mut self, key: &WorkspaceKey, version: ApplyVersion) -> bool {
        match self.entries.get(key) {
            Some(Tracked::Failed { version: current, .. }) if *current == version => {
                self.entries.insert(key.clone(), Tracked::Shown);
                true
            }
            _ => match self.workloads.get_mut(key) {
                Some(entry) if entry.version == version => {
                    entry.shown = true;
                    true
                }
                _ => false,
            },
        }
    }

    /// The failure a retry of the workspace's last apply would clear: `Some(Some(version))`
    /// while it is pending, `Some(None)` once the control plane has been shown it, None when
    /// nothing failed or a newer apply has begun.
    pub fn retryable(&self, key: &WorkspaceKey) -> Option<Option<ApplyVersion>> {
        match self.entries.get(key) {
            Some(Tracked::Failed { version, .. }) => Some(Some(*version)),
            Some(Tracked::Shown) => Some(None),
            Some(Tracked::InFlight { .. }) | None => None,
        }
    }

    /// Store a retry's result, if the failure it retried (`retryable`) still stands. A retry
    /// that fails again with the same message leaves the pending error as it was, so that
    /// retries neither rewrite the status nor re-report the error each time.
    pub fn record_retry(
        &mut self,
        key: &WorkspaceKey,
        retried: Option<ApplyVersion>,
        result: Result<(), ApplyError>,
        now: Timestamp,
    ) -> Recorded {
        let previous = match (self.entries.get(key), retried) {
            (Some(Tracked::Failed { version, failure }), Some(retried)) if *version == retried => {
                Some(failure.message.clone())
            }
            (Some(Tracked::Shown), None) => None,
            _ => return Recorded::Stale,
        };
        match result {
            Ok(()) => {
                self.entries.remove(key);
                Recorded::Recovered
            }
            Err(error) => {
                let message = cap_message(&error.message);
                if previous.is_none_or(|p| p == message) {
                    return Recorded::StillFailing;
                }
                let version = self.next_version();
                let failure = Failure {
                    error_type: error.error_type,
                    message,
                    first_seen: now,
                    lasting: error.lasting,
                    workload: None,
                };
                self.entries.insert(key.clone(), Tracked::Failed { version, failure });
                Recorded::Failed
            }
        }
    }

    /// Whether the pending failure is one retrying cannot heal (`ApplyError::lasting`).
    pub fn pending_is_lasting(&self, key: &WorkspaceKey) -> bool {
        matches!(self.entries.get(key), Some(Tracked::Failed { failure, .. }) if failure.lasting)
    }

    pub fn in_flight(&self, key: &WorkspaceKey) -> bool {
        matches!(self.entries.get(key), Some(Tracked::InFlight { .. }))
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
    pub fn restore(&mut self, key: WorkspaceKey, version: ApplyVersion, failure: Failure) {
        if failure.workload.is_some() {
            self.workloads.insert(key, WorkloadEntry { version, failure, shown: false });
        } else {
            self.entries.insert(key, Tracked::Failed { version, failure });
        }
    }

    #[cfg(test)]
    fn version_of(&self, key: &WorkspaceKey) -> Option<ApplyVersion> {
        self.entries.get(key).and_then(Tracked::version)
    }
}

#[cfg(test)]
mod tests;
