//! The accept loop: plain HTTP or TLS (rustls), a header timeout that is also the idle timeout
//! of a kept-alive HTTP/1 connection, an idle timeout of HTTP/2's own (hyper has none, so a
//! peer that answers keep-alive pings would hold its connection for ever), a TLS handshake
//! bounded by the header timeout, a body timeout, a bound on open connections, and graceful
//! shutdown. axum's own `serve` offers none of these knobs.

use super::connection_limits::{Budget, ConnectionLimits, Limits};
use super::front_door::{address_key, client_ip, is_trusted};
use crate::control_plane::error::Error;
use crate::runtime::LockExt;
use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tower::ServiceExt;

#[derive(Clone)]
pub struct ServeOptions {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// From a connection's first byte, or the end of its last answer, to a whole request head.
    pub header_timeout: Duration,
    /// An HTTP/2 connection with no request open for this long is closed with a GOAWAY.
    pub http2_idle_timeout: Duration,
    /// Who may hold connections and requests ([`ConnectionLimits`]).
    pub limits: Limits,
    /// The agents' paths (reconcile, prerequisites): the requests that count in the agents'
    /// budget, and the only ones a reserve connection serves.
    pub agent_paths: Vec<String>,
    /// The workspaces' domain: a request to a host under it is a workspace's, whatever its
    /// path, and never counts in the agents' budget.
    pub workspaces_domain: Option<crate::control_plane::decisions::workspace_hosts::WorkspacesDomain>,
    /// Proxies whose X-Forwarded-For names the client (`--trusted-proxy`): a proxy's
    /// connections carry many clients, whose requests are counted by that header.
    pub trusted_proxies: Vec<IpAddr>,
}

