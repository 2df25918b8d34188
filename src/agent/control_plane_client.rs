//! The agent's HTTP client for the control plane (DESIGN §1).
//!
//! The bearer token comes from a file (a mounted Secret), is re-read when the file changes,
//! and never appears in logs or errors.
//!
//! The control plane is not trusted (DESIGN §2, "Trust"): TLS is verified, plain HTTP only
//! reaches loopback unless the operator allows it, redirects are refused, and a body is read
//! only up to `--max-response-bytes`, as it streams.

use crate::agent::error::{ControlPlaneError, Error};
use crate::agent::sync::answer::{self, Answer};
use crate::protocol::{Prerequisites, RECONCILE_SUCCESS, ReconcileRequest};
use crate::runtime::LockExt;
use reqwest::{StatusCode, Url};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// How much of an error body is kept for the operator to read.
const BODY_EXCERPT_BYTES: usize = 256;
/// What a body without a Content-Length is first given room for.
const FIRST_READ_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone)]
pub struct ControlPlaneConfig {
    pub base_url: Url,
    pub reconcile_path: String,
    pub prerequisites_path: String,
    pub token_file: PathBuf,
    pub ca_file: Option<PathBuf>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    pub max_response_bytes: usize,
    /// Accept `http://` to a host that is not loopback.
    pub allow_insecure: bool,
}

impl ControlPlaneConfig {
    /// TLS, or plain HTTP to loopback, or plain HTTP the operator allowed.
    pub fn check_transport(&self) -> Result<(), Error> {
        match transport_allowed(&self.base_url, self.allow_insecure) {
            true => Ok(()),
            false => Err(Error::InsecureControlPlane { url: self.base_url.to_string() }),
        }
    }
}

struct CachedToken {
    stamp: (SystemTime, u64),
    token: String,
}

pub struct ControlPlaneClient {
    http: reqwest::Client,
    tunnel_http: reqwest::Client,
    tunnel_url: Url,
    reconcile_url: Url,
    prerequisites_url: Url,
    token_file: PathBuf,
    token: Mutex<Option<CachedToken>>,
    request_timeout: Duration,
    max_response_bytes: usize,
}

/// Where the system's CA bundle is looked for (rustls-native-certs: the environment's, or
/// OpenSSL's default on Debian).
fn system_bundle() -> String {
    match (std::env::var("SSL_CERT_FILE"), std::env::var("SSL_CERT_DIR")) {
        (Ok(file), Ok(dir)) => format!("SSL_CERT_FILE={file}, SSL_CERT_DIR={dir}"),
        (Ok(file), Err(_)) => format!("SSL_CERT_FILE={file}"),
        (Err(_), Ok(dir)) => format!("SSL_CERT_DIR={dir}"),
        (Err(_), Err(_)) => "/etc/ssl/certs/ca-certificates.crt".into(),
    }
}

impl std::fmt::Debug for ControlPlaneClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlaneClient")
            .field("reconcile_url", &self.reconcile_url.as_str())
            .finish_non_exhaustive()
    }
}

