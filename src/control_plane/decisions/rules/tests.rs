use super::*;
use crate::protocol::{ErrorDetails, ErrorType};
use serde_json::{Value, json};

fn with_deployment(deployment: Value) -> WorkspaceAgentInfo {
    WorkspaceAgentInfo {
        name: "ws".into(),
        namespace: "ns".into(),
        latest_k8s_deployment_info: Some(deployment.into()),
        ..Default::default()
    }
}

fn deployment(replicas: i64, progressing: &str, available: Option<&str>, status: Value) -> Value {
    let mut conditions = vec![json!({"type": "Progressing", "status": "True", "reason": progressing})];
    if let Some(reason) = available {
        conditions.push(json!({"type": "Available", "status": "True", "reason": reason}));
    }
    let mut status = status;
    status["conditions"] = Value::from(conditions);
    json!({"metadata": {"name": "ws"}, "spec": {"replicas": replicas}, "status": status})
}

fn state(d: Value) -> ActualState {
    actual_state(&with_deployment(d))
}

#[test]
fn rule_1_terminated_wins_over_everything() {
    let info = WorkspaceAgentInfo {
        termination_progress: Some(TerminationProgress::Terminated),
        error_details: Some(ErrorDetails { error_type: ErrorType::Kubernetes, error_message: "x".into() }),
        ..Default::default()
    };
    assert_eq!(actual_state(&info), ActualState::Terminated);
}

#[test]
fn rule_2_error_details_mean_error() {
    let info = WorkspaceAgentInfo {
        termination_progress: Some(TerminationProgress::Terminating),
        error_details: Some(ErrorDetails { error_type: ErrorType::Applier, error_message: "x".into() }),
        latest_k8s_deployment_info: Some(
            deployment(1, "NewReplicaSetAvailable", Some("MinimumReplicasAvailable"), json!({"availableReplicas": 1}))
                .into(),
        ),
        ..Default::default()
    };
    assert_eq!(actual_state(&info), ActualState::Error);
}

#[test]
fn rule_3_terminating() {
    let info =
        WorkspaceAgentInfo { termination_progress: Some(TerminationProgress::Terminating), ..Default::default() };
    assert_eq!(actual_state(&info), ActualState::Terminating);
}

#[test]
fn rule_4_missing_pieces_are_unknown() {
    assert_eq!(actual_state(&WorkspaceAgentInfo::default()), ActualState::Unknown);
    assert_eq!(state(json!({"spec": {"replicas": 1}})), ActualState::Unknown, "no status");
    assert_eq!(state(json!({"spec": {"replicas": 1}, "status": {}})), ActualState::Unknown, "no conditions");
    assert_eq!(
        state(
            json!({"spec": {"replicas": 1}, "status": {"conditions": [{"type": "Available", "reason": "MinimumReplicasAvailable"}]}})
        ),
        ActualState::Unknown,
        "no Progressing condition"
    );
    assert_eq!(
        state(json!({"spec": {"replicas": 1}, "status": {"conditions": [{"type": "Progressing"}]}})),
        ActualState::Unknown,
        "no Progressing reason"
    );
    assert_eq!(
        state(
            json!({"spec": {}, "status": {"conditions": [{"type": "Progressing", "reason": "NewReplicaSetAvailable"}]}})
        ),
        ActualState::Unknown,
        "no spec.replicas"
    );
}

#[test]
fn rule_5_progress_deadline_exceeded_is_failed() {
    // A crash-looping pod never becomes ready; with progressDeadlineSeconds the rollout ends here.
    let crash_looping = deployment(
        1,
        "ProgressDeadlineExceeded",
        Some("MinimumReplicasUnavailable"),
        json!({"unavailableReplicas": 1}),
    );
    assert_eq!(state(crash_looping), ActualState::Failed);
}

#[test]
fn rule_6_rollout_in_progress() {
    for reason in ["NewReplicaSetCreated", "FoundNewReplicaSet", "ReplicaSetUpdated"] {
        assert_eq!(state(deployment(0, reason, None, json!({}))), ActualState::Stopping, "{reason}");
        assert_eq!(state(deployment(1, reason, None, json!({}))), ActualState::Starting, "{reason}");
        assert_eq!(state(deployment(2, reason, None, json!({}))), ActualState::Unknown, "{reason}");
    }
}

#[test]
fn rule_7_no_available_condition_is_unknown() {
    assert_eq!(state(deployment(1, "NewReplicaSetAvailable", None, json!({}))), ActualState::Unknown);
}

#[test]
fn rule_8_settled_rollouts() {
    let settled = "NewReplicaSetAvailable";
    let available = Some("MinimumReplicasAvailable");
    assert_eq!(state(deployment(0, settled, available, json!({}))), ActualState::Stopped);
    assert_eq!(state(deployment(1, settled, available, json!({"availableReplicas": 1}))), ActualState::Running);
    assert_eq!(state(deployment(0, settled, available, json!({"availableReplicas": 1}))), ActualState::Stopping);
    assert_eq!(state(deployment(1, settled, available, json!({"availableReplicas": 0}))), ActualState::Starting);
    assert_eq!(
        state(deployment(1, settled, Some("MinimumReplicasUnavailable"), json!({"unavailableReplicas": 1}))),
        ActualState::Starting
    );
}

