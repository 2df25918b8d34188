//! A stream to a workspace from whichever process is asked (#39). The process that holds the
//! agent's tunnel opens it there; any other, when it advertises a URL, finds the holder in the
//! database (`store::tunnel_registry`) and asks it over HTTP (an upgrade, signed with the
//! secret the processes share, for that holder, that stream, within 30 s), then relays. So a
//! browser or a CLI may reach any process behind one Service, and the agent keeps one tunnel.
//! The database holds no secret: reading it opens nothing.

use super::tunnels::Tunnels;
use crate::control_plane::store::Store;
use crate::control_plane::store::tunnel_registry::TunnelHolder;
use crate::tunnel::OpenStream;
use crate::tunnel::transport::{OPEN_HEADER, OPEN_TIMEOUT, OpenError, REFUSAL_HEADER};
use tokio::io::{AsyncRead, AsyncWrite};

/// Where a process asks the holder of an agent's tunnel for a stream.
pub const FORWARD_PATH: &str = "/api/v1/internal/streams";
/// The header naming the agent whose tunnel a forwarded stream is for.
pub const AGENT_HEADER: &str = "wsync-agent";
/// The `Upgrade` protocol of a forwarded stream.
pub const FORWARD_PROTOCOL: &str = "wsync-forward";

/// A byte stream to a workspace's port, through this process's tunnel or a peer's.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
pub type WorkspaceStream = Box<dyn Io>;

/// Why no stream was opened.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("the agent is not connected to any control-plane process")]
    NotConnected,
    #[error(transparent)]
    Open(#[from] OpenError),
}

/// This process, as its peers reach it.
pub struct Broker {
    pub process_id: String,
    /// Where peers reach this process (`--advertise-url`).
    pub advertise_url: Option<String>,
    /// The secret every process shares (`--forward-secret-file`), which signs each forward;
    /// without it and an advertised URL a process forwards nothing and is forwarded nothing.
    secret: Option<Vec<u8>>,
    /// Built at the first forward: TLS's provider is installed by then.
    client: std::sync::OnceLock<reqwest::Client>,
}

/// How far a forward's time may be from the holder's clock.
const FORWARD_SKEW_MS: i64 = 30_000;
/// The header naming the process a forward is for, and the one with its time.
pub const PROCESS_HEADER: &str = "wsync-forward-process";
pub const TIME_HEADER: &str = "wsync-forward-time";

type Signer = hmac::Hmac<sha2::Sha256>;

impl Broker {
    /// A process reached at `advertise_url`, forwarding with `secret`.
    pub fn new(advertise_url: Option<String>, secret: Option<String>) -> Result<Self, String> {
        let process_id = crate::control_plane::store::new_token().map_err(|e| e.to_string())?;
        if let Some(url) = &advertise_url {
            let parsed = url::Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() || parsed.path() != "/" {
                return Err(format!("{url:?}: give this process's own http(s)://address:port, with no path"));
            }
        }
        if advertise_url.is_some() != secret.is_some() {
            return Err("--advertise-url and --forward-secret-file go together".into());
        }
        let advertise_url = advertise_url.map(|url| url.trim_end_matches('/').to_string());
        let secret = secret.map(String::into_bytes);
        Ok(Self { process_id, advertise_url, secret, client: Default::default() })
    }

    /// From the flags: the advertised URL, and the file holding the shared secret.
    pub fn configured(advertise_url: Option<String>, secret_file: Option<&std::path::Path>) -> Result<Self, String> {
        let secret = secret_file.map(crate::runtime::read_token_file).transpose();
        let secret = secret.map_err(|e| format!("--forward-secret-file: {e}"))?;
        Self::new(advertise_url, secret)
    }

    /// One that forwards nothing and is forwarded nothing.
    pub fn alone() -> Self {
        Self { process_id: String::new(), advertise_url: None, secret: None, client: Default::default() }
    }

    /// Whether this process forwards and is forwarded to: an advertised URL and the secret.
    fn forwards(&self) -> bool {
        self.advertise_url.is_some() && self.secret.is_some()
    }

    /// Tunnel `generation` of this process, as its holder row says it, when it forwards.
    pub fn holder(&self, generation: u64) -> Option<TunnelHolder> {
        if !self.forwards() {
            return None;
        }
        Some(TunnelHolder {
            process_id: self.process_id.clone(),
            tunnel_id: format!("{}-{generation}", self.process_id),
            advertise_url: self.advertise_url.clone()?,
        })
    }

    /// The signature of a forward, in hex: HMAC-SHA256 with the shared secret over the
    /// process it is for, the agent, the stream asked and the time.
    fn signature(&self, process: &str, agent: &str, asked: &str, time: i64) -> Option<String> {
        use hmac::Mac;
        let mut signer = Signer::new_from_slice(self.secret.as_deref()?).ok()?;
        for part in [process, agent, asked, &time.to_string()] {
            signer.update(part.as_bytes());
            signer.update(b"\n");
        }
        Some(crate::control_plane::store::hex(&signer.finalize().into_bytes()))
    }

