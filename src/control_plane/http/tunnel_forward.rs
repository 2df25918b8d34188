//! `GET /api/v1/internal/streams` (#39): a peer process, without the agent's tunnel, asks the
//! process that holds it for a stream, showing this process's forward token. The stream is
//! opened on the tunnel and the connection becomes it. Only the holder's token opens one: it
//! is random, per process, and known only through the database.

use super::state::{AppState, bearer};
use super::tunnel_broker::{AGENT_HEADER, FORWARD_PROTOCOL};
use crate::tunnel::OpenStream;
use crate::tunnel::transport::{OPEN_HEADER, OpenError, REFUSAL_HEADER};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use std::sync::Arc;

pub async fn forward(State(state): State<Arc<AppState>>, mut request: Request) -> Response {
    if !state.broker.takes(bearer(request.headers()).unwrap_or_default()) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let agent = request.headers().get(AGENT_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let asked = request.headers().get(OPEN_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    let open = match OpenStream::parse(asked) {
        Ok(open) => open,
        Err(refusal) => return (StatusCode::BAD_REQUEST, refusal.to_string()).into_response(),
    };
    let Some(opener) = state.tunnels.opener(&agent) else {
        return (StatusCode::SERVICE_UNAVAILABLE, "this process no longer holds the agent's tunnel").into_response();
    };
    let mut stream = match opener.open(&open).await {
        Ok(stream) => stream,
        Err(OpenError::Refused { label, message }) => {
            let mut refused = (StatusCode::FORBIDDEN, message).into_response();
            if let Ok(label) = HeaderValue::from_str(&label) {
                refused.headers_mut().insert(REFUSAL_HEADER, label);
            }
            return refused;
        }
        Err(error) => return (StatusCode::BAD_GATEWAY, error.to_string()).into_response(),
    };
    let upgraded = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else { return };
        let mut peer = TokioIo::new(upgraded);
        if let Err(error) = tokio::io::copy_bidirectional(&mut peer, &mut stream).await {
            tracing::debug!(%error, "a forwarded stream ended with an error");
        }
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    response.headers_mut().insert(header::UPGRADE, HeaderValue::from_static(FORWARD_PROTOCOL));
    response
}