#[test]
fn rule_9_anything_else_is_unknown() {
    let odd = deployment(
        1,
        "NewReplicaSetAvailable",
        Some("MinimumReplicasAvailable"),
        json!({"availableReplicas": 1, "unavailableReplicas": 1}),
    );
    assert_eq!(state(odd), ActualState::Unknown);
    assert_eq!(state(deployment(1, "SomethingNew", Some("MinimumReplicasAvailable"), json!({}))), ActualState::Unknown);
}

fn selection(desired: DesiredState, actual: ActualState, responded: Option<i64>) -> Selection {
    Selection {
        desired,
        actual,
        desired_updated_at: 100,
        actual_updated_at: 100,
        responded_to_agent_at: responded,
        force_include_all_resources: false,
    }
}

#[test]
fn full_returns_everything_not_fully_terminated() {
    use ActualState as A;
    use DesiredState as D;
    assert!(selection(D::Running, A::Running, Some(200)).returned(UpdateType::Full, false));
    assert!(selection(D::Terminated, A::Running, Some(200)).returned(UpdateType::Full, false));
    assert!(selection(D::Running, A::Terminated, Some(200)).returned(UpdateType::Full, false));
    assert!(!selection(D::Terminated, A::Terminated, Some(200)).returned(UpdateType::Full, false));
}

#[test]
fn partial_returns_changes_pending_terminations_reports_and_forced() {
    use ActualState as A;
    use DesiredState as D;
    let quiet = selection(D::Running, A::Running, Some(200));
    assert!(!quiet.returned(UpdateType::Partial, false));
    assert!(quiet.returned(UpdateType::Partial, true), "the agent just reported it");
    assert!(selection(D::Running, A::Running, None).returned(UpdateType::Partial, false), "never responded");
    assert!(selection(D::Running, A::Running, Some(50)).returned(UpdateType::Partial, false), "changed since");
    assert!(
        selection(D::Terminated, A::Running, Some(200)).returned(UpdateType::Partial, false),
        "termination pending"
    );
    let forced = Selection { force_include_all_resources: true, ..quiet.clone() };
    assert!(forced.returned(UpdateType::Partial, false));
}

#[test]
fn config_goes_with_full_forced_changed_or_terminating() {
    use ActualState as A;
    use DesiredState as D;
    let quiet = selection(D::Running, A::Running, Some(200));
    assert!(!quiet.include_config(UpdateType::Partial));
    assert!(quiet.include_config(UpdateType::Full));
    assert!(Selection { force_include_all_resources: true, ..quiet.clone() }.include_config(UpdateType::Partial));
    assert!(selection(D::Stopped, A::Running, Some(50)).include_config(UpdateType::Partial));
    assert!(selection(D::Terminated, A::Running, Some(200)).include_config(UpdateType::Partial));
}

#[test]
fn restart_flips_to_running_once_stopped() {
    let limits = Lifecycle { max_running_ms: 1000, max_stopped_ms: 1000, max_terminated_percent: 100 };
    assert_eq!(next_desired(DesiredState::RestartRequested, ActualState::Running, 0, 10, &limits), None);
    assert_eq!(
        next_desired(DesiredState::RestartRequested, ActualState::Stopped, 0, 10, &limits),
        Some(DesiredState::Running)
    );
    assert_eq!(replicas(DesiredState::RestartRequested), 0);
    assert_eq!(replicas(DesiredState::Running), 1);
    assert_eq!(replicas(DesiredState::Stopped), 0);
}

#[test]
fn lifecycle_stops_long_runners_and_terminates_long_stopped() {
    let limits = Lifecycle { max_running_ms: 1000, max_stopped_ms: 5000, max_terminated_percent: 100 };
    assert_eq!(next_desired(DesiredState::Running, ActualState::Running, 0, 999, &limits), None);
    assert_eq!(
        next_desired(DesiredState::Running, ActualState::Running, 0, 1001, &limits),
        Some(DesiredState::Stopped)
    );
    assert_eq!(
        next_desired(DesiredState::Stopped, ActualState::Stopped, 0, 5001, &limits),
        Some(DesiredState::Terminated)
    );
    assert_eq!(
        next_desired(DesiredState::Terminated, ActualState::Terminated, 0, 99999, &limits),
        None,
        "Terminated is final"
    );
}

#[test]
fn the_termination_budget_is_a_share_and_never_zero() {
    let limits = |percent| Lifecycle { max_running_ms: 1, max_stopped_ms: 1, max_terminated_percent: percent };
    assert_eq!(limits(10).termination_budget(30), 3);
    assert_eq!(limits(10).termination_budget(5), 1, "one at least: a small agent still expires");
    assert_eq!(limits(10).termination_budget(0), 1);
    assert_eq!(limits(100).termination_budget(7), 7);
    assert_eq!(limits(250).termination_budget(7), 7, "more than all is all");
    assert_eq!(limits(10).termination_budget(usize::MAX), usize::MAX / 100, "no overflow");
}