    /// Whether a forward is this process's, recent, and signed with the shared secret.
    pub fn verifies(&self, headers: &axum::http::HeaderMap, agent: &str, asked: &str, now: i64) -> bool {
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let time: i64 = text(TIME_HEADER).parse().unwrap_or(i64::MIN);
        if text(PROCESS_HEADER) != self.process_id || now.abs_diff(time) > FORWARD_SKEW_MS.unsigned_abs() {
            return false;
        }
        let Some(expected) = self.signature(&self.process_id, agent, asked, time) else { return false };
        let shown = text("authorization").strip_prefix("Bearer ").unwrap_or_default();
        crate::control_plane::store::same_secret(&expected, shown)
    }

    fn client(&self) -> &reqwest::Client {
        self.client.get_or_init(|| {
            let built = reqwest::Client::builder()
                .http1_only()
                .redirect(reqwest::redirect::Policy::none())
                .connect_timeout(OPEN_TIMEOUT)
                .build();
            built.unwrap_or_default()
        })
    }

    /// A stream to `open`'s port of a workspace of `agent`: through this process's tunnel,
    /// or through the process that holds it.
    pub async fn open(
        &self,
        store: &Store,
        tunnels: &Tunnels,
        agent: &str,
        open: &OpenStream,
    ) -> Result<WorkspaceStream, StreamError> {
        if let Some(opener) = tunnels.opener(agent) {
            return Ok(Box::new(opener.open(open).await?));
        }
        if !self.forwards() {
            return Err(StreamError::NotConnected);
        }
        let holder = match store.tunnel_holder(agent).await {
            Ok(Some(holder)) if holder.process_id != self.process_id => holder,
            Ok(_) => return Err(StreamError::NotConnected),
            Err(error) => {
                tracing::warn!(%error, agent, "could not read who holds an agent's tunnel");
                return Err(StreamError::NotConnected);
            }
        };
        self.forward(&holder, agent, open).await
    }

    async fn forward(
        &self,
        holder: &TunnelHolder,
        agent: &str,
        open: &OpenStream,
    ) -> Result<WorkspaceStream, StreamError> {
        let asked = serde_json::to_string(open).unwrap_or_default();
        let time = crate::control_plane::model::now_ms();
        let signature = self.signature(&holder.process_id, agent, &asked, time).ok_or(StreamError::NotConnected)?;
        let request = self
            .client()
            .get(format!("{}{FORWARD_PATH}", holder.advertise_url))
            .bearer_auth(signature)
            .header(PROCESS_HEADER, &holder.process_id)
            .header(TIME_HEADER, time.to_string())
            .header(AGENT_HEADER, agent)
            .header(OPEN_HEADER, asked)
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, FORWARD_PROTOCOL)
            .send();
        // The holder's own open may take OPEN_TIMEOUT: its refusal comes back, not a timeout.
        let response = match tokio::time::timeout(
            OPEN_TIMEOUT.saturating_add(std::time::Duration::from_secs(5)),
            request,
        )
        .await
        {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                // The holder is gone (killed, say): the agent reconnects to a live process.
                tracing::info!(error = %error.without_url(), agent, holder = %holder.advertise_url, "the process holding an agent's tunnel did not answer");
                return Err(StreamError::NotConnected);
            }
            Err(_) => return Err(StreamError::Open(OpenError::TimedOut)),
        };
        match response.status() {
            reqwest::StatusCode::SWITCHING_PROTOCOLS => {}
            reqwest::StatusCode::FORBIDDEN => {
                let label = response.headers().get(REFUSAL_HEADER).and_then(|v| v.to_str().ok()).unwrap_or("");
                let label = label.to_string();
                let message = response.text().await.unwrap_or_default().chars().take(1024).collect();
                return Err(StreamError::Open(OpenError::Refused { label, message }));
            }
            reqwest::StatusCode::TOO_MANY_REQUESTS => return Err(StreamError::Open(OpenError::Busy)),
            // No longer the holder, or a holder that does not know this process's signature
            // (restarted: a new process id; or another secret): as good as not connected.
            status @ (reqwest::StatusCode::SERVICE_UNAVAILABLE | reqwest::StatusCode::UNAUTHORIZED) => {
                if status == reqwest::StatusCode::UNAUTHORIZED {
                    tracing::warn!(agent, holder = %holder.advertise_url, "the holder of an agent's tunnel refused this process's forward: a restarted holder, or --forward-secret-file differs");
                }
                return Err(StreamError::NotConnected);
            }
            other => return Err(StreamError::Open(OpenError::Unexpected(other))),
        }
        let upgraded = tokio::time::timeout(OPEN_TIMEOUT, response.upgrade()).await;
        match upgraded {
            Ok(Ok(upgraded)) => Ok(Box::new(upgraded)),
            _ => Err(StreamError::Open(OpenError::TimedOut)),
        }
    }
}
