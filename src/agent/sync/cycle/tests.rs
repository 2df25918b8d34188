use super::*;
use crate::agent::sync::answer::Answer;
use crate::agent::sync::workspace::{ProjectedDeployment, ProjectedMeta, ProjectedSpec};
use crate::protocol::{Settings, WorkspaceRailsInfo};
use jiff::Timestamp;

fn deployment(ns: &str, name: &str, rv: &str) -> Arc<DeploymentProjection> {
    let d = DeploymentProjection::new(ProjectedDeployment {
        metadata: ProjectedMeta {
            name: name.into(),
            namespace: ns.into(),
            resource_version: rv.into(),
            generation: Some(1),
            labels: Default::default(),
            annotations: Default::default(),
            creation_timestamp: None,
        },
        spec: ProjectedSpec { replicas: Some(1) },
        status: None,
    })
    .unwrap();
    Arc::new(d)
}

fn rails(
    ns: &str,
    name: &str,
    desired: DesiredState,
    actual: ActualState,
    rv: Option<&str>,
    config: &str,
) -> WorkspaceRailsInfo {
    WorkspaceRailsInfo {
        name: name.into(),
        namespace: ns.into(),
        desired_state: desired,
        actual_state: actual,
        deployment_resource_version: rv.map(str::to_string),
        config_to_apply: config.into(),
        image_pull_secrets: vec![],
    }
}

fn fail(ledger: &mut Ledger, key: &WorkspaceKey, message: &str) -> ApplyVersion {
    let v = ledger.errors_mut().begin(key);
    ledger.errors_mut().record(key, v, Err(crate::agent::error::ApplyError::applier(message)), Timestamp::UNIX_EPOCH);
    v
}

#[test]
fn sends_only_deployments_whose_version_is_not_acknowledged() {
    let mut ledger = Ledger::restore(None);
    let dirty = vec![deployment("a", "acked", "5"), deployment("b", "changed", "7")];
    ledger.acknowledged_mut().insert(WorkspaceKey::new("a", "acked"), "5".into());
    ledger.acknowledged_mut().insert(WorkspaceKey::new("b", "changed"), "6".into());
    let plan = plan(UpdateType::Partial, &dirty, &ledger, &HashSet::new());
    let names: Vec<_> = plan.request.workspace_agent_infos.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["changed"]);
    let info = &plan.request.workspace_agent_infos[0];
    assert_eq!(info.latest_k8s_deployment_info.as_ref().unwrap().resource_version().as_deref(), Some("7"));
    let cleaned: Vec<_> = plan.already_acknowledged.iter().map(|d| d.key().clone()).collect();
    assert_eq!(cleaned, [WorkspaceKey::new("a", "acked")], "marked clean without being sent");
}

#[test]
fn a_dropped_info_is_read_again_only_when_the_control_plane_lacks_its_version() {
    let mut ledger = Ledger::restore(None);
    let held = Arc::new(deployment("a", "held", "5").reported());
    let unacknowledged = Arc::new(deployment("b", "recovered", "7").reported());
    ledger.acknowledged_mut().insert(WorkspaceKey::new("a", "held"), "5".into());
    let dirty = vec![held, unacknowledged, deployment("c", "fresh", "9")];
    assert_eq!(to_reread(&dirty, &ledger), [WorkspaceKey::new("b", "recovered")]);
    // Had the re-read failed: nothing is sent for it, and it is not marked clean either.
    let plan = plan(UpdateType::Partial, &dirty, &ledger, &HashSet::new());
    let names: Vec<_> = plan.request.workspace_agent_infos.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["fresh"]);
    assert_eq!(plan.already_acknowledged.len(), 1);
}

#[test]
fn idle_cycle_sends_nothing() {
    let ledger = Ledger::restore(None);
    let plan = plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    assert!(plan.request.workspace_agent_infos.is_empty());
    assert_eq!(
        serde_json::to_string(&plan.request).unwrap(),
        r#"{"update_type":"partial","workspace_agent_infos":[]}"#
    );
}

#[test]
fn terminations_and_errors_merge_into_one_info_per_workspace() {
    let mut ledger = Ledger::restore(None);
    let ws = WorkspaceKey::new("ns", "ws");
    let gone = WorkspaceKey::new("ns2", "gone");
    ledger.terminations_mut().insert(ws.clone(), TerminationProgress::Terminating);
    ledger.terminations_mut().insert(gone.clone(), TerminationProgress::Terminating);
    let version = fail(&mut ledger, &ws, "boom");
    let plan = plan(UpdateType::Partial, &[deployment("ns", "ws", "3")], &ledger, &HashSet::from([gone]));
    let infos = &plan.request.workspace_agent_infos;
    assert_eq!(infos.len(), 2);
    let ws_info = infos.iter().find(|i| i.name == "ws").unwrap();
    assert!(ws_info.latest_k8s_deployment_info.is_some());
    assert_eq!(ws_info.termination_progress, Some(TerminationProgress::Terminating));
    assert_eq!(ws_info.error_details.as_ref().unwrap().error_message, "boom");
    let gone_info = infos.iter().find(|i| i.name == "gone").unwrap();
    assert_eq!(gone_info.termination_progress, Some(TerminationProgress::Terminated));
    assert_eq!(plan.sent_errors, vec![(ws, version)]);
}

