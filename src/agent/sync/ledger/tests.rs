use super::*;
use crate::crd::{CONDITION_LEDGER_TRUNCATED, PendingErrorRecord};

#[test]
fn a_pathological_error_set_keeps_the_newest_errors_within_the_budget() {
    let mut ledger = Ledger::restore(None);
    for i in 0..1500 {
        let key = WorkspaceKey::new(format!("ns-{i}"), "ws");
        ledger.acknowledged_mut().insert(key.clone(), format!("{}", 100_000 + i));
        let version = ledger.errors_mut().begin(&key);
        let message = format!("{i:04} {}", "x".repeat(1000));
        ledger.errors_mut().record(&key, version, Err(ApplyError::applier(message)), at(i));
    }
    let status = ledger.to_status(1500, &[], at(2000));
    let bytes = serde_json::to_vec(&status).expect("json").len();
    assert!(bytes < 1024 * 1024, "{bytes} bytes");
    assert_eq!(status.pending_error_count, 1500, "the count still says how many are pending");
    let kept = status.pending_errors.len();
    assert!(kept > 500 && kept < 1500, "{kept} kept");
    let truncated = status.conditions.iter().find(|c| c.type_ == CONDITION_LEDGER_TRUNCATED).expect("condition");
    assert_eq!(truncated.status, "True");
    assert!(truncated.message.contains(&format!("newest {kept} of 1500")), "{}", truncated.message);
    let oldest_kept = status.pending_errors.iter().map(|r| r.first_seen.0).min().expect("some");
    assert_eq!(oldest_kept, at(1500 - kept as i64), "the newest are the ones kept");

    let mut calm = Ledger::restore(None);
    let key = WorkspaceKey::new("ns", "ws");
    let version = calm.errors_mut().begin(&key);
    calm.errors_mut().record(&key, version, Err(ApplyError::applier("bad")), at(0));
    let status = calm.to_status(1, &[], at(1));
    assert!(status.conditions.iter().all(|c| c.type_ != CONDITION_LEDGER_TRUNCATED));
}
use crate::agent::error::ApplyError;

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

#[test]
fn first_cycle_since_leading_is_full_then_partial_until_due() {
    let mut ledger = Ledger::restore(None);
    assert_eq!(ledger.cycle_due(at(0), true, None), UpdateType::Full);
    ledger.cycle_succeeded(UpdateType::Full, at(0), None);
    assert_eq!(ledger.cycle_due(at(1), false, None), UpdateType::Partial);
    assert_eq!(ledger.cycle_due(at(3600), false, None), UpdateType::Full, "the full interval has passed");
}

#[test]
fn a_changed_resync_annotation_forces_one_full_cycle() {
    let mut ledger = Ledger::restore(None);
    ledger.cycle_succeeded(UpdateType::Full, at(0), None);
    assert_eq!(ledger.cycle_due(at(1), false, Some("a")), UpdateType::Full);
    ledger.cycle_succeeded(UpdateType::Full, at(1), Some("a"));
    assert_eq!(ledger.cycle_due(at(2), false, Some("a")), UpdateType::Partial);
    assert_eq!(ledger.cycle_due(at(3), false, Some("b")), UpdateType::Full);
}

#[test]
fn requeue_is_the_partial_interval_or_the_time_to_the_next_full() {
    let mut ledger = Ledger::restore(None);
    ledger.cycle_succeeded(UpdateType::Full, at(0), None);
    assert_eq!(ledger.requeue_after(at(0)), Duration::from_secs(10));
    assert_eq!(ledger.requeue_after(at(3595)), Duration::from_secs(5));
    assert_eq!(ledger.requeue_after(at(4000)), Duration::ZERO);
}

#[test]
fn partial_heartbeat_is_written_at_most_once_a_minute() {
    let mut ledger = Ledger::restore(None);
    ledger.cycle_succeeded(UpdateType::Partial, at(0), None);
    ledger.cycle_succeeded(UpdateType::Partial, at(30), None);
    assert_eq!(ledger.fields.last_partial_sync, Some(at(0)));
    ledger.cycle_succeeded(UpdateType::Partial, at(61), None);
    assert_eq!(ledger.fields.last_partial_sync, Some(at(61)));
}

#[test]
fn identical_messages_are_stored_once_and_survive_a_restart() {
    let mut ledger = Ledger::restore(None);
    for name in ["a", "b", "c"] {
        let key = WorkspaceKey::new("ns", name);
        let v = ledger.errors_mut().begin(&key);
        ledger.errors_mut().record(&key, v, Err(ApplyError::applier("same template error")), at(0));
    }
    let status = ledger.to_status(3, &[], at(0));
    assert_eq!(status.error_messages, vec!["same template error".to_string()]);
    assert_eq!(status.pending_error_count, 3);

    let restored = Ledger::restore(Some(&status));
    assert_eq!(restored.errors.epoch(), status.epoch + 1);
    let pending = restored.errors.pending();
    assert_eq!(pending.len(), 3);
    assert!(pending.iter().all(|(_, held)| held.failure.message == "same template error"));
}

