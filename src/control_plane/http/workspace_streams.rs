//! A workspace's declared port as a byte stream, for the CLI (#39): `wsync workspaces
//! port-forward` and `wsync workspaces ssh`. `GET …/workspaces/{name}/ports/{port}` with
//! `Upgrade: wsync-stream` and a Bearer token of someone who may see the workspace answers
//! 101, and the connection is then the workspace's port, through the agent's tunnel.

use super::callers::{Asking, visible_workspace};
use super::state::{ApiError, ApiResult, AppState};
use super::tunnel_broker::{StreamError, WorkspaceStream};
use super::upgrades::{refused_unless, splice, switching_to};
use super::workspace_access::{Recheck, TooManyStreams, Watch, Watched};
use crate::control_plane::decisions::access::Caller;
use crate::control_plane::model::Workspace;
use crate::protocol::ActualState;
use crate::tunnel::OpenStream;
use crate::tunnel::transport::OpenError;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::routing::get;
use hyper_util::rt::TokioIo;
use std::sync::Arc;

/// The `Upgrade` protocol the CLI asks for.
pub const STREAM_PROTOCOL: &str = "wsync-stream";

pub fn router() -> axum::Router<Arc<AppState>> {
    axum::Router::new().route("/api/v1/agents/{agent}/workspaces/{name}/ports/{port}", get(open_port))
}

async fn open_port(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    Path((agent, name, port)): Path<(String, String, u16)>,
    mut request: Request,
) -> ApiResult {
    let workspace = visible_workspace(&state, &caller, &agent, &name).await?;
    if let Some(refused) = refused_unless(request.headers(), STREAM_PROTOCOL, "a port") {
        return Ok(refused);
    }
    if workspace.actual_state != ActualState::Running {
        let said = format!("workspace {name:?} is {}; start it first", workspace.actual_state.as_str());
        return Err(ApiError(StatusCode::CONFLICT, said));
    }
    let recheck = recheck(&state, &request, &agent, &name);
    let (stream, watch) = open_stream(&state, &caller, &workspace, port, recheck).await.map_err(|not| match not {
        NotOpened::TooMany(TooManyStreams::User(n)) => ApiError(
            StatusCode::TOO_MANY_REQUESTS,
            format!("you have {n} streams open to workspaces, the most allowed"),
        ),
        NotOpened::TooMany(TooManyStreams::Workspace(n)) => ApiError(
            StatusCode::TOO_MANY_REQUESTS,
            format!("workspace {name:?} has {n} streams open, the most allowed"),
        ),
        NotOpened::Stream(StreamError::NotConnected) => {
            let said = format!("agent {agent:?} is not connected to the control plane now; retry in a moment");
            ApiError(StatusCode::SERVICE_UNAVAILABLE, said)
        }
        NotOpened::Stream(StreamError::Open(error)) => refused(&name, port, &error),
    })?;
    let upgraded = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else { return };
        let (stream, moved) = Watched::new(stream);
        splice(TokioIo::new(upgraded), stream, watch.until_idle(moved), "a port stream").await;
    });
    Ok(switching_to(STREAM_PROTOCOL))
}

/// Why no stream to a workspace was opened, for its route to say in its own words.
pub enum NotOpened {
    TooMany(TooManyStreams),
    Stream(StreamError),
}

/// A stream to `port` of `workspace` for `caller`, through its host or the CLI: a place in
/// the limits, the stream (through this process's tunnel or its holder's), the workspace
/// marked active, and what watches the stream while it lives.
pub async fn open_stream(
    state: &Arc<AppState>,
    caller: &Caller,
    workspace: &Workspace,
    port: u16,
    recheck: Recheck,
) -> Result<(WorkspaceStream, Watch), NotOpened> {
    let (agent, name) = (&workspace.agent_id, &workspace.name);
    let who = caller.user_id().unwrap_or(crate::control_plane::decisions::access::ADMIN_TOKEN_ACTOR);
    let permit = state.streams.limits.admit(who, agent, name).map_err(NotOpened::TooMany)?;
    let open = OpenStream { namespace: workspace.namespace.clone(), workspace: name.clone(), port };
    let stream = state.broker.open(&state.store, &state.tunnels, agent, &open).await.map_err(NotOpened::Stream)?;
    state.streams.activity.touch(agent, name);
    Ok((stream, Watch::new(state.streams.clone(), agent, name, permit, recheck)))
}

/// Whether the token that opened the stream still opens the workspace. A database that does
/// not answer keeps the stream.
fn recheck(state: &Arc<AppState>, request: &Request, agent: &str, name: &str) -> Recheck {
    let token = super::state::bearer(request.headers()).unwrap_or_default().to_string();
    let (state, agent, name) = (state.clone(), agent.to_string(), name.to_string());
    Arc::new(move || {
        let (state, token, agent, name) = (state.clone(), token.clone(), agent.clone(), name.clone());
        Box::pin(async move {
            match state.caller_by_token(&token).await {
                Ok(Some(caller)) => match state.store.workspace(&agent, &name).await {
                    Ok(Some(workspace)) => caller.may_see(workspace.owner_id.as_deref()),
                    Ok(None) => false,
                    Err(_) => true,
                },
                Ok(None) => false,
                Err(_) => true,
            }
        })
    })
}

fn refused(name: &str, port: u16, error: &OpenError) -> ApiError {
    match error {
        OpenError::Refused { label, .. } if label == "undeclared_port" => {
            ApiError(StatusCode::NOT_FOUND, format!("workspace {name:?} declares no port {port}"))
        }
        OpenError::Refused { label, .. } if label == "no_pod" => {
            ApiError(StatusCode::SERVICE_UNAVAILABLE, format!("workspace {name:?} has no ready Pod yet"))
        }
        OpenError::Busy => ApiError(StatusCode::TOO_MANY_REQUESTS, "the agent's tunnel carries all it may".into()),
        other => ApiError(StatusCode::BAD_GATEWAY, format!("port {port} of workspace {name:?} did not open: {other}")),
    }
}
