//! Who is asking the JSON API (a Bearer token: a user's personal token, or the admin token),
//! what they may reach, and the audit trail's record of what they did.

use super::state::{ApiError, AppState, bearer, not_found, unauthorized};
use crate::control_plane::decisions::access::Caller;
use crate::control_plane::model::{AuditEvent, Endpoint, Workspace};
use crate::protocol::ErrorBody;
use axum::Json;
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use std::net::IpAddr;
use std::sync::Arc;

/// The API's caller, from its Bearer token, never the page's cookie. An address that keeps
/// sending wrong tokens waits, as at the page's sign-in; the rates do not apply, since every
/// request carries a token.
async fn authenticate(state: &AppState, parts: &Parts) -> Result<Caller, Response> {
    let client = state.client(&parts.extensions);
    if let Err(refused) = state.sign_in_limits.waiting(client) {
        let (status, headers) = state.refused_sign_in(refused, client, "the API's token");
        let message = format!("too many wrong tokens from {client}; retry after {} s", refused.retry_after_seconds());
        return Err((status, headers, Json(ErrorBody { error: message })).into_response());
    }
    let given = bearer(&parts.headers).ok_or_else(|| unauthorized().into_response())?;
    match state.caller_by_token(given).await.map_err(IntoResponse::into_response)? {
        Some(caller) => {
            state.sign_in_limits.succeeded(client);
            Ok(caller)
        }
        None => {
            state.sign_in_limits.failed(client);
            // Bounded by the backoff above: an address that keeps failing is refused before this.
            state.audit_refused("", client, "api.authenticate", "a token that is not live").await;
            Err(unauthorized().into_response())
        }
    }
}

/// Any signed-in caller of the API: a user or the admin token. A handler that takes it runs
/// only for them, and its body, extracted after it, is read only then.
pub struct Asking(pub Caller);

impl axum::extract::FromRequestParts<Arc<AppState>> for Asking {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Response> {
        authenticate(state, parts).await.map(Asking)
    }
}

/// A caller who is an admin: the admin token, or a user with the admin role.
pub struct Admin(pub Caller);

impl axum::extract::FromRequestParts<Arc<AppState>> for Admin {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, Response> {
        let caller = authenticate(state, parts).await?;
        if caller.is_admin() { Ok(Admin(caller)) } else { Err(admins_only().into_response()) }
    }
}

pub fn admins_only() -> ApiError {
    ApiError(StatusCode::FORBIDDEN, "only an admin may do this".into())
}

/// The answer for a workspace that does not exist and for one the caller may not see: the
/// same, so that guessing names tells nothing.
pub fn no_workspace(agent: &str, name: &str) -> ApiError {
    not_found(format!("no workspace {name:?} for agent {agent:?}"))
}

/// The workspace, when it exists and `caller` may see it; else [`no_workspace`].
pub async fn visible_workspace(
    state: &AppState,
    caller: &Caller,
    agent: &str,
    name: &str,
) -> Result<Workspace, ApiError> {
    match state.store.workspace(agent, name).await? {
        Some(workspace) if caller.may_see(workspace.owner_id.as_deref()) => Ok(shown(state, workspace)),
        _ => Err(no_workspace(agent, name)),
    }
}

/// A workspace the caller may see, and its devfile as its user wrote it (for one made from an
/// image, the devfile that image stands for; then `true`), read together: the devfile shown
/// is the one of the workspace whose owner was checked.
pub async fn visible_devfile(
    state: &AppState,
    caller: &Caller,
    agent: &str,
    name: &str,
) -> Result<(Workspace, String, bool), ApiError> {
    use crate::control_plane::decisions::devfile::devfile_of_image;
    match state.store.workspace_with_devfile(agent, name).await? {
        Some((workspace, devfile)) if caller.may_see(workspace.owner_id.as_deref()) => {
            let from_image = devfile.is_none();
            let devfile = devfile.unwrap_or_else(|| {
                devfile_of_image(&workspace.image, workspace.cpu.as_deref(), workspace.memory.as_deref())
            });
            Ok((workspace, devfile, from_image))
        }
        _ => Err(no_workspace(agent, name)),
    }
}

/// The workspace as the API and the page show it: with its declared ports and their URLs,
/// and its devfile's components.
pub fn shown(state: &AppState, mut workspace: Workspace) -> Workspace {
    use crate::control_plane::decisions::config_builder::{DECLARED_PORTS, SSH_PORT};
    use crate::control_plane::model::ComponentShown;
    let hosts = state.workspace_hosts.as_deref();
    // SSH is no web page: `wsync workspaces ssh` reaches it.
    let declared: Vec<(&str, u16, bool)> = match &workspace.devfile {
        Some(devfile) => devfile.declared_ports(),
        None => DECLARED_PORTS.iter().map(|(name, port)| (*name, *port, *port != SSH_PORT)).collect(),
    };
    let endpoints = declared
        .into_iter()
        .map(|(name, port, opens)| Endpoint {
            name: name.to_string(),
            port,
            url: hosts.filter(|_| opens).map(|hosts| hosts.url(&workspace.agent_id, &workspace.name, port)),
        })
        .collect();
    workspace.endpoints = endpoints;
    if let Some(devfile) = &workspace.devfile {
        let summaries = devfile.components.iter().map(|component| (component.name.clone(), component.summary()));
        workspace.components =
            summaries.map(|(name, (kind, detail))| ComponentShown { name, kind: kind.into(), detail }).collect();
    }
    workspace
}

/// What an audit entry is about.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    Nothing,
    Agent(&'a str),
    Workspace(&'a str, &'a str),
}

impl AppState {
    /// Who a Bearer token names: a user's live personal token, or the admin token.
    pub async fn caller_by_token(&self, token: &str) -> Result<Option<Caller>, ApiError> {
        if let Some(user) = self.store.user_by_api_token(token).await? {
            return Ok(Some(Caller::User(user)));
        }
        Ok(self.is_admin(token).await?.then_some(Caller::AdminToken))
    }

    /// Record a write that was done. A trail that cannot be written is logged, loudly: the
    /// write itself stands.
    pub async fn audit(&self, caller: &Caller, client: IpAddr, action: &str, target: Target<'_>, detail: &str) {
        let event = event(caller.user_id(), caller.name(), client, action, "ok", target, detail);
        self.keep(event).await;
    }

    /// Record a refusal that matters: a failed sign-in, a disabled user turned away.
    pub async fn audit_refused(&self, tried_as: &str, client: IpAddr, action: &str, detail: &str) {
        self.keep(event(None, tried_as, client, action, "refused", Target::Nothing, detail)).await;
    }

    async fn keep(&self, event: AuditEvent) {
        let action = event.action.clone();
        if let Err(error) = self.store.record(event).await {
            tracing::error!(%error, action, "the audit trail could not be written");
            self.metrics.audit_write_failed();
        }
    }
}

fn event(
    actor_id: Option<&str>,
    actor: &str,
    client: IpAddr,
    action: &str,
    outcome: &str,
    target: Target<'_>,
    detail: &str,
) -> AuditEvent {
    let (agent_id, workspace) = match target {
        Target::Nothing => (None, None),
        Target::Agent(agent) => (Some(agent.to_string()), None),
        Target::Workspace(agent, name) => (Some(agent.to_string()), Some(name.to_string())),
    };
    AuditEvent {
        id: String::new(),
        at: 0,
        actor_id: actor_id.map(String::from),
        actor: actor.chars().take(100).collect(),
        action: action.into(),
        outcome: outcome.into(),
        agent_id,
        workspace,
        client: client.to_string(),
        detail: detail.into(),
    }
}
