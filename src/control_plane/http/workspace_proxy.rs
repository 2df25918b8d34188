//! A workspace's host (#39): every request to a host under `--workspaces-domain` comes here,
//! and never to the control plane's own routes. Its owner (or an admin) signed in to the
//! control plane is handed a one-time code for the host (`workspace_sign_in`), which the host
//! trades for its own cookie; then each request is a stream through the agent's tunnel to the
//! workspace's port, its body and answer streamed, a WebSocket spliced both ways.
//!
//! What the workspace serves is its user's code: none of the control plane's headers or
//! cookies go with it, and the host's cookie is taken out of what the workspace is sent.

use super::state::AppState;
use super::tunnel_broker::StreamError;
use super::workspace_access::{Recheck, WorkspaceHosts};
use super::workspace_admission::{Admission, Admitted, admit};
use super::workspace_host_auth::{AUTH_PATH, from_another_site, host_cookie_name, redeem, sign_in_first};
use super::workspace_pages::{
    agent_not_connected, cross_site, no_workspace, not_running, page, stream_refused, too_many_streams,
};
use super::workspace_relay::Forwarded;
use super::workspace_streams::{NotOpened, open_stream};
use crate::control_plane::decisions::access::Caller;
use crate::control_plane::decisions::workspace_hosts::WorkspaceHost;
use crate::control_plane::model::Workspace;
use crate::protocol::ActualState;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use std::sync::Arc;

/// Answer one request to a workspace's host.
pub async fn serve(state: Arc<AppState>, request: Request) -> Response {
    let Some(hosts) = state.workspace_hosts.as_ref() else { return page(StatusCode::NOT_FOUND, "Not found", "") };
    let named = super::front_door::request_host(request.uri(), request.headers());
    let Some(host) = named.and_then(|named| hosts.domain.workspace_host(named)) else {
        return no_workspace();
    };
    let host_name = host.name(&hosts.domain);
    if request.uri().path() == AUTH_PATH {
        return redeem(&state, hosts, &host_name, request.headers(), request.uri().query().unwrap_or_default()).await;
    }
    if from_another_site(&request, &hosts.origin(&host_name)) {
        return cross_site();
    }
    let Admitted { session, cookie, workspace } = match admit(&state, hosts, &host, &host_name, request.headers()).await
    {
        Ok(Admission::Admitted(admitted)) => *admitted,
        Ok(Admission::SignInFirst) => return sign_in_first(hosts, &host_name, &request),
        Ok(Admission::NoWorkspace) => return no_workspace(),
        Err(response) => return response,
    };
    let recheck = recheck(&state, cookie, &host, &host_name, &workspace);
    open(&state, hosts, &session.caller, &workspace, &host, &host_name, request, recheck).await
}

/// Whether the host's cookie still opens this workspace: its session live, the workspace the
/// same one and still the caller's to see. A database that does not answer keeps the stream.
fn recheck(
    state: &Arc<AppState>,
    cookie: String,
    host: &WorkspaceHost,
    host_name: &str,
    workspace: &Workspace,
) -> Recheck {
    let (state, host, host_name) = (state.clone(), host.clone(), host_name.to_string());
    let (agent, name) = (workspace.agent_id.clone(), workspace.name.clone());
    Arc::new(move || {
        let (state, cookie, host, host_name) = (state.clone(), cookie.clone(), host.clone(), host_name.clone());
        let (agent, name) = (agent.clone(), name.clone());
        Box::pin(async move {
            let session = match state.store.host_session(&cookie, &host_name).await {
                Ok(Some(session)) => session,
                Ok(None) => return false,
                Err(_) => return true,
            };
            match state.store.workspace_at(&host).await {
                Ok(Some(now)) => {
                    now.agent_id == agent && now.name == name && session.caller.may_see(now.owner_id.as_deref())
                }
                Ok(None) => false,
                Err(_) => true,
            }
        })
    })
}

/// Open a stream to the workspace's port and pass the request through it.
#[allow(clippy::too_many_arguments)]
async fn open(
    state: &Arc<AppState>,
    hosts: &WorkspaceHosts,
    caller: &Caller,
    workspace: &Workspace,
    host: &WorkspaceHost,
    host_name: &str,
    request: Request,
    recheck: Recheck,
) -> Response {
    if workspace.actual_state != ActualState::Running {
        return not_running(workspace);
    }
    let (stream, watch) = match open_stream(state, caller, workspace, host.port, recheck).await {
        Ok(opened) => opened,
        Err(NotOpened::TooMany(too_many)) => return too_many_streams(too_many),
        Err(NotOpened::Stream(StreamError::NotConnected)) => return agent_not_connected(),
        Err(NotOpened::Stream(StreamError::Open(error))) => return stream_refused(workspace, host.port, &error),
    };
    let client = state.client(request.extensions());
    let authority = format!("{host_name}{}", hosts.port_suffix);
    let forwarded =
        Forwarded { host: &authority, scheme: hosts.scheme, client, cookie: host_cookie_name(hosts.secure()) };
    super::workspace_relay::forward(stream, request, &forwarded, watch).await
}