#[test]
fn full_reset_keeps_errors_and_drops_the_rest() {
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("ns", "ws");
    ledger.acknowledged_mut().insert(key.clone(), "5".into());
    ledger.terminations_mut().insert(key.clone(), TerminationProgress::Terminating);
    ledger.errors_mut().fail_now(&key, &ApplyError::kubernetes("x"), at(0));
    ledger.reset_for_full();
    assert!(ledger.acknowledged().is_empty() && ledger.terminations().is_empty());
    assert_eq!(ledger.errors().pending_count(), 1);
}

#[test]
fn unchanged_ledger_renders_identically() {
    let mut ledger = Ledger::restore(None);
    ledger.cycle_succeeded(UpdateType::Full, at(0), None);
    let first = ledger.to_status(0, &[], at(0));
    let second = ledger.to_status(0, &first.conditions, at(50));
    assert_eq!(first, second);
}

#[test]
fn an_unacknowledged_workload_failure_survives_a_restart_as_the_workloads() {
    use crate::protocol::failure_reason::FailureReason::ImagePull;
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("ns", "ws");
    let pull = Some((ImagePull, "ImagePull: image \"nope\" could not be pulled"));
    ledger.errors_mut().observe_workload(&key, pull, at(0));
    let status = ledger.to_status(1, &[], at(0));
    let mut restored = Ledger::restore(Some(&status));
    let pending = restored.errors.pending();
    assert_eq!(pending.len(), 1, "still pending after the restart");
    assert_eq!(pending[0].1.failure.workload, Some(ImagePull));
    use crate::agent::sync::error_tracker::Recorded;
    assert_eq!(restored.errors_mut().observe_workload(&key, pull, at(1)), Recorded::StillFailing, "not twice");
    assert_eq!(restored.errors_mut().observe_workload(&key, None, at(2)), Recorded::Recovered, "and it can end");
}

#[test]
fn past_the_budget_the_unacknowledged_are_kept_before_the_newest_acknowledged() {
    let mut ledger = Ledger::restore(None);
    for i in 0..1500 {
        let key = WorkspaceKey::new(format!("ns-{i}"), "ws");
        let version = ledger.errors_mut().begin(&key);
        let message = format!("{i:04} {}", "x".repeat(1000));
        ledger.errors_mut().record(&key, version, Err(ApplyError::applier(message)), at(i));
        // The oldest 300 the control plane has not seen; the newer ones it has.
        if i >= 300 {
            ledger.errors_mut().acknowledge(&key, version);
        }
    }
    let status = ledger.to_status(1500, &[], at(2000));
    let unacknowledged = status.pending_errors.iter().filter(|r| !r.acknowledged).count();
    assert_eq!(unacknowledged, 300, "every error the control plane has not seen survives a restart");
    assert!(status.pending_errors.len() < 1500 && status.error_count == 1500);
}

#[test]
fn a_restored_record_needs_its_message_and_the_newer_of_two_wins() {
    let record = |workspace: &str, version: &str, message: u32, acknowledged| PendingErrorRecord {
        workspace: workspace.into(),
        error_type: ErrorType::Applier,
        version: version.into(),
        first_seen: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)),
        message,
        acknowledged,
    };
    let status = WorkspaceSyncStatusStatus {
        pending_errors: vec![
            record("ns/newer", "1.7", 0, false),
            record("ns/newer", "1.3", 0, true),
            record("ns/pointless", "1.4", 9, true),
        ],
        error_messages: vec!["boom".into()],
        epoch: 4,
        ..Default::default()
    };
    let restored = Ledger::restore(Some(&status));
    let held = restored.errors().held();
    let versions: Vec<(String, String, bool)> =
        held.iter().map(|(key, held)| (key.to_string(), held.version.to_string(), held.acknowledged)).collect();
    assert_eq!(versions, [("ns/newer".to_string(), "1.7".to_string(), false)], "no empty error is restored");
}

/// An epoch edited to int64's maximum (or past it) would be raised past what the apiserver
/// holds, and every status write refused: it starts again at 1, with the restored errors'
/// versions below every new one.
#[test]
fn an_epoch_at_the_apiservers_limit_is_repaired_at_start() {
    use crate::agent::sync::ledger::MAX_EPOCH;
    for edited in [MAX_EPOCH, u64::MAX] {
        let status = WorkspaceSyncStatusStatus {
            pending_errors: vec![PendingErrorRecord {
                workspace: "ns/ws".into(),
                error_type: ErrorType::Applier,
                version: format!("{}.3", MAX_EPOCH),
                first_seen: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(0)),
                message: 0,
                acknowledged: true,
            }],
            error_messages: vec!["boom".into()],
            epoch: edited,
            ..Default::default()
        };
        let mut restored = Ledger::restore(Some(&status));
        assert_eq!(restored.errors().epoch(), 1, "{edited}");
        let key = WorkspaceKey::new("ns", "ws");
        let next = restored.errors_mut().begin(&key);
        let held = restored.errors().held();
        assert_eq!(held[0].1.version.to_string(), "0.3", "restored below the new epoch");
        assert!(held[0].1.version < next, "a new apply supersedes it");
        let written = restored.to_status(1, &[], at(1));
        assert!(i64::try_from(written.epoch).is_ok(), "the apiserver holds what is written");
    }
    let near = WorkspaceSyncStatusStatus { epoch: MAX_EPOCH - 1, ..Default::default() };
    assert_eq!(Ledger::restore(Some(&near)).errors().epoch(), MAX_EPOCH, "up to the limit, the epoch is kept");
}