impl ControlPlaneClient {
    pub fn new(config: &ControlPlaneConfig) -> Result<Self, Error> {
        config.check_transport()?;
        let join = |path: &str| {
            config
                .base_url
                .join(path)
                .map_err(|e| Error::ControlPlaneUrl { path: path.to_string(), reason: e.to_string() })
        };
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(config.connect_timeout)
                .redirect(reqwest::redirect::Policy::none())
                .https_only(!config.allow_insecure && config.base_url.scheme() == "https")
                .user_agent(concat!("wsync-agent/", env!("CARGO_PKG_VERSION")))
        };
        let ca_certificates = match &config.ca_file {
            Some(ca_file) => {
                let unusable = |reason: String| Error::CaBundle { path: ca_file.display().to_string(), reason };
                let pem = std::fs::read(ca_file).map_err(|e| unusable(e.to_string()))?;
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| unusable(format!("invalid: {e}")))?
            }
            None => Vec::new(),
        };
        // The system's roots are needed only for https:// without a CA file of its own; an
        // image without a bundle must still reach an http:// control plane.
        let https = config.base_url.scheme() == "https";
        let build = |builder: reqwest::ClientBuilder| {
            let builder = match (https, ca_certificates.is_empty()) {
                (false, _) => builder.tls_certs_only([]),
                (true, true) => builder,
                (true, false) => builder.tls_certs_merge(ca_certificates.iter().cloned()),
            };
            builder.build().map_err(|error| match (https, &config.ca_file) {
                (true, None) => Error::NoTrustedRoots { url: config.base_url.to_string(), bundle: system_bundle() },
                _ => Error::HttpClient(error),
            })
        };
        let http = build(builder().timeout(config.request_timeout))?;
        // The tunnel is an HTTP/1.1 upgrade that lives for hours: no total timeout on it.
        let tunnel_http = build(builder().http1_only())?;
        Ok(Self {
            http,
            tunnel_http,
            tunnel_url: join(crate::tunnel::TUNNEL_PATH)?,
            reconcile_url: join(&config.reconcile_path)?,
            prerequisites_url: join(&config.prerequisites_path)?,
            token_file: config.token_file.clone(),
            token: Mutex::new(None),
            request_timeout: config.request_timeout,
            max_response_bytes: config.max_response_bytes,
        })
    }

    /// The token, re-read only when the file's modification time or size changed.
    fn token(&self) -> Result<String, ControlPlaneError> {
        let unreadable =
            |reason: String| ControlPlaneError::Token { path: self.token_file.display().to_string(), reason };
        let meta = std::fs::metadata(&self.token_file).map_err(|e| unreadable(e.to_string()))?;
        let stamp = (meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len());
        let mut cached = self.token.lock_unpoisoned();
        if let Some(c) = cached.as_ref().filter(|c| c.stamp == stamp) {
            return Ok(c.token.clone());
        }
        let token =
            std::fs::read_to_string(&self.token_file).map_err(|e| unreadable(e.to_string()))?.trim().to_string();
        if token.is_empty() {
            return Err(unreadable("the file is empty".into()));
        }
        *cached = Some(CachedToken { stamp, token: token.clone() });
        Ok(token)
    }

    fn classify(&self, error: reqwest::Error) -> ControlPlaneError {
        if error.is_timeout() {
            ControlPlaneError::Timeout(self.request_timeout)
        } else if error.is_decode() || error.is_body() {
            ControlPlaneError::InvalidBody(error.to_string())
        } else {
            // With its causes (a refused certificate, a reset connection): reqwest's own text
            // says only "error sending request". Without the URL: the message stays short.
            let error = error.without_url();
            let mut message = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                let text = cause.to_string();
                if !message.contains(&text) {
                    message = format!("{message}: {text}");
                }
                source = cause.source();
            }
            ControlPlaneError::Unreachable(message)
        }
    }

    /// POST the reconcile request. Only a 201 with a parsable body is success.
    /// Each info is read on its own (`answer::decode`): a bad one fails only its workspace.
    pub async fn reconcile(&self, request: &ReconcileRequest) -> Result<Answer, ControlPlaneError> {
        let token = self.token()?;
        let response = self
            .http
            .post(self.reconcile_url.clone())
            .bearer_auth(token)
            .json(request)
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        let body =
            self.read_body(response, StatusCode::from_u16(RECONCILE_SUCCESS).unwrap_or(StatusCode::CREATED)).await?;
        answer::decode(&body).map_err(|e| ControlPlaneError::InvalidBody(e.to_string()))
    }

    /// GET the agent-level prerequisites. 200 is success; unknown fields are ignored.
    pub async fn prerequisites(&self) -> Result<Prerequisites, ControlPlaneError> {
        let token = self.token()?;
        let response = self
            .http
            .get(self.prerequisites_url.clone())
            .bearer_auth(token)
            .send()
            .await
            .map_err(|e| self.classify(e))?;
        let body = self.read_body(response, StatusCode::OK).await?;
        serde_json::from_slice(&body).map_err(|e| ControlPlaneError::InvalidBody(e.to_string()))
    }

    /// Open the tunnel (#39): an HTTP/1.1 upgrade on the agent's token, answered within the
    /// request timeout; the connection it leaves is the tunnel's.
    pub async fn open_tunnel(&self) -> Result<reqwest::Upgraded, ControlPlaneError> {
        let token = self.token()?;
        let request = self
            .tunnel_http
            .get(self.tunnel_url.clone())
            .bearer_auth(token)
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, crate::tunnel::UPGRADE_PROTOCOL)
            .send();
        let response = tokio::time::timeout(self.request_timeout, request)
            .await
            .map_err(|_| ControlPlaneError::Timeout(self.request_timeout))?
            .map_err(|e| self.classify(e))?;
        let status = response.status();
        if status != StatusCode::SWITCHING_PROTOCOLS {
            // Read as any refusal: a redirect, or the status with an excerpt of the body.
            let read =
                tokio::time::timeout(self.request_timeout, self.read_body(response, StatusCode::SWITCHING_PROTOCOLS));
            let refused = ControlPlaneError::Status { status: status.as_u16(), body: String::new() };
            return Err(read
                .await
                .map_or(ControlPlaneError::Timeout(self.request_timeout), |r| r.err().unwrap_or(refused)));
        }
        let upgraded = tokio::time::timeout(self.request_timeout, response.upgrade());
        upgraded.await.map_err(|_| ControlPlaneError::Timeout(self.request_timeout))?.map_err(|e| self.classify(e))
    }

    /// The body, read chunk by chunk into one buffer and never past the cap. An error body is
    /// read only as far as its excerpt.
    async fn read_body(
        &self,
        mut response: reqwest::Response,
        success: StatusCode,
    ) -> Result<Vec<u8>, ControlPlaneError> {
        let status = response.status();
        if status.is_redirection() {
            let location = response.headers().get(reqwest::header::LOCATION);
            let location = location.map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned()).unwrap_or_default();
            return Err(ControlPlaneError::Redirected { location: excerpt(location.as_bytes()) });
        }
        let limit = if status == success { self.max_response_bytes } else { BODY_EXCERPT_BYTES.saturating_mul(4) };
        let too_large = ControlPlaneError::TooLarge { limit: self.max_response_bytes };
        let announced = response.content_length().and_then(|n| usize::try_from(n).ok());
        if status == success && announced.is_some_and(|n| n > limit) {
            return Err(too_large);
        }
        let mut body = Vec::with_capacity(announced.unwrap_or(FIRST_READ_BYTES).min(limit));
        while let Some(chunk) = response.chunk().await.map_err(|e| self.classify(e))? {
            let room = limit.saturating_sub(body.len());
            if chunk.len() > room {
                if status == success {
                    return Err(too_large);
                }
                body.extend_from_slice(&chunk[..room]);
                break;
            }
            if chunk.len() > body.capacity().saturating_sub(body.len()) {
                // Once past the first read, room for the cap at once: growing by doubling
                // would copy the body each time and hold two copies at the peak. Pages of the
                // reserve that are never written are never resident.
                body.reserve_exact(limit.saturating_sub(body.len()));
            }
            body.extend_from_slice(&chunk);
        }
        if status != success {
            return Err(ControlPlaneError::Status { status: status.as_u16(), body: excerpt(&body) });
        }
        Ok(body)
    }
}

/// TLS anywhere; plain HTTP only to loopback, unless the operator says the network is trusted.
fn transport_allowed(url: &Url, allow_insecure: bool) -> bool {
    match url.scheme() {
        "https" => true,
        "http" => {
            let host = url.host_str().unwrap_or_default();
            let ip = host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>();
            allow_insecure || host.eq_ignore_ascii_case("localhost") || ip.is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(BODY_EXCERPT_BYTES) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_reaches_only_loopback_unless_allowed() {
        let url = |s: &str| Url::parse(s).expect("url");
        for ok in ["https://gitlab.example.com", "http://127.0.0.1:8080", "http://[::1]:80", "http://localhost"] {
            assert!(transport_allowed(&url(ok), false), "{ok}");
        }
        for refused in ["http://gitlab.example.com", "http://10.0.0.1", "http://127.0.0.1.nip.io", "ftp://127.0.0.1"] {
            assert!(!transport_allowed(&url(refused), false), "{refused}");
        }
        assert!(transport_allowed(&url("http://gitlab.example.com"), true));
        assert!(!transport_allowed(&url("ftp://x"), true));
    }
}