#[test]
fn in_flight_applies_are_not_sent() {
    let mut ledger = Ledger::restore(None);
    ledger.errors_mut().begin(&WorkspaceKey::new("ns", "ws"));
    let plan = plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    assert!(plan.request.workspace_agent_infos.is_empty());
}

#[test]
fn settle_acknowledges_and_schedules_applies() {
    let mut ledger = Ledger::restore(None);
    let plan = plan(UpdateType::Full, &[deployment("ns", "ws", "3")], &ledger, &HashSet::new());
    let response = ReconcileResponse {
        workspace_rails_infos: vec![
            rails("ns", "ws", DesiredState::Running, ActualState::Running, Some("3"), "kind: ConfigMap"),
            rails("ns", "quiet", DesiredState::Running, ActualState::Running, Some("9"), ""),
        ],
        settings: Some(Settings {
            full_reconciliation_interval_seconds: 60,
            partial_reconciliation_interval_seconds: 2,
        }),
    };
    let settled = settle(&mut ledger, &plan, &mut Answer::from(response.clone()), false, |_, _, _| false);
    assert_eq!(ledger.acknowledged().get(&WorkspaceKey::new("ns", "ws")).map(String::as_str), Some("3"));
    assert_eq!(settled.acknowledged.len(), 1, "quiet was never reported: its version is not the agent's to keep");
    assert_eq!(settled.actions.len(), 1, "an empty config applies nothing");
    assert!(matches!(&settled.actions[0], WorkspaceAction::Apply { config, .. } if config == "kind: ConfigMap"));
    assert_eq!(ledger.fields.settings.partial_reconciliation_interval_seconds, 2);
    assert!(ledger.errors().in_flight(&WorkspaceKey::new("ns", "ws")));
}

#[test]
fn invalid_settings_keep_the_last_good_ones() {
    let mut ledger = Ledger::restore(None);
    let plan = plan(UpdateType::Full, &[], &ledger, &HashSet::new());
    let response = ReconcileResponse {
        workspace_rails_infos: vec![],
        settings: Some(Settings {
            full_reconciliation_interval_seconds: 5,
            partial_reconciliation_interval_seconds: 10,
        }),
    };
    let settled = settle(&mut ledger, &plan, &mut Answer::from(response.clone()), false, |_, _, _| false);
    assert!(settled.rejected_settings.is_some());
    assert_eq!(ledger.fields.settings, Settings::default());
}

#[test]
fn errors_clear_only_under_the_sent_version() {
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("ns", "ws");
    fail(&mut ledger, &key, "first");
    let plan = plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    // While the request is out, a newer apply fails too.
    fail(&mut ledger, &key, "second");
    let response = ReconcileResponse {
        workspace_rails_infos: vec![rails("ns", "ws", DesiredState::Running, ActualState::Error, None, "")],
        settings: None,
    };
    settle(&mut ledger, &plan, &mut Answer::from(response.clone()), false, |_, _, _| false);
    let pending = ledger.errors().pending();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].1.failure.message, "second");

    let plan = super::plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    settle(&mut ledger, &plan, &mut Answer::from(response.clone()), false, |_, _, _| false);
    assert_eq!(ledger.errors().pending_count(), 0);
}

#[test]
fn an_error_the_control_plane_does_not_return_stays_pending() {
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("ns", "ws");
    fail(&mut ledger, &key, "boom");
    let plan = plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    settle(&mut ledger, &plan, &mut Answer::default(), false, |_, _, _| false);
    assert_eq!(ledger.errors().pending_count(), 1);
}