/// A server config from PEM files: the certificate chain, and its private key.
pub fn tls_config(cert_file: &Path, key_file: &Path) -> Result<Arc<rustls::ServerConfig>, Error> {
    let unreadable = |path: &Path, e: &dyn std::fmt::Display| Error::Tls(format!("{}: {e}", path.display()));
    let chain = CertificateDer::pem_file_iter(cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| unreadable(cert_file, &e))?;
    if chain.is_empty() {
        return Err(unreadable(cert_file, &"no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| unreadable(key_file, &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(chain, key))
        .map_err(|e| Error::Tls(format!("{} with {}: {e}", cert_file.display(), key_file.display())))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serve `app` until `shutdown` completes, then let open requests finish (10 s at most).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    options: ServeOptions,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(Some(options.header_timeout));
    // HTTP/1 served by hyper's own builder: with upgrades (an agent's tunnel), and still with
    // its header timeout from the first byte (the auto builder's upgradeable connection reads
    // the protocol's preface first, with no timeout).
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1.timer(TokioTimer::new()).header_read_timeout(options.header_timeout);
    let tls = options.tls.map(tokio_rustls::TlsAcceptor::from);
    let limits = Arc::new(ConnectionLimits::new(options.limits));
    let agent_paths: Arc<[String]> = options.agent_paths.into();
    let trusted: Arc<[IpAddr]> = options.trusted_proxies.into();
    let workspaces_domain = Arc::new(options.workspaces_domain);
    // Each connection's task holds a receiver until it ends: a send asks every one to close
    // gracefully, and `closed()` is when the last has.
    let (stopping, _) = tokio::sync::watch::channel(());
    tokio::pin!(shutdown);
    loop {
        // A connection past the limits waits in the kernel's backlog, not in memory here.
        let room = tokio::select! {
            room = limits.room() => room.ok_or_else(|| Error::Serve(std::io::Error::other("the connection pools closed")))?,
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors, say: wait instead of spinning.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // A relayed keystroke or WebSocket frame goes at once, not batched by Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        let proxy = is_trusted(peer.ip(), &trusted);
        let Some(slot) = limits.place(room, address_key(peer.ip()), proxy) else {
            tracing::debug!(%peer, "closing a connection past its address's share");
            continue;
        };
        let (builder, http1, app, stop, tls) =
            (builder.clone(), http1.clone(), app.clone(), stopping.subscribe(), tls.clone());
        let (handshake_timeout, http2_idle_timeout) = (options.header_timeout, options.http2_idle_timeout);
        let (limits, agent_paths, trusted) = (limits.clone(), agent_paths.clone(), trusted.clone());
        let workspaces_domain = workspaces_domain.clone();
        tokio::spawn(async move {
            let budget = slot.budget;
            let _slot = slot;
            // The protocol is known before a byte is read, so that the header timeout runs from
            // the start: HTTP/1.1 in clear, and over TLS what ALPN agreed. (auto's sniffing of
            // a clear connection's first bytes has no timeout.)
            let (io, h2): (Box<dyn Io>, bool) = match tls {
                None => (Box::new(stream), false),
                Some(acceptor) => match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                        (Box::new(stream), h2)
                    }
                    Ok(Err(error)) => return tracing::debug!(%error, "TLS handshake failed"),
                    Err(_) => return tracing::debug!("TLS handshake timed out"),
                },
            };
            let activity = Arc::new(Activity::new());
            let connection = Connection {
                peer,
                budget,
                activity: activity.clone(),
                limits,
                agent_paths,
                trusted,
                workspaces_domain,
            };
            // A reserve connection that sends nothing is not held for HTTP/2's idle timeout.
            let http2_idle_timeout = if budget == Budget::Agents { handshake_timeout } else { http2_idle_timeout };
            let service = TowerToHyperService::new(tracking(connection, app));
            let ended = if h2 {
                let h2_only = builder.http2_only();
                let connection = h2_only.serve_connection(TokioIo::new(io), service);
                let idle = Some(http2_idle_timeout);
                until_closed(connection, |c| c.graceful_shutdown(), stop, &activity, idle)
                    .await
                    .map_err(|e| e.to_string())
            } else {
                let connection = http1.serve_connection(TokioIo::new(io), service).with_upgrades();
                until_closed(connection, |c| c.graceful_shutdown(), stop, &activity, None)
                    .await
                    .map_err(|e| e.to_string())
            };
            if let Err(error) = ended {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let _ = stopping.send(());
    if tokio::time::timeout(Duration::from_secs(10), stopping.closed()).await.is_err() {
        tracing::warn!("requests still open 10 s after shutdown began; closing them");
    }
    Ok(())
}

/// A connection's stream, in clear or TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Serve one connection until it ends. Server shutdown, and for HTTP/2 `idle` (no request open
/// for that long), close it gracefully: requests in flight finish, and an HTTP/2 peer learns
/// from the GOAWAY which of its requests were not taken, to send them again.
async fn until_closed<C, E>(
    connection: C,
    graceful_shutdown: impl Fn(std::pin::Pin<&mut C>),
    mut stop: tokio::sync::watch::Receiver<()>,
    activity: &Activity,
    idle: Option<Duration>,
) -> Result<(), E>
where
    C: std::future::Future<Output = Result<(), E>>,
{
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        tokio::select! {
            served = connection.as_mut() => return served,
            _ = stop.changed(), if !closing => {
                graceful_shutdown(connection.as_mut());
                closing = true;
            }
            () = idle_for(idle.map(|limit| (activity, limit))), if !closing && idle.is_some() => {
                tracing::debug!("closing an idle HTTP/2 connection");
                graceful_shutdown(connection.as_mut());
                closing = true;
            }
            () = activity.close.notified(), if !closing => {
                graceful_shutdown(connection.as_mut());
                closing = true;
            }
        }
    }
}

/// How many requests one connection has open, and since when it has had none; and a request
/// to close it once its open requests are answered.
struct Activity {
    state: Mutex<(usize, Instant)>,
    close: tokio::sync::Notify,
}

impl Activity {
    fn new() -> Self {
        Self { state: Mutex::new((0, Instant::now())), close: tokio::sync::Notify::new() }
    }

    /// Since when no request has been open; None while one is.
    fn idle_since(&self) -> Option<Instant> {
        let (open, since) = *self.state.lock_unpoisoned();
        (open == 0).then_some(since)
    }
}

/// The client a request is from, as the limits count it ([`address_key`] of [`client_ip`]):
/// decided once per request here, read by the sign-in limits.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub IpAddr);

/// One connection, as its requests see it.
#[derive(Clone)]
struct Connection {
    peer: std::net::SocketAddr,
    /// A reserve connection ([`Budget::Agents`]) serves the agents' paths only.
    budget: Budget,
    activity: Arc<Activity>,
    limits: Arc<ConnectionLimits>,
    agent_paths: Arc<[String]>,
    trusted: Arc<[IpAddr]>,
    workspaces_domain: Arc<Option<crate::control_plane::decisions::workspace_hosts::WorkspacesDomain>>,
}

/// `app`, for one connection: each request carries its [`ClientAddress`], counts in its
/// client's budget of requests in flight (429 past it; behind a trusted proxy, the client its
/// X-Forwarded-For names), and is counted open in the connection's activity. A reserve
/// connection answers anything but an agent's request with a 503, and closes after any answer
/// but a success, so that it cannot be held by asking again.
fn tracking(
    connection: Connection,
    app: Router,
) -> impl tower::Service<
    axum::http::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |mut request: axum::http::Request<hyper::body::Incoming>| {
        let open = OpenRequest::begin(&connection.activity);
        let host = super::front_door::request_host(request.uri(), request.headers());
        let workspace =
            connection.workspaces_domain.as_ref().as_ref().is_some_and(|d| host.is_some_and(|h| d.covers(h)));
        let agents = !workspace && connection.agent_paths.iter().any(|path| path == request.uri().path());
        let budget = if agents { Budget::Agents } else { Budget::Everyone };
        let reserve_only = connection.budget == Budget::Agents;
        let client = client_ip(Some(connection.peer.ip()), request.headers(), &connection.trusted)
            .unwrap_or(connection.peer.ip());
        let client = address_key(client);
        request.extensions_mut().insert(ClientAddress(client));
        let counted = connection.limits.begin_request(client, budget);
        let answer = (counted.is_some() && (agents || !reserve_only)).then(|| app.clone().oneshot(request));
        let connection = connection.clone();
        async move {
            let _open = open;
            let _counted = counted;
            let Some(answer) = answer else {
                if reserve_only && !agents {
                    connection.activity.close.notify_one();
                    return Ok(busy(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "every connection is taken; only agents are served now",
                    ));
                }
                tracing::debug!(peer = %connection.peer, "refusing a request past its address's share in flight");
                return Ok(busy(StatusCode::TOO_MANY_REQUESTS, "too many requests in flight from this address"));
            };
            let response = answer.await?;
            // An agent's tunnel answers 101 and goes on: not a failure to close the connection on.
            let served = response.status().is_success() || response.status() == StatusCode::SWITCHING_PROTOCOLS;
            if reserve_only && !served {
                connection.activity.close.notify_one();
            }
            Ok(response)
        }
    })
}

/// A refusal that asks to be retried in a second.
fn busy(status: StatusCode, message: &str) -> axum::response::Response {
    let body = axum::Json(crate::protocol::ErrorBody { error: message.into() });
    (status, [(axum::http::header::RETRY_AFTER, "1")], body).into_response()
}

/// One open request: counted from its head until its answer is ready (or it is dropped).
struct OpenRequest(Arc<Activity>);

impl OpenRequest {
    fn begin(activity: &Arc<Activity>) -> Self {
        activity.state.lock_unpoisoned().0 += 1;
        Self(activity.clone())
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        let mut state = self.0.state.lock_unpoisoned();
        *state = (state.0.saturating_sub(1), Instant::now());
    }
}

/// Resolves once `idle`'s connection has had no request open for its duration; never without one.
async fn idle_for(idle: Option<(&Activity, Duration)>) {
    let Some((activity, limit)) = idle else { return std::future::pending().await };
    loop {
        let wait = activity.idle_since().map_or(limit, |since| limit.saturating_sub(since.elapsed()));
        if wait.is_zero() {
            return;
        }
        tokio::time::sleep(wait).await;
    }
}
