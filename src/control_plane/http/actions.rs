//! The actions both the JSON API and the page take, for a caller they have authenticated;
//! each is recorded in the audit trail.

use super::callers::{Target, no_workspace, visible_workspace};
use super::state::{ApiError, AppState, bad_request, exists, not_found};
use super::validation::desired_for_action;
use crate::control_plane::decisions::access::Caller;
use crate::control_plane::model::{OrphanFate, Workspace};
use std::net::IpAddr;

/// Set a workspace's desired state by an action's name, for a caller who may see it; the
/// audit trail records it.
pub async fn set_desired(
    state: &AppState,
    caller: &Caller,
    client: IpAddr,
    (agent, name, action): (String, String, String),
) -> Result<Workspace, ApiError> {
    let desired = desired_for_action(&action)
        .ok_or_else(|| not_found(format!("unknown action {action:?}; use start, stop, restart or terminate")))?;
    visible_workspace(state, caller, &agent, &name).await?;
    let workspace = state.store.set_desired(&agent, &name, desired).await?;
    let workspace = workspace.ok_or_else(|| no_workspace(&agent, &name))?;
    state.audit(caller, client, &format!("workspace.{action}"), Target::Workspace(&agent, &name), "").await;
    Ok(workspace)
}

/// `adopt` (with the image it runs, which the agent's report does not carry) or `terminate`;
/// the caller is an admin.
pub async fn settle_orphan(
    state: &AppState,
    caller: &Caller,
    client: IpAddr,
    (agent, namespace, name, action): (String, String, String, String),
    image: String,
) -> Result<Workspace, ApiError> {
    exists(state, &agent).await?;
    let fate = match action.as_str() {
        "adopt" if image.trim().is_empty() => return Err(bad_request("adopting needs the image the workspace runs")),
        "adopt" => OrphanFate::Adopt { image: image.trim().to_string() },
        "terminate" => OrphanFate::Terminate,
        _ => return Err(not_found(format!("unknown action {action:?}; use adopt or terminate"))),
    };
    let workspace = state.store.settle_orphan(&agent, &namespace, &name, fate).await?;
    let workspace = workspace.ok_or_else(|| not_found(format!("no orphan {namespace}/{name} for agent {agent:?}")))?;
    state.audit(caller, client, &format!("orphan.{action}"), Target::Workspace(&agent, &name), &namespace).await;
    Ok(workspace)
}