#[test]
fn termination_is_tracked_then_forgotten() {
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("ns", "ws");
    let plan = plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    let terminating = ReconcileResponse {
        workspace_rails_infos: vec![rails("ns", "ws", DesiredState::Terminated, ActualState::Running, None, "x")],
        settings: None,
    };
    let settled = settle(&mut ledger, &plan, &mut Answer::from(terminating.clone()), false, |_, _, _| false);
    assert_eq!(settled.actions, vec![WorkspaceAction::Terminate { key: key.clone() }]);
    assert_eq!(ledger.terminations().get(&key), Some(&TerminationProgress::Terminating));

    let terminated = ReconcileResponse {
        workspace_rails_infos: vec![rails("ns", "ws", DesiredState::Terminated, ActualState::Terminated, None, "")],
        settings: None,
    };
    let settled = settle(&mut ledger, &plan, &mut Answer::from(terminated.clone()), false, |_, _, _| false);
    assert_eq!(settled.forgotten, vec![key.clone()]);
    assert!(ledger.terminations().is_empty());
}

#[test]
fn paused_agent_records_but_does_nothing() {
    let mut ledger = Ledger::restore(None);
    let plan = plan(UpdateType::Full, &[deployment("ns", "a", "1")], &ledger, &HashSet::new());
    let response = ReconcileResponse {
        workspace_rails_infos: vec![
            rails("ns", "a", DesiredState::Running, ActualState::Running, Some("1"), "kind: X"),
            rails("ns", "b", DesiredState::Terminated, ActualState::Running, None, ""),
        ],
        settings: None,
    };
    let settled = settle(&mut ledger, &plan, &mut Answer::from(response.clone()), true, |_, _, _| false);
    assert!(settled.actions.is_empty());
    assert_eq!(settled.acknowledged.len(), 1);
}

#[test]
fn full_cycle_prunes_what_nobody_knows() {
    let mut ledger = Ledger::restore(None);
    let in_cluster = WorkspaceKey::new("ns", "in-cluster");
    let returned = WorkspaceKey::new("ns", "returned");
    let forgotten = WorkspaceKey::new("ns", "forgotten");
    for key in [&in_cluster, &returned, &forgotten] {
        fail(&mut ledger, key, "boom");
    }
    let response = ReconcileResponse {
        workspace_rails_infos: vec![rails("ns", "returned", DesiredState::Running, ActualState::Error, None, "")],
        settings: None,
    };
    prune_unknown(&mut ledger, |k| *k == in_cluster, &response);
    let left: Vec<_> = ledger.errors().pending().into_iter().map(|(k, _)| k.name().to_string()).collect();
    assert_eq!(left, ["in-cluster", "returned"]);
}

#[test]
fn a_recovered_workspace_is_sent_once_though_acknowledged() {
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("a", "ws");
    ledger.acknowledged_mut().insert(key.clone(), "5".into());
    ledger.report_again(&key);
    assert!(!ledger.holds(&key, "5"), "the control plane still shows the old error");
    let dirty = vec![deployment("a", "ws", "5")];
    let first = plan(UpdateType::Partial, &dirty, &ledger, &HashSet::new());
    let sent = &first.request.workspace_agent_infos;
    assert_eq!((sent.len(), sent[0].error_details.is_none()), (1, true), "sent, without an error");
    assert!(first.already_acknowledged.is_empty());
    let answer = ReconcileResponse {
        workspace_rails_infos: vec![rails("a", "ws", DesiredState::Running, ActualState::Running, Some("5"), "")],
        settings: None,
    };
    settle(&mut ledger, &first, &mut Answer::from(answer.clone()), false, |_, _, _| false);
    assert!(ledger.holds(&key, "5"));
    let again = plan(UpdateType::Partial, &dirty, &ledger, &HashSet::new());
    assert!(again.request.workspace_agent_infos.is_empty(), "heard once; now marked clean instead");
    assert_eq!(again.already_acknowledged.len(), 1);
}

#[test]
fn a_recovery_during_a_cycle_is_not_undone_by_its_answer() {
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("a", "ws");
    ledger.acknowledged_mut().insert(key.clone(), "5".into());
    let planned = plan(UpdateType::Partial, &[deployment("a", "ws", "5")], &ledger, &HashSet::new());
    assert_eq!(planned.already_acknowledged.len(), 1);
    ledger.report_again(&key); // the apply recovers while the request is out
    let answer = ReconcileResponse {
        workspace_rails_infos: vec![rails("a", "ws", DesiredState::Running, ActualState::Running, Some("5"), "")],
        settings: None,
    };
    settle(&mut ledger, &planned, &mut Answer::from(answer.clone()), false, |_, _, _| false);
    assert!(!ledger.holds(&key, "5"), "still to be reported: the controller leaves the entry dirty");
}

