//! What every HTTP/1.1 upgrade the control plane takes shares, below the routes that take
//! them (an agent's tunnel, a CLI's port, a forward between processes, a workspace's
//! WebSocket): the refusal of a request that asks for another protocol, the 101, and the
//! splice of two connections until either ends or the caller says stop.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::io::{AsyncRead, AsyncWrite};

/// A 426 naming `protocol`, unless the request's `Upgrade` asks for it; `what` says what is
/// opened so (`"the tunnel"`, `"a port"`).
pub fn refused_unless(headers: &HeaderMap, protocol: &'static str, what: &str) -> Option<Response> {
    let asked = headers.get(header::UPGRADE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if asked.eq_ignore_ascii_case(protocol) {
        return None;
    }
    let said = format!("{what} is an HTTP/1.1 upgrade: send Upgrade: {protocol}");
    Some((StatusCode::UPGRADE_REQUIRED, [(header::UPGRADE, protocol)], said).into_response())
}

/// The 101 that switches to `protocol`.
pub fn switching_to(protocol: &'static str) -> Response {
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    response.headers_mut().insert(header::UPGRADE, HeaderValue::from_static(protocol));
    response
}

/// Both connections, both ways, until either ends or `stop` resolves (an idle timeout, a
/// revoked caller); `what` names them in the log.
pub async fn splice(
    mut one: impl AsyncRead + AsyncWrite + Unpin,
    mut other: impl AsyncRead + AsyncWrite + Unpin,
    stop: impl Future<Output = ()>,
    what: &str,
) {
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut one, &mut other) => if let Err(error) = copied {
            tracing::debug!(%error, what, "a spliced connection ended with an error");
        },
        () = stop => tracing::debug!(what, "closed a spliced connection: idle past the limit, or its caller may no longer hold it"),
    }
}
