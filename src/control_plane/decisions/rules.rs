//! The control plane's decisions, free of I/O (DESIGN §3): the actual state an agent info
//! implies, which workspaces an answer returns, when config goes with them, and the lifecycle.

use crate::protocol::{
    ActualState, DeploymentFacts, DesiredState, TerminationProgress, UpdateType, WorkspaceAgentInfo,
};

/// The actual state an agent info implies. The rules apply in order; the first match wins.
pub fn actual_state(info: &WorkspaceAgentInfo) -> ActualState {
    let facts = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.facts());
    reported_state(info, facts.as_ref())
}

/// [`actual_state`], with the Deployment info already read (`None`: absent or malformed).
pub fn reported_state(info: &WorkspaceAgentInfo, deployment: Option<&DeploymentFacts>) -> ActualState {
    use ActualState::*;
    match info.termination_progress {
        Some(TerminationProgress::Terminated) => return Terminated,
        _ if info.error_details.is_some() => return Error,
        Some(TerminationProgress::Terminating) => return Terminating,
        None => {}
    }
    let Some(deployment) = deployment else { return Unknown };
    deployment_state(deployment)
}

/// Rules 4–9, from the Deployment's spec and status.
fn deployment_state(deployment: &DeploymentFacts) -> ActualState {
    use ActualState::*;
    if deployment.conditions().is_none() {
        return Unknown;
    }
    let Some(progressing) = deployment.condition_reason("Progressing") else { return Unknown };
    let Some(replicas) = deployment.replicas() else { return Unknown };
    if progressing == "ProgressDeadlineExceeded" {
        return Failed;
    }
    if matches!(progressing, "NewReplicaSetCreated" | "FoundNewReplicaSet" | "ReplicaSetUpdated") {
        return match replicas {
            0 => Stopping,
            1 => Starting,
            _ => Unknown,
        };
    }
    let Some(available) = deployment.condition_reason("Available") else { return Unknown };
    if progressing != "NewReplicaSetAvailable" {
        return Unknown;
    }
    let available_replicas = deployment.available_replicas();
    let unavailable_replicas = deployment.unavailable_replicas();
    let minimum_available = available == "MinimumReplicasAvailable";
    if minimum_available && replicas == 0 && available_replicas == 0 {
        Stopped
    } else if minimum_available && replicas == available_replicas && unavailable_replicas == 0 {
        Running
    } else if minimum_available && replicas == 0 && available_replicas == 1 {
        Stopping
    } else if (minimum_available || available == "MinimumReplicasUnavailable")
        && replicas == 1
        && available_replicas == 0
    {
        Starting
    } else {
        Unknown
    }
}

/// Which resources an answer carries: all of them (a full reconcile, a new workspace, changed
/// pull secrets), or those GitLab marks for partial reconciliation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resources {
    All,
    Partial,
}

/// What the selection rules read of a workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    pub desired: DesiredState,
    pub actual: ActualState,
    pub desired_updated_at: i64,
    pub actual_updated_at: i64,
    pub responded_to_agent_at: Option<i64>,
    pub force_include_all_resources: bool,
}

impl Selection {
    /// Desired or actual changed since the agent last heard of it; never heard counts.
    pub fn changed_since_response(&self) -> bool {
        match self.responded_to_agent_at {
            None => true,
            Some(at) => self.desired_updated_at > at || self.actual_updated_at > at,
        }
    }

    pub fn termination_pending(&self) -> bool {
        self.desired == DesiredState::Terminated && self.actual != ActualState::Terminated
    }

    fn fully_terminated(&self) -> bool {
        self.desired == DesiredState::Terminated && self.actual == ActualState::Terminated
    }

    /// Whether the answer returns this workspace. `reported`: the agent just sent it.
    pub fn returned(&self, update_type: UpdateType, reported: bool) -> bool {
        match update_type {
            UpdateType::Full => !self.fully_terminated(),
            UpdateType::Partial => {
                self.changed_since_response()
                    || self.termination_pending()
                    || reported
                    || self.force_include_all_resources
            }
        }
    }

    /// Which resources its config carries: all on a full reconcile or when forced (a new
    /// workspace, changed pull secrets), else only those marked for partial reconciliation.
    pub fn resources(&self, update_type: UpdateType) -> Resources {
        if update_type == UpdateType::Full || self.force_include_all_resources {
            Resources::All
        } else {
            Resources::Partial
        }
    }

    /// Whether config goes with it; otherwise `config_to_apply` is `""`.
    pub fn include_config(&self, update_type: UpdateType) -> bool {
        update_type == UpdateType::Full
            || self.force_include_all_resources
            || self.changed_since_response()
            || self.termination_pending()
    }
}

/// Lifecycle limits (Rails' `WorkspacesLifecycleManager`), in milliseconds.
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle {
    pub max_running_ms: i64,
    pub max_stopped_ms: i64,
    /// The share of an agent's workspaces that the rules may terminate in one reconcile, in
    /// percent; at least one is always allowed. A clock that jumps ahead would otherwise end
    /// every stopped workspace at once.
    pub max_terminated_percent: u8,
}

impl Lifecycle {
    /// How many of `workspaces` the rules may terminate in one reconcile.
    pub fn termination_budget(&self, workspaces: usize) -> usize {
        let share = workspaces.saturating_mul(usize::from(self.max_terminated_percent.min(100))) / 100;
        share.max(1)
    }
}

/// The desired state after the lifecycle rules and the restart flow, if it changes.
pub fn next_desired(
    desired: DesiredState,
    actual: ActualState,
    desired_updated_at: i64,
    now: i64,
    limits: &Lifecycle,
) -> Option<DesiredState> {
    let age = now - desired_updated_at;
    match desired {
        DesiredState::RestartRequested if actual == ActualState::Stopped => Some(DesiredState::Running),
        DesiredState::Running if age > limits.max_running_ms => Some(DesiredState::Stopped),
        DesiredState::Stopped if age > limits.max_stopped_ms => Some(DesiredState::Terminated),
        _ => None,
    }
}

/// Replicas are 1 only when the workspace should run.
pub fn replicas(desired: DesiredState) -> i32 {
    i32::from(desired == DesiredState::Running)
}

#[cfg(test)]
mod tests;