#[test]
fn a_config_the_apply_in_flight_carries_starts_nothing() {
    let mut ledger = Ledger::restore(None);
    let plan = plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    let response = ReconcileResponse {
        workspace_rails_infos: vec![
            rails("a", "same", DesiredState::Running, ActualState::Error, None, "cfg"),
            rails("b", "newer", DesiredState::Running, ActualState::Running, None, "cfg"),
        ],
        settings: None,
    };
    let same = WorkspaceKey::new("a", "same");
    let settled = settle(&mut ledger, &plan, &mut Answer::from(response), false, |key, config, _| {
        *key == same && config == "cfg"
    });
    let applied: Vec<&WorkspaceKey> = settled.actions.iter().map(WorkspaceAction::key).collect();
    assert_eq!(applied, [&WorkspaceKey::new("b", "newer")]);
    assert!(!ledger.errors().in_flight(&same), "no version begun for it, so its pending error still shows");
}

#[test]
fn a_workload_failure_goes_with_every_report_until_it_ends_but_never_with_a_termination() {
    use crate::protocol::failure_reason::FailureReason::QuotaExceeded;
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("ns", "ws");
    let quota = Some((QuotaExceeded, "QuotaExceeded: no room"));
    ledger.errors_mut().observe_workload(&key, quota, Timestamp::UNIX_EPOCH);
    let first = plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    assert_eq!(first.sent_errors.len(), 1, "pending: sent even with no change to report");
    ledger.errors_mut().acknowledge(&key, first.sent_errors[0].1);
    let again = plan(UpdateType::Partial, &[deployment("ns", "ws", "8")], &ledger, &HashSet::new());
    let details = again.request.workspace_agent_infos[0].error_details.as_ref().expect("still attached");
    assert_eq!(details.error_message, "QuotaExceeded: no room");
    assert!(again.sent_errors.is_empty(), "acknowledged: nothing new to acknowledge");
    ledger.terminations_mut().insert(key.clone(), TerminationProgress::Terminating);
    let terminating = plan(UpdateType::Partial, &[], &ledger, &HashSet::new());
    assert!(terminating.request.workspace_agent_infos[0].error_details.is_none());
}

#[test]
fn an_acknowledged_apply_failure_goes_with_every_report_full_or_partial_and_survives_a_restart() {
    let mut ledger = Ledger::restore(None);
    let key = WorkspaceKey::new("ns", "ws");
    let version = fail(&mut ledger, &key, "refused image pull secret r/s: not an allowed source");
    ledger.errors_mut().acknowledge(&key, version);
    let carried =
        |plan: &CyclePlan| plan.request.workspace_agent_infos[0].error_details.clone().map(|d| d.error_message);
    ledger.reset_for_full();
    let full = plan(UpdateType::Full, &[deployment("ns", "ws", "7")], &ledger, &HashSet::new());
    assert_eq!(carried(&full).as_deref(), Some("refused image pull secret r/s: not an allowed source"));
    assert!(full.sent_errors.is_empty(), "not new: nothing to acknowledge");
    let changed = plan(UpdateType::Partial, &[deployment("ns", "ws", "8")], &ledger, &HashSet::new());
    assert!(carried(&changed).is_some(), "a changed Deployment's report carries it too");
    let restarted = Ledger::restore(Some(&ledger.to_status(1, &[], Timestamp::UNIX_EPOCH)));
    let first = plan(UpdateType::Full, &[deployment("ns", "ws", "8")], &restarted, &HashSet::new());
    assert!(carried(&first).is_some(), "a restarted agent knows it before its first retry");
    assert_eq!(restarted.errors().pending_count(), 0, "and knows it was acknowledged");
}

/// A restarted agent's first cycle can run before its Pod watch has listed: the failure it
/// restored from the status is not taken for over until the Pods are known.
#[test]
fn a_restored_pod_failure_waits_for_the_pod_watch() {
    use crate::agent::sync::deployment_failure::WorkloadFailure;
    use crate::agent::sync::pod_failures::PodFailures;
    use crate::protocol::failure_reason::FailureReason;
    let mut ledger = Ledger::restore(None);
    let d = deployment("ns", "ws", "1");
    let failure = WorkloadFailure::new(FailureReason::ImagePull, "ImagePull: no such image");
    let seen = Some((failure.reason, &*failure.message));
    let now = Timestamp::UNIX_EPOCH;
    assert_eq!(ledger.errors_mut().observe_workload(d.key(), seen, now), Recorded::Failed);

    let mut pods = PodFailures::default();
    assert!(observe_workloads(std::slice::from_ref(&d), &pods, &mut ledger, now).is_empty(), "not listed: no news");
    assert!(ledger.errors().holding(d.key()).is_some());
    pods.replace(Vec::new());
    let changed = observe_workloads(std::slice::from_ref(&d), &pods, &mut ledger, now);
    assert_eq!(changed.len(), 1, "listed, and no Pod fails: recovered");
    assert_eq!(changed[0].1, Recorded::Recovered);
}

mod bounds;
mod properties;
