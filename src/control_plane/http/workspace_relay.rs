//! One request to a workspace, through one tunnel stream (#39): HTTP/1.1 to the workspace's
//! port, through hyper's client, the body streamed both ways (nothing buffered whole), and a
//! WebSocket or any other upgrade spliced both ways once the workspace agrees. Backpressure
//! holds end to end: hyper reads the next chunk only when the last was taken, and the
//! tunnel's windows and queues do the rest.

use super::tunnel_broker::WorkspaceStream;
use super::workspace_access::{Watch, Watched};
use super::workspace_pages::bad_gateway;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version, header};
use axum::response::Response;
use hyper_util::rt::TokioIo;

/// Headers of one hop, never passed on (RFC 9110 §7.6.1), besides those `Connection` names.
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
];

/// What the workspace is told of the request it is passed.
pub struct Forwarded<'a> {
    pub host: &'a str,
    pub scheme: &'static str,
    pub client: std::net::IpAddr,
    /// The host's own cookie, taken out.
    pub cookie: &'a str,
}

/// The request's cookies without the host's own: what the workspace is sent.
fn cookies_for_workspace(headers: &HeaderMap, name: &str) -> Option<HeaderValue> {
    let pairs = headers.get_all(header::COOKIE).iter().flat_map(|v| v.as_bytes().split(|b| *b == b';'));
    let kept: Vec<&[u8]> = pairs
        .map(<[u8]>::trim_ascii)
        .filter(|pair| !pair.is_empty() && pair.split(|b| *b == b'=').next() != Some(name.as_bytes()))
        .collect();
    if kept.is_empty() { None } else { HeaderValue::from_bytes(&kept.join(&b"; "[..])).ok() }
}

/// Pass `request` to the workspace through `stream`, and its answer back.
pub async fn forward(
    stream: WorkspaceStream,
    mut request: Request,
    forwarded: &Forwarded<'_>,
    watch: Watch,
) -> Response {
    let upgrade = upgrade_asked(request.headers());
    let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut request));
    prepare(&mut request, forwarded, upgrade);
    let (io, moved) = Watched::new(stream);
    let (mut sender, connection) =
        match hyper::client::conn::http1::Builder::new().handshake::<_, Body>(TokioIo::new(io)).await {
            Ok(handshake) => handshake,
            Err(error) => return bad_gateway(&error),
        };
    let watching = watch.clone();
    let idle = moved.clone();
    tokio::spawn(async move {
        tokio::select! {
            ended = connection.with_upgrades() => if let Err(error) = ended {
                tracing::debug!(%error, "a workspace stream ended with an error");
            },
            () = watching.until_idle(idle) => tracing::debug!("closed a workspace stream idle past the limit"),
        }
    });
    let mut response = match sender.send_request(request).await {
        Ok(response) => response,
        Err(error) => return bad_gateway(&error),
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            return bad_gateway(&"the workspace switched protocols unasked");
        };
        let workspace_upgrade = hyper::upgrade::on(&mut response);
        tokio::spawn(splice(client_upgrade, workspace_upgrade, watch, moved));
        let (parts, _) = response.into_parts();
        return Response::from_parts(parts, Body::empty());
    }
    strip_hop_by_hop(response.headers_mut(), false);
    keep_cookies_on_the_host(response.headers_mut());
    response.map(Body::new)
}

/// The `Upgrade` a request asks for (a WebSocket's, say), when it asks for one.
fn upgrade_asked(headers: &HeaderMap) -> Option<HeaderValue> {
    let asks = connection_tokens(headers).any(|token| token.eq_ignore_ascii_case("upgrade"));
    asks.then(|| headers.get(header::UPGRADE).cloned()).flatten()
}

/// What the `Connection` headers name, each trimmed.
fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    let values = headers.get_all(header::CONNECTION).iter().filter_map(|v| v.to_str().ok());
    values.flat_map(|v| v.split(',')).map(str::trim)
}

/// The request as the workspace gets it: HTTP/1.1 in origin form, its own Host, the client
/// in `X-Forwarded-*`, no hop-by-hop header and no host cookie.
fn prepare(request: &mut Request, forwarded: &Forwarded<'_>, upgrade: Option<HeaderValue>) {
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str()).to_string();
    if let Ok(uri) = path.parse() {
        *request.uri_mut() = uri;
    }
    *request.version_mut() = Version::HTTP_11;
    let headers = request.headers_mut();
    strip_hop_by_hop(headers, true);
    match cookies_for_workspace(headers, forwarded.cookie) {
        Some(cookies) => headers.insert(header::COOKIE, cookies),
        None => headers.remove(header::COOKIE),
    };
    // The host as the control plane routed it, whatever an absolute-form request said.
    if let Ok(host) = HeaderValue::from_str(forwarded.host) {
        headers.insert(header::HOST, host.clone());
        headers.insert(HeaderName::from_static("x-forwarded-host"), host);
    }
    headers.insert(HeaderName::from_static("x-forwarded-proto"), HeaderValue::from_static(forwarded.scheme));
    if let Ok(client) = HeaderValue::from_str(&forwarded.client.to_string()) {
        headers.insert(HeaderName::from_static("x-forwarded-for"), client);
    }
    if let Some(upgrade) = upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, upgrade);
    }
}

/// Remove one hop's headers: the fixed ones, those `Connection` names, and `Upgrade`.
fn strip_hop_by_hop(headers: &mut HeaderMap, request: bool) {
    let named: Vec<HeaderName> =
        connection_tokens(headers).filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok()).collect();
    for name in HOP_BY_HOP.iter().chain(&named) {
        headers.remove(name);
    }
    headers.remove(header::UPGRADE);
    if request {
        // Ours: a client's own would claim an address or a scheme of its choosing.
        for name in ["x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip", "forwarded"] {
            headers.remove(name);
        }
    }
}

/// A workspace may set cookies on its own host only: one with a `Domain` would reach every
/// sibling workspace, and above them the control plane's host when it shares the parent.
fn keep_cookies_on_the_host(headers: &mut HeaderMap) {
    let set: Vec<HeaderValue> = headers.get_all(header::SET_COOKIE).iter().cloned().collect();
    if set.is_empty() {
        return;
    }
    headers.remove(header::SET_COOKIE);
    for value in set {
        let lower = value.as_bytes().to_ascii_lowercase();
        let attributes = lower.split(|b| *b == b';').skip(1);
        let scoped = attributes.map(|a| a.trim_ascii()).any(|a| a.starts_with(b"domain"));
        if scoped {
            tracing::info!("dropped a workspace's Set-Cookie with a Domain attribute");
        } else {
            headers.append(header::SET_COOKIE, value);
        }
    }
}

/// Both upgraded connections, spliced until either ends or the stream is idle past the limit.
async fn splice(
    client: hyper::upgrade::OnUpgrade,
    workspace: hyper::upgrade::OnUpgrade,
    watch: Watch,
    moved: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    let (client, workspace) = match tokio::try_join!(client, workspace) {
        Ok(both) => both,
        Err(error) => return tracing::debug!(%error, "an upgrade through a workspace host failed"),
    };
    let stop = watch.until_idle(moved);
    super::upgrades::splice(TokioIo::new(client), TokioIo::new(workspace), stop, "an upgraded workspace connection")
        .await;
}
