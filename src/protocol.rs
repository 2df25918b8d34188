//! GitLab's Workspaces reconcile protocol, shared by the agent and the control plane (DESIGN §1).
//!
//! Field names and enum values are wire facts: they never change. Empty optional fields are
//! omitted on the way out, and unknown fields are ignored on the way in.

use serde::{Deserialize, Serialize};
use std::fmt;

mod deployment_info;
pub mod failure_reason;
pub mod inventory;
pub use deployment_info::{DeploymentFacts, DeploymentInfo};

/// Default path of the reconcile endpoint, below the control-plane URL.
pub const RECONCILE_PATH: &str = "/api/v4/internal/kubernetes/modules/remote_development/reconcile";
/// Default path of the prerequisites endpoint, below the control-plane URL.
pub const PREREQUISITES_PATH: &str = "/api/v4/internal/kubernetes/modules/remote_development/prerequisites";
/// The only status code that means success for a reconcile call.
pub const RECONCILE_SUCCESS: u16 = 201;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpdateType {
    Partial,
    Full,
}

impl fmt::Display for UpdateType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UpdateType::Partial => "partial",
            UpdateType::Full => "full",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconcileRequest {
    pub update_type: UpdateType,
    /// Always an array on the wire, `[]` when empty; Rails answers 400 without it.
    pub workspace_agent_infos: Vec<WorkspaceAgentInfo>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct WorkspaceAgentInfo {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The Deployment as the agent sees it: metadata, spec and status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_k8s_deployment_info: Option<DeploymentInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_progress: Option<TerminationProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_details: Option<ErrorDetails>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub enum TerminationProgress {
    Terminating,
    Terminated,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetails {
    pub error_type: ErrorType,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub error_message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ErrorType {
    /// Applying `config_to_apply` failed.
    Applier,
    /// Any other cluster operation failed: namespaces, termination, pull secrets.
    Kubernetes,
}

impl ErrorType {
    /// The type's name on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applier => "applier",
            Self::Kubernetes => "kubernetes",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ReconcileResponse {
    #[serde(default)]
    pub workspace_rails_infos: Vec<WorkspaceRailsInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Settings>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceRailsInfo {
    pub name: String,
    pub namespace: String,
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    /// The Deployment resourceVersion the control plane has persisted: the agent's
    /// acknowledgement. `null` until there is one, as Rails sends it.
    #[serde(default)]
    pub deployment_resource_version: Option<String>,
    /// A multi-document YAML stream; `""` means nothing to apply.
    #[serde(default)]
    pub config_to_apply: String,
    /// Always an array, `[]` when there are none, as Rails sends it.
    #[serde(default)]
    pub image_pull_secrets: Vec<ImagePullSecret>,
}

/// The largest reconcile request a control plane accepts. A full sync of 10,000 workspaces
/// sends about 10 MB of Deployment projections; web frameworks' defaults (axum: 2 MB) would
/// refuse every full sync above about 2,000 workspaces.
pub const MAX_RECONCILE_BODY_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ImagePullSecret {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DesiredState {
    Running,
    Stopped,
    Terminated,
    RestartRequested,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ActualState {
    CreationRequested,
    Starting,
    Running,
    Stopping,
    Stopped,
    Terminating,
    Terminated,
    Failed,
    Error,
    Unknown,
}

impl DesiredState {
    /// The state's name on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "Running",
            Self::Stopped => "Stopped",
            Self::Terminated => "Terminated",
            Self::RestartRequested => "RestartRequested",
        }
    }
}

impl ActualState {
    /// The state's name on the wire and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CreationRequested => "CreationRequested",
            Self::Starting => "Starting",
            Self::Running => "Running",
            Self::Stopping => "Stopping",
            Self::Stopped => "Stopped",
            Self::Terminating => "Terminating",
            Self::Terminated => "Terminated",
            Self::Failed => "Failed",
            Self::Error => "Error",
            Self::Unknown => "Unknown",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    pub full_reconciliation_interval_seconds: u64,
    pub partial_reconciliation_interval_seconds: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self { full_reconciliation_interval_seconds: 3600, partial_reconciliation_interval_seconds: 10 }
    }
}

impl Settings {
    /// The shortest partial interval an agent accepts: a faster one would hammer the control plane.
    pub const MIN_PARTIAL_SECONDS: u64 = 1;
    /// The longest full interval an agent accepts: drift must be repaired within a week.
    pub const MAX_FULL_SECONDS: u64 = 7 * 24 * 3600;

    /// Partial at least 1 s, full at most 7 days, and partial strictly shorter than full.
    pub fn validate(&self) -> Result<(), String> {
        let (full, partial) = (self.full_reconciliation_interval_seconds, self.partial_reconciliation_interval_seconds);
        if full == 0 || partial == 0 {
            return Err(format!("intervals must be positive (full {full}s, partial {partial}s)"));
        }
        if partial < Self::MIN_PARTIAL_SECONDS || full > Self::MAX_FULL_SECONDS {
            return Err(format!(
                "intervals out of bounds (full {full}s, at most {}s; partial {partial}s, at least {}s)",
                Self::MAX_FULL_SECONDS,
                Self::MIN_PARTIAL_SECONDS
            ));
        }
        if partial >= full {
            return Err(format!("partial interval {partial}s must be shorter than full interval {full}s"));
        }
        Ok(())
    }
}

/// The longest `error_message` either half keeps: the agent sends no more, and the control
/// plane stores no more of what an agent sends.
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Cut a message to `MAX_MESSAGE_BYTES` on a character boundary, saying that it was cut.
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

/// The control plane's answer to a payload that fails validation (HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// `GET …/prerequisites`: agent-level settings. Unknown fields are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Prerequisites {
    #[serde(default)]
    pub shared_namespace: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_request_sends_an_empty_array() {
        let req = ReconcileRequest { update_type: UpdateType::Partial, workspace_agent_infos: vec![] };
        assert_eq!(serde_json::to_string(&req).unwrap(), r#"{"update_type":"partial","workspace_agent_infos":[]}"#);
    }

    #[test]
    fn state_names_are_the_wire_names() {
        use DesiredState as D;
        for state in [D::Running, D::Stopped, D::Terminated, D::RestartRequested] {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
        use ActualState as A;
        let actual = [
            A::CreationRequested,
            A::Starting,
            A::Running,
            A::Stopping,
            A::Stopped,
            A::Terminating,
            A::Terminated,
            A::Failed,
            A::Error,
            A::Unknown,
        ];
        for state in actual {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
        }
        for error_type in [ErrorType::Applier, ErrorType::Kubernetes] {
            assert_eq!(serde_json::to_value(error_type).unwrap(), error_type.as_str());
        }
    }

    #[test]
    fn optional_fields_are_omitted() {
        let info = WorkspaceAgentInfo { name: "ws".into(), namespace: "ns".into(), ..Default::default() };
        assert_eq!(serde_json::to_string(&info).unwrap(), r#"{"name":"ws","namespace":"ns"}"#);
    }

    #[test]
    fn settings_validation() {
        assert!(Settings::default().validate().is_ok());
        let bad = |full, partial| Settings {
            full_reconciliation_interval_seconds: full,
            partial_reconciliation_interval_seconds: partial,
        };
        assert!(bad(0, 1).validate().is_err());
        assert!(bad(10, 0).validate().is_err());
        assert!(bad(10, 10).validate().is_err());
        assert!(bad(10, 20).validate().is_err());
        assert!(bad(Settings::MAX_FULL_SECONDS, 1).validate().is_ok());
        let error = bad(1_000_000_000_000, 10).validate().unwrap_err();
        assert!(error.contains("out of bounds"), "{error}");
    }
}
