//! A workspace's declared port as a byte stream, for the CLI (#39): `wsync workspaces
//! port-forward` and `wsync workspaces ssh`. `GET …/workspaces/{name}/ports/{port}` with
//! `Upgrade: wsync-stream` and a Bearer token of someone who may see the workspace answers
//! 101, and the connection is then the workspace's port, through the agent's tunnel.

use super::callers::{Asking, visible_workspace};
use super::state::{ApiError, ApiResult, AppState};
use super::tunnel_broker::StreamError;
use super::workspace_access::{Recheck, TooManyStreams, Watch, Watched};
use crate::protocol::ActualState;
use crate::tunnel::OpenStream;
use crate::tunnel::transport::OpenError;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
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
    let asked = request.headers().get(header::UPGRADE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !asked.eq_ignore_ascii_case(STREAM_PROTOCOL) {
        let said = format!("a port is opened as an HTTP/1.1 upgrade: send Upgrade: {STREAM_PROTOCOL}");
        return Ok((StatusCode::UPGRADE_REQUIRED, [(header::UPGRADE, STREAM_PROTOCOL)], said).into_response());
    }
    if workspace.actual_state != ActualState::Running {
        let said = format!("workspace {name:?} is {}; start it first", workspace.actual_state.as_str());
        return Err(ApiError(StatusCode::CONFLICT, said));
    }
    let who = caller.user_id().unwrap_or(crate::control_plane::decisions::access::ADMIN_TOKEN_ACTOR);
    let permit = state.streams.limits.admit(who, &agent, &name).map_err(|too_many| {
        let said = match too_many {
            TooManyStreams::User(n) => format!("you have {n} streams open to workspaces, the most allowed"),
            TooManyStreams::Workspace(n) => format!("workspace {name:?} has {n} streams open, the most allowed"),
        };
        ApiError(StatusCode::TOO_MANY_REQUESTS, said)
    })?;
    let open = OpenStream { namespace: workspace.namespace.clone(), workspace: name.clone(), port };
    let stream = match state.broker.open(&state.store, &state.tunnels, &agent, &open).await {
        Ok(stream) => stream,
        Err(StreamError::NotConnected) => {
            let said = format!("agent {agent:?} is not connected to the control plane now; retry in a moment");
            return Err(ApiError(StatusCode::SERVICE_UNAVAILABLE, said));
        }
        Err(StreamError::Open(error)) => return Err(refused(&name, port, &error)),
    };
    state.streams.activity.touch(&agent, &name);
    let watch = Watch::new(state.streams.clone(), &agent, &name, permit, recheck(&state, &request, &agent, &name));
    let upgraded = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else { return };
        let (mut stream, moved) = Watched::new(stream);
        let mut client = TokioIo::new(upgraded);
        tokio::select! {
            copied = tokio::io::copy_bidirectional(&mut client, &mut stream) => if let Err(error) = copied {
                tracing::debug!(%error, "a port stream ended with an error");
            },
            () = watch.until_idle(moved) => tracing::debug!("closed a port stream idle past the limit"),
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    response.headers_mut().insert(header::UPGRADE, HeaderValue::from_static(STREAM_PROTOCOL));
    Ok(response)
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
