//! The accept loop: plain HTTP or TLS (rustls), a header timeout that is also the idle timeout
//! of a kept-alive connection, a TLS handshake bounded by the same, a body timeout, a bound on
//! open connections, and graceful shutdown. axum's own `serve` offers none of these knobs.

use super::error::Error;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

#[derive(Clone)]
pub struct ServeOptions {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// From a connection's first byte, or the end of its last answer, to a whole request head.
    pub header_timeout: Duration,
    /// From the head to the last byte of the body.
    pub body_timeout: Duration,
    pub max_connections: usize,
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
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(options.body_timeout));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(options.header_timeout);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(Some(options.header_timeout));
    let tls = options.tls.map(tokio_rustls::TlsAcceptor::from);
    let connections = Arc::new(tokio::sync::Semaphore::new(options.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        // A connection past the limit waits in the kernel's backlog, not in memory here.
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => permit.map_err(|e| Error::Serve(std::io::Error::other(e)))?,
            () = &mut shutdown => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Out of file descriptors, say: wait instead of spinning.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (builder, service, watcher, tls) =
            (builder.clone(), TowerToHyperService::new(app.clone()), graceful.watcher(), tls.clone());
        let handshake_timeout = options.header_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            // The protocol is known before a byte is read, so that the header timeout runs from
            // the start: HTTP/1.1 in clear, and over TLS what ALPN agreed. (auto's sniffing of
            // a clear connection's first bytes has no timeout.)
            let served = match tls {
                None => {
                    let builder = builder.http1_only();
                    watcher.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned()).await
                }
                Some(acceptor) => match tokio::time::timeout(handshake_timeout, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => {
                        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                        let builder = if h2 { builder.http2_only() } else { builder.http1_only() };
                        watcher.watch(builder.serve_connection(TokioIo::new(stream), service).into_owned()).await
                    }
                    Ok(Err(error)) => return tracing::debug!(%error, "TLS handshake failed"),
                    Err(_) => return tracing::debug!("TLS handshake timed out"),
                },
            };
            if let Err(error) = served {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(Duration::from_secs(10), graceful.shutdown()).await.is_err() {
        tracing::warn!("requests still open 10 s after shutdown began; closing them");
    }
    Ok(())
}
