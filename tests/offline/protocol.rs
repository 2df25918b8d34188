//! The wire format, both directions, against JSON fixtures shaped like DESIGN §1.

use serde_json::Value;
use wsync::protocol::*;

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Parse, serialize, and compare as JSON: nothing lost, nothing added.
fn round_trips<T: serde::de::DeserializeOwned + serde::Serialize>(name: &str) -> T {
    let text = fixture(name);
    let parsed: T = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let again = serde_json::to_value(&parsed).expect("serialize");
    let original: Value = serde_json::from_str(&text).expect("fixture is JSON");
    assert_eq!(again, original, "{name} does not round-trip");
    parsed
}

#[test]
fn partial_request_round_trips() {
    let request: ReconcileRequest = round_trips("reconcile_request_partial.json");
    assert_eq!(request.update_type, UpdateType::Partial);
    assert_eq!(request.workspace_agent_infos.len(), 4);
    assert_eq!(request.workspace_agent_infos[1].termination_progress, Some(TerminationProgress::Terminating));
    let error = request.workspace_agent_infos[2].error_details.as_ref().expect("error details");
    assert_eq!(error.error_type, ErrorType::Applier);
    assert_eq!(
        request.workspace_agent_infos[3].error_details.as_ref().map(|e| e.error_type),
        Some(ErrorType::Kubernetes)
    );
}

#[test]
fn empty_full_request_keeps_its_empty_array() {
    let request: ReconcileRequest = round_trips("reconcile_request_empty_full.json");
    assert_eq!(request.update_type, UpdateType::Full);
    assert!(request.workspace_agent_infos.is_empty());
}

#[test]
fn response_round_trips() {
    let response: ReconcileResponse = round_trips("reconcile_response.json");
    let ws1 = &response.workspace_rails_infos[0];
    assert_eq!((ws1.desired_state, ws1.actual_state), (DesiredState::Stopped, ActualState::Running));
    assert_eq!(ws1.deployment_resource_version.as_deref(), Some("123456"));
    assert_eq!(ws1.image_pull_secrets, vec![ImagePullSecret { name: "regcred".into(), namespace: "default".into() }]);
    assert_eq!(response.workspace_rails_infos[2].desired_state, DesiredState::RestartRequested);
    assert_eq!(response.settings, Some(Settings::default()));
}

#[test]
fn unknown_response_fields_are_ignored() {
    let response: ReconcileResponse =
        serde_json::from_str(&fixture("reconcile_response_gitlab_extra_fields.json")).expect("parses");
    assert_eq!(response.workspace_rails_infos[0].actual_state, ActualState::Starting);
    assert_eq!(response.settings.map(|s| s.partial_reconciliation_interval_seconds), Some(10));
}

#[test]
fn a_response_without_infos_or_settings_is_empty() {
    let response: ReconcileResponse = serde_json::from_str("{}").expect("parses");
    assert!(response.workspace_rails_infos.is_empty());
    assert!(response.settings.is_none());
}

#[test]
fn every_enum_value_is_spelled_as_on_the_wire() {
    let desired = ["Running", "Stopped", "Terminated", "RestartRequested"];
    for value in desired {
        let parsed: DesiredState = serde_json::from_value(Value::from(value)).expect(value);
        assert_eq!(serde_json::to_value(parsed).unwrap(), value);
    }
    let actual = [
        "CreationRequested",
        "Starting",
        "Running",
        "Stopping",
        "Stopped",
        "Terminating",
        "Terminated",
        "Failed",
        "Error",
        "Unknown",
    ];
    for value in actual {
        let parsed: ActualState = serde_json::from_value(Value::from(value)).expect(value);
        assert_eq!(serde_json::to_value(parsed).unwrap(), value);
    }
    assert_eq!(serde_json::to_value(ErrorType::Applier).unwrap(), "applier");
    assert_eq!(serde_json::to_value(ErrorType::Kubernetes).unwrap(), "kubernetes");
    assert_eq!(serde_json::to_value(UpdateType::Full).unwrap(), "full");
    assert!(serde_json::from_value::<DesiredState>(Value::from("running")).is_err());
}

#[test]
fn prerequisites_ignore_unknown_fields() {
    let p: Prerequisites = serde_json::from_str(r#"{"shared_namespace": "", "extra": 1}"#).expect("parses");
    assert_eq!(p.shared_namespace, "");
}

/// The halves meet only over HTTP, so this is where their contract is checked: what the
/// control plane builds, the agent's default apply policy takes whole.
#[test]
fn the_control_planes_config_passes_the_agents_apply_policy() {
    use wsync::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;
    use wsync::agent::policy::plan::{ApplyPolicy, plan};
    use wsync::control_plane::decisions::agent_config::AgentConfig;
    use wsync::control_plane::decisions::config_builder::{Resources, WorkspaceSpec, build};
    use wsync::control_plane::model::{NewWorkspace, Workspace};
    let new = NewWorkspace {
        cpu: Some("500m".into()),
        memory: Some("256Mi".into()),
        ..NewWorkspace::new("alice", "busybox:1.36")
    };
    let alice = Workspace::created("1", "wsync-1-alice", new, AgentConfig::before_settings().into(), 0);
    let pull_secrets = [ImagePullSecret { name: "regcred".into(), namespace: "registry".into() }];
    let policy = ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), "wsync-system");
    let members = |workspace: &Workspace, resources| {
        let label_key = wsync::protocol::inventory::DEFAULT_WORKSPACE_LABEL_KEY;
        let spec = WorkspaceSpec { workspace, label_key, image_pull_secrets: &pull_secrets };
        let config = build(&spec, DesiredState::Running, resources).expect("config");
        let objects = wsync::yaml::parse_objects(&config).expect("yaml");
        let plans = plan(objects, "wsync-1-alice", &policy, |_| true).expect("the agent accepts it");
        let mut sizes: Vec<usize> = plans.iter().map(|p| p.members.len()).collect();
        sizes.sort();
        sizes
    };
    assert_eq!(members(&alice, Resources::All), [4]);
    // With GitLab's settings: its NetworkPolicy and ResourceQuota, labels and annotations.
    let config = AgentConfig::parse(
        "max_resources_per_workspace: {limits: {cpu: '2', memory: 4Gi}, requests: {cpu: '1', memory: 1Gi}}\n\
         labels: {tier: dev}\nannotations: {team: eng}\n",
    )
    .expect("a GitLab agent config");
    let gitlab = Workspace { agent_config: config.into(), ..alice.clone() };
    // And the environment's Secret in an inventory of its own, sent with all resources only.
    assert_eq!(members(&gitlab, Resources::All), [1, 6]);
    assert_eq!(members(&gitlab, Resources::Partial), [6]);
}
