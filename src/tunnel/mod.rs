//! The tunnel both halves share (#39): what the control plane asks the agent to open (a
//! stream to one port of one workspace), read strictly, and why the agent refuses one; and
//! the transport that carries them ([`transport`], HTTP/2 through hyper).

pub mod transport;

use std::fmt;

/// Where an agent opens its tunnel (an HTTP/1.1 upgrade, with its agent token).
pub const TUNNEL_PATH: &str = "/api/v1/agent/tunnel";
/// The `Upgrade` protocol it asks for.
pub const UPGRADE_PROTOCOL: &str = "wsync-tunnel";

/// The largest open request read: three short fields.
pub const MAX_OPEN_REQUEST_BYTES: usize = 1024;

/// A stream the control plane asks for: a port of a workspace, named as the reconcile names
/// it. Nothing else can be said: no address, no host, no other field.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenStream {
    pub namespace: String,
    pub workspace: String,
    pub port: u16,
}

impl OpenStream {
    /// Read one request: JSON of exactly these fields, within [`MAX_OPEN_REQUEST_BYTES`],
    /// names that are DNS labels and a port that is not 0.
    pub fn parse(bytes: &[u8]) -> Result<Self, StreamRefusal> {
        if bytes.len() > MAX_OPEN_REQUEST_BYTES {
            return Err(StreamRefusal::Malformed(format!("{} bytes, past {MAX_OPEN_REQUEST_BYTES}", bytes.len())));
        }
        let request: Self = serde_json::from_slice(bytes).map_err(|e| StreamRefusal::Malformed(e.to_string()))?;
        if !crate::names::is_dns_label(&request.namespace) || !crate::names::is_dns_label(&request.workspace) {
            return Err(StreamRefusal::Malformed("the namespace and the workspace must be DNS labels".into()));
        }
        if request.port == 0 {
            return Err(StreamRefusal::Malformed("port 0".into()));
        }
        Ok(request)
    }
}

/// Why the agent will not open a stream. Each is logged and counted by its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamRefusal {
    /// Not a request the agent reads: unknown fields, bad names, too long.
    Malformed(String),
    /// No workspace of this agent by that name: unknown, or not one the agent's label and
    /// namespace ownership make its own.
    NotOurWorkspace,
    /// A port the workspace's own config does not declare.
    UndeclaredPort(u16),
    /// The workspace has no Pod with an address to dial (stopped, starting).
    NoPod,
    /// Every address the workspace's Pods have is one the agent never dials. The address
    /// stays in the agent's log: the control plane is told only why.
    ForbiddenAddress { address: std::net::IpAddr, why: &'static str },
    /// The dial failed, or took longer than the transport's open timeout.
    DialFailed(String),
}

impl StreamRefusal {
    /// The metric label and the log's key.
    pub fn label(&self) -> &'static str {
        match self {
            StreamRefusal::Malformed(_) => "malformed",
            StreamRefusal::NotOurWorkspace => "not_our_workspace",
            StreamRefusal::UndeclaredPort(_) => "undeclared_port",
            StreamRefusal::NoPod => "no_pod",
            StreamRefusal::ForbiddenAddress { .. } => "forbidden_address",
            StreamRefusal::DialFailed(_) => "dial_failed",
        }
    }
}

impl fmt::Display for StreamRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamRefusal::Malformed(why) => write!(f, "malformed stream request: {why}"),
            StreamRefusal::NotOurWorkspace => f.write_str("no such workspace on this agent"),
            StreamRefusal::UndeclaredPort(port) => write!(f, "port {port} is not one the workspace declares"),
            StreamRefusal::NoPod => f.write_str("the workspace has no running Pod to reach"),
            StreamRefusal::ForbiddenAddress { why, .. } => {
                write!(f, "the workspace's Pod address is never dialled: {why}")
            }
            StreamRefusal::DialFailed(why) => write!(f, "the workspace's port did not answer: {why}"),
        }
    }
}
