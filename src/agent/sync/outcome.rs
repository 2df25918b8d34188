//! What the loop shows for what happened: the `Synced` condition's outcome, a failed cycle's,
//! and where a workspace's failure Event goes.

use super::workspace::WorkspaceKey;
use crate::agent::error::Error;

/// Why the last cycle failed, or that it succeeded. Reasons are CamelCase, as Kubernetes
/// conditions expect; the message is stable for a repeated failure, so it is not rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncOutcome {
    pub ok: bool,
    pub reason: String,
    pub message: String,
}

impl SyncOutcome {
    pub fn starting() -> Self {
        Self { ok: false, reason: "Starting".into(), message: "no sync cycle has completed yet".into() }
    }
    pub fn synced() -> Self {
        Self { ok: true, reason: "Synced".into(), message: "the last sync cycle succeeded".into() }
    }
    pub fn failed(reason: &str, message: impl Into<String>) -> Self {
        Self { ok: false, reason: reason.into(), message: message.into() }
    }
}

/// The `Synced` condition after a failed cycle: the error's reason, and a message in the
/// words of whoever failed (the apiserver's own, for an API error).
pub fn failed_cycle(error: &Error) -> SyncOutcome {
    let message = match error {
        Error::Kube(e) => crate::agent::error::api_message(e),
        other => other.to_string(),
    };
    SyncOutcome::failed(error.reason(), message)
}

/// A failure Event's note. It hangs on the workspace's Deployment when there is one, which
/// `kubectl describe deployment` shows; else on the WorkspaceSyncStatus, where the note must
/// name the workspace.
pub fn failure_event_note(key: &WorkspaceKey, message: &str, on_deployment: bool) -> String {
    match on_deployment {
        true => message.to_string(),
        false => format!("workspace {key}: {message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::error::ControlPlaneError;

    #[test]
    fn a_failed_cycle_says_who_failed() {
        let timeout = failed_cycle(&Error::ControlPlane(ControlPlaneError::Timeout(std::time::Duration::from_secs(2))));
        assert_eq!(timeout.reason, "ControlPlaneTimeout");
        assert_eq!(timeout.message, "control plane: request timed out after 2s");
        let prerequisites =
            failed_cycle(&Error::Prerequisites(ControlPlaneError::Status { status: 404, body: "".into() }));
        assert_eq!(prerequisites.reason, "PrerequisitesFailed");
        assert!(!prerequisites.ok);
    }

    #[test]
    fn an_event_without_a_deployment_names_its_workspace() {
        let key = WorkspaceKey::new("ns", "ws");
        assert_eq!(failure_event_note(&key, "boom", true), "boom");
        assert_eq!(failure_event_note(&key, "boom", false), "workspace ns/ws: boom");
    }
}
