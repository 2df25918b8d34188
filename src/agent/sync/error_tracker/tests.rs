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
    assert_eq!(pending[0].1.failure.message, "boom");
    assert!(!tracker.acknowledge(&key(), ApplyVersion { epoch: 1, sequence: 99 }));
    assert!(tracker.acknowledge(&key(), v1));
    assert!(tracker.pending().is_empty());
    let holding = tracker.holding(&key()).expect("acknowledged, it still holds");
    assert_eq!((holding.failure.message.as_str(), holding.acknowledged), ("boom", true));
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
    assert_eq!(tracker.pending()[0].1.failure.message, "new");
}

#[test]
fn acknowledging_an_old_version_keeps_a_newer_failure() {
    let mut tracker = ErrorTracker::new(1);
    let v1 = tracker.begin(&key());
    tracker.record(&key(), v1, fail("first"), now());
    let v2 = tracker.begin(&key());
    tracker.record(&key(), v2, fail("second"), now());
    assert!(!tracker.acknowledge(&key(), v1));
    assert_eq!(tracker.pending()[0].1.failure.message, "second");
}

#[test]
fn success_after_failure_is_a_recovery() {
    let mut tracker = ErrorTracker::new(1);
    let v1 = tracker.begin(&key());
    tracker.record(&key(), v1, fail("boom"), now());
    let v2 = tracker.begin(&key());
    let holding = tracker.holding(&key()).map(|held| held.failure.message.as_str());
    assert_eq!(holding, Some("boom"), "an apply in flight does not end the failure; its success does");
    assert_eq!(tracker.pending().len(), 1, "nor does it hide it before the control plane has seen it");
    assert_eq!(tracker.record(&key(), v2, Ok(()), now()), Recorded::Recovered);
    assert!(tracker.holding(&key()).is_none() && tracker.held().is_empty());
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
    let failure = Failure {
        error_type: ErrorType::Applier,
        message: "x".into(),
        first_seen: now(),
        lasting: false,
        workload: None,
    };
    after.restore(key(), Held { version: old, failure, acknowledged: true });
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
    assert_eq!(tracker.pending()[0].1.failure.error_type, ErrorType::Kubernetes);
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

#[test]
fn a_retry_clears_the_failure_it_retried_and_a_repeated_failure_changes_nothing() {
    let mut tracker = ErrorTracker::new(1);
    let v = tracker.begin(&key());
    assert_eq!(tracker.record(&key(), v, fail("webhook timed out"), now()), Recorded::Failed);
    let retried = tracker.retryable(&key()).expect("retryable");
    assert_eq!(retried, v);
    assert_eq!(tracker.record_retry(&key(), retried, fail("webhook timed out"), now()), Recorded::StillFailing);
    assert_eq!(tracker.version_of(&key()), Some(v), "the pending error is as it was");
    assert_eq!(tracker.record_retry(&key(), retried, fail("quota exceeded"), now()), Recorded::Failed);
    let newer = tracker.retryable(&key()).expect("retryable");
    assert_ne!(newer, v, "a new message is a new pending error");
    assert_eq!(tracker.record_retry(&key(), retried, Ok(()), now()), Recorded::Stale, "the old retry is stale");
    assert!(tracker.acknowledge(&key(), newer));
    assert_eq!(tracker.retryable(&key()), Some(newer), "acknowledged, it is still retried");
    assert_eq!(tracker.record_retry(&key(), newer, fail("quota exceeded"), now()), Recorded::StillFailing);
    assert!(tracker.pending().is_empty(), "and a repeat of it is not new");
    assert_eq!(tracker.record_retry(&key(), newer, fail("webhook timed out"), now()), Recorded::Failed, "another is");
    let latest = tracker.retryable(&key()).expect("retryable");
    assert_eq!(tracker.record_retry(&key(), latest, Ok(()), now()), Recorded::Recovered);
    assert_eq!(tracker.retryable(&key()), None);
    assert!(tracker.holding(&key()).is_none());
}

#[test]
fn the_same_failure_from_a_new_apply_keeps_its_first_sighting() {
    let mut tracker = ErrorTracker::new(1);
    let v1 = tracker.begin(&key());
    tracker.record(&key(), v1, fail("refused image pull secret"), Timestamp::UNIX_EPOCH);
    assert!(tracker.acknowledge(&key(), v1));
    let later = Timestamp::from_second(600).expect("a time");
    let v2 = tracker.begin(&key());
    assert_eq!(tracker.record(&key(), v2, fail("refused image pull secret"), later), Recorded::Failed);
    let held = tracker.holding(&key()).expect("holds");
    assert_eq!((held.version, held.acknowledged, held.failure.first_seen), (v2, false, Timestamp::UNIX_EPOCH));
    let v3 = tracker.begin(&key());
    tracker.record(&key(), v3, fail("another"), later);
    assert_eq!(tracker.holding(&key()).map(|held| held.failure.first_seen), Some(later), "a new episode");
}

#[test]
fn a_newer_apply_supersedes_a_retry() {
    let mut tracker = ErrorTracker::new(1);
    let v = tracker.begin(&key());
    tracker.record(&key(), v, fail("boom"), now());
    let retried = tracker.retryable(&key());
    let newer = tracker.begin(&key());
    assert_eq!(tracker.retryable(&key()), None, "in flight");
    assert_eq!(tracker.record_retry(&key(), retried.expect("retryable"), Ok(()), now()), Recorded::Stale);
    assert!(tracker.holding(&key()).is_some(), "the failure holds while the newer apply runs");
    assert_eq!(tracker.record(&key(), newer, Ok(()), now()), Recorded::Recovered);
}

#[test]
fn a_workload_failure_is_reported_once_per_reason_and_ends_with_the_failure() {
    use crate::protocol::failure_reason::FailureReason::{PodSecurity, QuotaExceeded};
    let mut tracker = ErrorTracker::new(1);
    let key = WorkspaceKey::new("ns", "ws");
    assert_eq!(tracker.observe_workload(&key, None, now()), Recorded::Healthy);
    let quota = Some((QuotaExceeded, "QuotaExceeded: pods \"ws-1\" is forbidden"));
    assert_eq!(tracker.observe_workload(&key, quota, now()), Recorded::Failed);
    let (_, held) = tracker.pending()[0];
    let (version, failure) = (held.version, &held.failure);
    assert_eq!((failure.error_type, failure.workload), (ErrorType::Kubernetes, Some(QuotaExceeded)));
    // Another Pod's name, the same reason: nothing new, before or after the acknowledgement.
    let again = Some((QuotaExceeded, "QuotaExceeded: pods \"ws-2\" is forbidden"));
    assert_eq!(tracker.observe_workload(&key, again, now()), Recorded::StillFailing);
    assert!(tracker.acknowledge(&key, version));
    assert_eq!(tracker.observe_workload(&key, again, now()), Recorded::StillFailing);
    assert!(tracker.pending().is_empty());
    assert!(tracker.holding(&key).is_some(), "still attached to any report of the workspace");
    // A new reason is reported; the failure's end clears it, and the control plane must hear.
    let refused = Some((PodSecurity, "PodSecurity: violates PodSecurity \"baseline\""));
    assert_eq!(tracker.observe_workload(&key, refused, now()), Recorded::Failed);
    assert_eq!(tracker.observe_workload(&key, None, now()), Recorded::Recovered);
    assert!(tracker.pending().is_empty() && tracker.holding(&key).is_none());
}

#[test]
fn an_apply_failure_takes_the_slot_and_an_apply_success_does_not_end_a_workload_failure() {
    use crate::protocol::failure_reason::FailureReason::QuotaExceeded;
    let mut tracker = ErrorTracker::new(1);
    let key = WorkspaceKey::new("ns", "ws");
    let quota = Some((QuotaExceeded, "QuotaExceeded: no"));
    assert_eq!(tracker.observe_workload(&key, quota, now()), Recorded::Failed);
    let version = tracker.begin(&key);
    tracker.record(&key, version, Err(ApplyError::applier("422")), now());
    let pending = tracker.pending();
    assert_eq!(
        (pending.len(), pending[0].1.failure.message.as_str()),
        (1, "422"),
        "the apply's failure takes the slot"
    );
    let version = tracker.begin(&key);
    assert_eq!(tracker.record(&key, version, Ok(()), now()), Recorded::Recovered);
    assert_eq!(tracker.pending()[0].1.failure.workload, Some(QuotaExceeded), "the workload's failure still holds");
    assert_eq!(tracker.observe_workload(&key, quota, now()), Recorded::StillFailing, "and is not reported again");
    assert!(tracker.holding(&key).is_some());
}
