//! The actions both the JSON API and the page take, for a caller they have authenticated;
//! each is recorded in the audit trail.

use super::callers::{Target, no_workspace, visible_workspace};
use super::state::{ApiError, AppState, bad_request, exists, not_found};
use super::validation::{desired_for_action, is_dns_label, is_env_name, is_owner_name};
use crate::control_plane::decisions::access::{Caller, UserRef, is_token_name, token_days};
use crate::control_plane::decisions::agent_config::AgentConfig;
use crate::control_plane::decisions::{config_builder, devfile};
use crate::control_plane::model::{ApiToken, LOCAL_ISSUER, NewWorkspace, OrphanFate, User, Workspace};
use std::net::IpAddr;

/// Check a new workspace, and say whose it is: a user's own, always; an admin's, the user
/// `owner` names, or (a name that matches no user) nobody's but the admins'.
pub async fn admit_new_workspace(state: &AppState, caller: &Caller, new: &mut NewWorkspace) -> Result<(), ApiError> {
    if !is_dns_label(&new.name) {
        return Err(bad_request("workspace name must be a DNS label: lowercase letters, digits and '-'"));
    }
    if let Some(devfile) = &new.devfile {
        if !new.image.trim().is_empty() || new.cpu.is_some() || new.memory.is_some() {
            return Err(bad_request(
                "a devfile names its images and resources: give it without an image, cpu or memory",
            ));
        }
        let mut accepted = devfile::accept(devfile.as_bytes()).map_err(|refusal| bad_request(refusal.to_string()))?;
        accepted.devfile.project_cloner_image = Some(state.project_cloner_image.clone());
        new.image = accepted
            .devfile
            .main_component()
            .and_then(|c| c.container.as_ref())
            .map(|c| c.image.clone())
            .unwrap_or_default();
        new.devfile_accepted = Some(std::sync::Arc::new(accepted.devfile));
    }
    if new.image.trim().is_empty() {
        return Err(bad_request("an image or a devfile is required"));
    }
    if let Some(name) = new.env.keys().find(|name| !is_env_name(name)) {
        return Err(bad_request(format!(
            "environment variable {name:?}: a name is letters, digits, '_', '.' and '-', not starting with a digit"
        )));
    }
    if new.owner.as_deref().is_some_and(|owner| !is_owner_name(owner)) {
        return Err(bad_request("owner must be a username: letters, digits, '_', '.' and '-', at most 255"));
    }
    match caller.user() {
        Some(user) if !caller.is_admin() || new.owner.is_none() => {
            if new.owner.as_deref().is_some_and(|owner| owner != user.username) {
                return Err(bad_request("only an admin creates a workspace for someone else"));
            }
            new.owner = Some(user.username.clone());
            new.owner_id = Some(user.id.clone());
        }
        _ => {
            // By name, only a user an admin created: a provider's user picked their own name.
            let owner = match &new.owner {
                Some(name) => state.store.user_by_name(name).await?.filter(|u| u.issuer == LOCAL_ISSUER),
                None => None,
            };
            new.owner_id = owner.map(|user| user.id);
        }
    }
    Ok(())
}

/// Create a workspace on `agent` (which the caller has found to exist): checked and owned as
/// [`admit_new_workspace`] says; audited.
pub async fn create_workspace(
    state: &AppState,
    caller: &Caller,
    client: IpAddr,
    agent: &str,
    mut new: NewWorkspace,
) -> Result<Workspace, ApiError> {
    admit_new_workspace(state, caller, &mut new).await?;
    if new.devfile_accepted.is_some() {
        // Built once now, under the agent's settings, so that what is stored is what builds.
        let settings = state.store.agent_config(agent).await?.unwrap_or_else(AgentConfig::before_settings);
        let namespace = crate::control_plane::model::workspace_namespace(agent, &new.name);
        let trial = Workspace::created(agent, &namespace, new.clone(), settings.into(), 0);
        let refused = config_builder::refused_devfile(&trial, &state.pipeline.label_key);
        if !refused.is_empty() {
            return Err(bad_request(format!(
                "The devfile cannot be built under the agent's settings:\n  {}",
                refused.join("\n  ")
            )));
        }
    }
    let workspace = state.store.create_workspace(agent, &new).await?;
    state.audit(caller, client, "workspace.create", Target::Workspace(agent, &new.name), &new.image).await;
    Ok(workspace)
}

/// A token belongs to a user; the admin token has none of its own.
pub fn own_user(caller: &Caller) -> Result<&UserRef, ApiError> {
    caller.user().ok_or_else(|| bad_request("the admin token has no personal tokens; sign in as a user"))
}

/// A personal token for the caller, its name and life checked; the secret, shown once; audited.
pub async fn create_token(
    state: &AppState,
    caller: &Caller,
    client: IpAddr,
    name: &str,
    days: Option<u32>,
) -> Result<(ApiToken, String), ApiError> {
    let user = own_user(caller)?;
    if !is_token_name(name.trim()) {
        return Err(bad_request("a token's name is 1 to 100 characters, none of them control characters"));
    }
    let days = token_days(days).map_err(bad_request)?;
    let (token, secret) = state.store.create_api_token(user, name.trim(), days).await?;
    state.audit(caller, client, "token.create", Target::Nothing, &token.name).await;
    Ok((token, secret))
}

/// Revoke one of `user`'s live tokens; audited.
pub async fn revoke_token(
    state: &AppState,
    caller: &Caller,
    client: IpAddr,
    user: &UserRef,
    id: &str,
) -> Result<(), ApiError> {
    if !state.store.revoke_api_token(&user.id, id).await? {
        return Err(not_found(format!("no live token {id:?} of yours")));
    }
    state.audit(caller, client, "token.revoke", Target::Nothing, id).await;
    Ok(())
}

/// `disable` or `enable` a user, for an admin; audited.
pub async fn set_user_disabled(
    state: &AppState,
    caller: &Caller,
    client: IpAddr,
    (name, action): (String, String),
) -> Result<User, ApiError> {
    let disabled = match action.as_str() {
        "disable" => true,
        "enable" => false,
        _ => return Err(not_found(format!("unknown action {action:?}; use disable or enable"))),
    };
    let user = state.store.set_user_disabled(&name, disabled).await?;
    let user = user.ok_or_else(|| not_found(format!("no user {name:?}")))?;
    state.audit(caller, client, &format!("user.{action}"), Target::Nothing, &name).await;
    Ok(user)
}

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
