//! The versioned error tracker (DESIGN §2, "Error tracker").
//!
//! Every apply gets a version, `<epoch>.<sequence>`, where the epoch is bumped once per agent
//! start and stored in the ledger, so versions order applies across restarts. A result is kept
//! only if the workspace still holds that version: an old failure never marks a healthy
//! workspace, and an old success never clears a newer failure.

use super::workspace::WorkspaceKey;
use crate::agent::error::ApplyError;
use crate::protocol::ErrorType;
use jiff::Timestamp;
use std::collections::HashMap;
use std::fmt;

/// Messages are capped so that one chatty error cannot crowd the ledger out of its size budget.
pub const MAX_MESSAGE_BYTES: usize = 1024;

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
        }
    }

    pub fn follow_up(self) -> FollowUp {
        match self {
            Recorded::Failed => FollowUp::PersistAndWarn,
            Recorded::Recovered => FollowUp::ReportAgain,
            Recorded::Healthy | Recorded::Stale => FollowUp::Nothing,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ErrorTracker {
    entries: HashMap<WorkspaceKey, Tracked>,
    epoch: u64,
    next_sequence: u64,
}

/// Cut a message to the cap on a character boundary, saying that it was cut.
pub fn cap_message(message: &str) -> String {
    cap_message_to(message, MAX_MESSAGE_BYTES)
}

pub fn cap_message_to(message: &str, max_bytes: usize) -> String {
    if message.len() <= max_bytes {
        return message.to_string();
    }
    const MARK: &str = " …(truncated)";
    let mut end = max_bytes.saturating_sub(MARK.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &message[..end])
}

impl ErrorTracker {
    pub fn new(epoch: u64) -> Self {
        Self { entries: HashMap::new(), epoch, next_sequence: 0 }
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
                let failure =
                    Failure { error_type: error.error_type, message: cap_message(&error.message), first_seen: now };
                self.entries.insert(key.clone(), Tracked::Failed { version, failure });
                Recorded::Failed
            }
        }
    }

    /// Record a failure that no apply produced (namespace or termination trouble), under a new
    /// version that supersedes anything in flight.
    pub fn fail_now(&mut self, key: &WorkspaceKey, error: &ApplyError, now: Timestamp) {
        let version = self.next_version();
        let failure = Failure { error_type: error.error_type, message: cap_message(&error.message), first_seen: now };
        self.entries.insert(key.clone(), Tracked::Failed { version, failure });
    }

    /// Pending failures, in a stable order: what a cycle sends as `error_details`.
    pub fn pending(&self) -> Vec<(&WorkspaceKey, ApplyVersion, &Failure)> {
        let mut pending: Vec<_> = self
            .entries
            .iter()
            .filter_map(|(key, tracked)| match tracked {
                Tracked::Failed { version, failure } => Some((key, *version, failure)),
                Tracked::InFlight { .. } | Tracked::Shown => None,
            })
            .collect();
        pending.sort_by(|a, b| a.0.cmp(b.0));
        pending
    }

    pub fn pending_count(&self) -> usize {
        self.entries.values().filter(|t| matches!(t, Tracked::Failed { .. })).count()
    }

    /// The control plane has seen the failure sent under `version`: it is no longer pending,
    /// unless a newer apply has replaced it since.
    pub fn acknowledge(&mut self, key: &WorkspaceKey, version: ApplyVersion) -> bool {
        match self.entries.get(key) {
            Some(Tracked::Failed { version: current, .. }) if *current == version => {
                self.entries.insert(key.clone(), Tracked::Shown);
                true
            }
            _ => false,
        }
    }

    pub fn in_flight(&self, key: &WorkspaceKey) -> bool {
        matches!(self.entries.get(key), Some(Tracked::InFlight { .. }))
    }

    pub fn forget(&mut self, key: &WorkspaceKey) {
        self.entries.remove(key);
    }

    /// Keep only the workspaces `known` still answers for.
    pub fn retain(&mut self, mut known: impl FnMut(&WorkspaceKey) -> bool) {
        self.entries.retain(|key, _| known(key));
    }

    /// Load a failure from the ledger. Restored versions keep their old epoch, so any new
    /// apply (under the new epoch) supersedes them.
    pub fn restore(&mut self, key: WorkspaceKey, version: ApplyVersion, failure: Failure) {
        self.entries.insert(key, Tracked::Failed { version, failure });
    }

    #[cfg(test)]
    fn version_of(&self, key: &WorkspaceKey) -> Option<ApplyVersion> {
        self.entries.get(key).and_then(Tracked::version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> WorkspaceKey {
        WorkspaceKey::new("ns", "ws")
    }
    fn fail(msg: &str) -> Result<(), ApplyError> {
        Err(ApplyError::applier(msg))
    }
    fn now() -> Timestamp {
        Timestamp::UNIX_EPOCH
    }

    #[test]
    fn in_flight_applies_are_not_reported() {
        let mut tracker = ErrorTracker::new(1);
        tracker.begin(&key());
        assert!(tracker.pending().is_empty());
        assert!(tracker.in_flight(&key()));
    }

    #[test]
    fn a_failure_is_pending_until_acknowledged_under_its_version() {
        let mut tracker = ErrorTracker::new(1);
        let v1 = tracker.begin(&key());
        assert_eq!(tracker.record(&key(), v1, fail("boom"), now()), Recorded::Failed);
        let pending = tracker.pending();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].2.message, "boom");
        assert!(!tracker.acknowledge(&key(), ApplyVersion { epoch: 1, sequence: 99 }));
        assert!(tracker.acknowledge(&key(), v1));
        assert!(tracker.pending().is_empty());
    }

    #[test]
    fn slow_old_failure_never_marks_a_healthy_workspace() {
        let mut tracker = ErrorTracker::new(1);
        let v1 = tracker.begin(&key());
        let v2 = tracker.begin(&key());
        assert_eq!(tracker.record(&key(), v2, Ok(()), now()), Recorded::Healthy);
        assert_eq!(tracker.record(&key(), v1, fail("old"), now()), Recorded::Stale);
        assert!(tracker.pending().is_empty());
    }

    #[test]
    fn old_success_never_clears_a_newer_failure() {
        let mut tracker = ErrorTracker::new(1);
        let v1 = tracker.begin(&key());
        let v2 = tracker.begin(&key());
        assert_eq!(tracker.record(&key(), v2, fail("new"), now()), Recorded::Failed);
        assert_eq!(tracker.record(&key(), v1, Ok(()), now()), Recorded::Stale);
        assert_eq!(tracker.pending()[0].2.message, "new");
    }

    #[test]
    fn acknowledging_an_old_version_keeps_a_newer_failure() {
        let mut tracker = ErrorTracker::new(1);
        let v1 = tracker.begin(&key());
        tracker.record(&key(), v1, fail("first"), now());
        let v2 = tracker.begin(&key());
        tracker.record(&key(), v2, fail("second"), now());
        assert!(!tracker.acknowledge(&key(), v1));
        assert_eq!(tracker.pending()[0].2.message, "second");
    }

    #[test]
    fn success_after_failure_is_a_recovery() {
        let mut tracker = ErrorTracker::new(1);
        let v1 = tracker.begin(&key());
        tracker.record(&key(), v1, fail("boom"), now());
        let v2 = tracker.begin(&key());
        assert!(tracker.pending().is_empty(), "the retry hides the old failure while in flight");
        assert_eq!(tracker.record(&key(), v2, Ok(()), now()), Recorded::Recovered);
    }

    #[test]
    fn success_after_an_acknowledged_failure_is_a_recovery_once() {
        let mut tracker = ErrorTracker::new(1);
        let v1 = tracker.begin(&key());
        tracker.record(&key(), v1, fail("boom"), now());
        assert!(tracker.acknowledge(&key(), v1));
        assert_eq!(tracker.pending_count(), 0, "the control plane shows it; nothing is pending");
        let v2 = tracker.begin(&key());
        assert_eq!(tracker.record(&key(), v2, Ok(()), now()), Recorded::Recovered, "the control plane must hear");
        let v3 = tracker.begin(&key());
        assert_eq!(tracker.record(&key(), v3, Ok(()), now()), Recorded::Healthy);
    }

    #[test]
    fn versions_order_across_restarts() {
        let mut before = ErrorTracker::new(1);
        let old = before.begin(&key());
        let mut after = ErrorTracker::new(2);
        after.restore(key(), old, Failure { error_type: ErrorType::Applier, message: "x".into(), first_seen: now() });
        let new = after.begin(&key());
        assert!(new > old);
        assert_eq!(after.record(&key(), old, Ok(()), now()), Recorded::Stale);
        assert_eq!(after.version_of(&key()), Some(new));
    }

    #[test]
    fn fail_now_supersedes_an_apply_in_flight() {
        let mut tracker = ErrorTracker::new(1);
        let v1 = tracker.begin(&key());
        tracker.fail_now(&key(), &ApplyError::kubernetes("namespace refused"), now());
        assert_eq!(tracker.record(&key(), v1, Ok(()), now()), Recorded::Stale);
        assert_eq!(tracker.pending()[0].2.error_type, ErrorType::Kubernetes);
    }

    #[test]
    fn messages_are_capped_on_a_char_boundary() {
        let long = "é".repeat(MAX_MESSAGE_BYTES);
        let capped = cap_message(&long);
        assert!(capped.len() <= MAX_MESSAGE_BYTES);
        assert!(capped.ends_with("(truncated)"));
        assert_eq!(cap_message("short"), "short");
    }

    #[test]
    fn version_text_round_trips() {
        let v = ApplyVersion { epoch: 3, sequence: 17 };
        assert_eq!(v.to_string().parse::<ApplyVersion>(), Ok(v));
        assert!("3".parse::<ApplyVersion>().is_err());
    }
}
