//! `GET /api/v1/internal/streams` (#39): a peer process, without the agent's tunnel, asks the
//! process that holds it for a stream, signed with the secret the processes share, for this
//! process and that stream, within 30 s. The stream is opened on the tunnel, the connection
//! becomes it, and it is closed once idle past the streams' idle timeout.

use super::state::AppState;
use super::tunnel_broker::{AGENT_HEADER, FORWARD_PROTOCOL};
use super::upgrades::{splice, switching_to};
use super::workspace_access::{Watched, idle_for};
use crate::tunnel::OpenStream;
use crate::tunnel::transport::{OPEN_HEADER, OpenError, REFUSAL_HEADER};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use std::sync::Arc;

pub async fn forward(State(state): State<Arc<AppState>>, mut request: Request) -> Response {
    let agent = request.headers().get(AGENT_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let asked = request.headers().get(OPEN_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !state.broker.verifies(request.headers(), &agent, asked, state.store.now()) {
        tracing::warn!(%agent, "refused a forwarded stream that is not signed for this process, now");
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let open = match OpenStream::parse(asked.as_bytes()) {
        Ok(open) => open,
        Err(refusal) => return (StatusCode::BAD_REQUEST, refusal.to_string()).into_response(),
    };
    let Some(opener) = state.tunnels.opener(&agent) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "this process no longer holds the agent's tunnel").into_response();
    };
    let stream = match opener.open(&open).await {
        Ok(stream) => stream,
        Err(OpenError::Refused { label, message }) => {
            let mut refused = (StatusCode::FORBIDDEN, message).into_response();
            if let Ok(label) = HeaderValue::from_str(&label) {
                refused.headers_mut().insert(REFUSAL_HEADER, label);
            }
            return refused;
        }
        Err(OpenError::Busy) => return (StatusCode::TOO_MANY_REQUESTS, "the agent's tunnel is full").into_response(),
        Err(error) => return (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    };
    tracing::info!(%agent, namespace = %open.namespace, workspace = %open.workspace, port = open.port, "opened a forwarded stream");
    let idle = state.streams.limits.idle_timeout;
    let upgraded = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else { return };
        let (peer, moved) = Watched::new(TokioIo::new(upgraded));
        splice(peer, stream, idle_for(moved, idle), "a forwarded stream").await;
    });
    switching_to(FORWARD_PROTOCOL)
}
