//! A stream to a workspace from whichever process is asked (#39). The process that holds the
//! agent's tunnel opens it there; any other, when it advertises a URL, finds the holder in the
//! database (`store::tunnel_registry`) and asks it over HTTP (an upgrade on the holder's
//! forward token), then relays. So a browser or a CLI may reach any process behind one
//! Service, and the agent keeps one tunnel.

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
    /// Where peers reach this process (`--advertise-url`); None: it forwards nothing, and is
    /// forwarded nothing.
    pub advertise_url: Option<String>,
    /// What a peer shows to have this process open a stream on its tunnel.
    pub forward_token: String,
    /// Built at the first forward: TLS's provider is installed by then.
    client: std::sync::OnceLock<reqwest::Client>,
}

impl Broker {
    /// A process reached at `advertise_url`, or (None) by no peer.
    pub fn new(advertise_url: Option<String>) -> Result<Self, String> {
        let token = || crate::control_plane::store::new_token().map_err(|e| e.to_string());
        if let Some(url) = &advertise_url {
            let parsed = url::Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() || parsed.path() != "/" {
                return Err(format!("{url:?}: give this process's own http(s)://address:port, with no path"));
            }
        }
        let advertise_url = advertise_url.map(|url| url.trim_end_matches('/').to_string());
        Ok(Self { process_id: token()?, advertise_url, forward_token: token()?, client: Default::default() })
    }

    /// One that forwards nothing and is forwarded nothing.
    pub fn alone() -> Self {
        Self {
            process_id: String::new(),
            advertise_url: None,
            forward_token: String::new(),
            client: Default::default(),
        }
    }

    /// Whether `shown` is this process's forward token (and it takes forwards at all).
    pub fn takes(&self, shown: &str) -> bool {
        use crate::control_plane::store::{hash_token, same_secret};
        self.advertise_url.is_some()
            && !self.forward_token.is_empty()
            && same_secret(&hash_token(&self.forward_token), &hash_token(shown))
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

    /// This process as the holder of a tunnel, when it advertises a URL.
    pub fn holder(&self) -> Option<TunnelHolder> {
        Some(TunnelHolder {
            process_id: self.process_id.clone(),
            advertise_url: self.advertise_url.clone()?,
            forward_token: self.forward_token.clone(),
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
        self.advertise_url.as_ref().ok_or(StreamError::NotConnected)?;
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
        let request = self
            .client()
            .get(format!("{}{FORWARD_PATH}", holder.advertise_url))
            .bearer_auth(&holder.forward_token)
            .header(AGENT_HEADER, agent)
            .header(OPEN_HEADER, asked)
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, FORWARD_PROTOCOL)
            .send();
        let response = match tokio::time::timeout(OPEN_TIMEOUT, request).await {
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
            reqwest::StatusCode::SERVICE_UNAVAILABLE => return Err(StreamError::NotConnected),
            other => return Err(StreamError::Open(OpenError::Unexpected(other))),
        }
        let upgraded = tokio::time::timeout(OPEN_TIMEOUT, response.upgrade()).await;
        match upgraded {
            Ok(Ok(upgraded)) => Ok(Box::new(upgraded)),
            _ => Err(StreamError::Open(OpenError::TimedOut)),
        }
    }
}
