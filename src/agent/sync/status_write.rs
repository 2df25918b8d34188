//! Whether the WorkspaceSyncStatus can be written, and when to say it cannot. A status write
//! the apiserver keeps refusing (too large, invalid, forbidden) must never be a silent stall:
//! the agent says so in its log and in an Event when it starts failing, when the reason
//! changes, and every [`SAY_AGAIN_AFTER`] while it lasts; a metric counts every failure.

use jiff::{SignedDuration, Timestamp};

/// How often a failure that lasts is said again.
pub const SAY_AGAIN_AFTER: SignedDuration = SignedDuration::from_mins(5);

pub use crate::crd::EVENT_STATUS_WRITE_FAILED as STATUS_WRITE_FAILED;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct StatusWriteHealth {
    failing: Option<Failing>,
}

#[derive(Debug, Clone, PartialEq)]
struct Failing {
    since: Timestamp,
    reason: String,
    said_at: Timestamp,
    failures: u64,
}

/// A failing write's story so far, for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovered {
    pub failures: u64,
    pub since: Timestamp,
}

impl StatusWriteHealth {
    /// A write failed for `reason` (the apiserver's, as a short word): whether to say so now.
    pub fn failed(&mut self, reason: &str, now: Timestamp) -> bool {
        match &mut self.failing {
            Some(failing) => {
                failing.failures = failing.failures.saturating_add(1);
                let due = failing.said_at.checked_add(SAY_AGAIN_AFTER).map_or(true, |due| now >= due);
                if failing.reason != reason || due {
                    failing.reason = reason.to_string();
                    failing.said_at = now;
                    return true;
                }
                false
            }
            None => {
                self.failing = Some(Failing { since: now, reason: reason.to_string(), said_at: now, failures: 1 });
                true
            }
        }
    }

    /// A write succeeded: what the failure was, if one just ended.
    pub fn written(&mut self) -> Option<Recovered> {
        self.failing.take().map(|f| Recovered { failures: f.failures, since: f.since })
    }

    pub fn is_failing(&self) -> bool {
        self.failing.is_some()
    }
}

/// What a refused write is filed under: the apiserver's reason word, or the status code.
pub fn failure_reason(code: Option<u16>, reason: &str) -> String {
    match (code, reason) {
        (_, reason) if !reason.is_empty() => reason.to_string(),
        (Some(413), _) => "RequestEntityTooLarge".into(),
        (Some(code), _) => format!("Http{code}"),
        (None, _) => "Unreachable".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_failure_is_said_when_it_starts_changes_and_every_five_minutes() {
        let mut health = StatusWriteHealth::default();
        let start = Timestamp::UNIX_EPOCH;
        let at = |seconds: i64| start.checked_add(SignedDuration::from_secs(seconds)).unwrap();
        assert!(health.failed("Forbidden", at(0)), "said when it starts");
        assert!(!health.failed("Forbidden", at(10)), "not at every cycle");
        assert!(!health.failed("Forbidden", at(299)));
        assert!(health.failed("Forbidden", at(300)), "said again after five minutes");
        assert!(health.failed("Invalid", at(301)), "said when the reason changes");
        assert!(health.is_failing());
        assert_eq!(health.written(), Some(Recovered { failures: 5, since: at(0) }));
        assert_eq!(health.written(), None, "the recovery is said once");
        assert!(health.failed("Forbidden", at(302)), "a new failure is said at once");
    }

    #[test]
    fn reasons_are_the_apiservers_words() {
        assert_eq!(failure_reason(Some(403), "Forbidden"), "Forbidden");
        assert_eq!(failure_reason(Some(413), ""), "RequestEntityTooLarge");
        assert_eq!(failure_reason(Some(500), ""), "Http500");
        assert_eq!(failure_reason(None, ""), "Unreachable");
    }
}
