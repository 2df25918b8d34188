//! Where a workspace's ports are served (#39): each port of each workspace on a host of its
//! own under `--workspaces-domain`, so that its pages (its user's code) never share an origin
//! with the control plane or with another workspace.
//!
//! The host is one DNS label under the domain: `<port>-<workspace>-<agent tag>`, e.g.
//! `3000-ide-4f1c2a9b07.workspaces.example.com`. The port leads, as in GitLab's hosts; the
//! agent tag (the first 10 hex digits of the SHA-256 of the agent's id) keeps two agents'
//! workspaces of one name apart in a fixed length, so the label stays within 63 characters
//! (5 + 1 + 40 + 1 + 10) and reads unambiguously: digits to the first `-`, ten characters
//! after the last.

use sha2::{Digest, Sha256};

/// The agent tag's length, in hex digits.
const TAG_LENGTH: usize = 10;

/// The domain whose subdomains are the workspaces' hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacesDomain(String);

/// A workspace port's host, read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceHost {
    pub port: u16,
    pub workspace: String,
    /// The agent's tag: the host names the agent only by it.
    pub agent_tag: String,
}

impl WorkspaceHost {
    /// The host's name under `domain`, as its cookie and its codes are bound to it: without
    /// a port, lowercase.
    pub fn name(&self, domain: &WorkspacesDomain) -> String {
        format!("{}-{}-{}.{}", self.port, self.workspace, self.agent_tag, domain.as_str())
    }

    /// Whether `agent` is the agent this host names.
    pub fn is_for_agent(&self, agent: &str) -> bool {
        agent_tag(agent) == self.agent_tag
    }
}

/// The agent's tag in its workspaces' hosts.
pub fn agent_tag(agent: &str) -> String {
    let digest = Sha256::digest(agent.as_bytes());
    digest
        .iter()
        .flat_map(|b| [b >> 4, b & 0xf])
        .take(TAG_LENGTH)
        .map(|n| char::from_digit(n.into(), 16).unwrap_or('0'))
        .collect()
}

impl WorkspacesDomain {
    /// A DNS name of at least two labels (`ws.localhost`, `workspaces.example.com`),
    /// lowercase, without a trailing dot.
    pub fn parse(text: &str) -> Result<Self, String> {
        let domain = text.trim().trim_end_matches('.').to_ascii_lowercase();
        if !crate::names::is_dns_subdomain(&domain) || !domain.contains('.') {
            return Err(format!(
                "--workspaces-domain {text:?}: give a DNS name of two labels or more whose wildcard points at the \
                 control plane, e.g. workspaces.example.com (or ws.localhost on one machine)"
            ));
        }
        Ok(Self(domain))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The host of port `port` of workspace `workspace` of agent `agent`.
    pub fn host(&self, agent: &str, workspace: &str, port: u16) -> String {
        format!("{port}-{workspace}-{}.{}", agent_tag(agent), self.0)
    }

    /// Whether a request's host (with or without its `:port`) is a subdomain of this
    /// domain: such a request is a workspace's, whatever else it says, and never reaches the
    /// control plane's own routes.
    pub fn covers(&self, host: &str) -> bool {
        let name = without_port(host).to_ascii_lowercase();
        let name = name.trim_end_matches('.');
        name.len() > self.0.len() && name.strip_suffix(&self.0).is_some_and(|rest| rest.ends_with('.'))
    }

    /// The workspace port a request's host names; None for any host that is not exactly one
    /// well-formed label under this domain.
    pub fn workspace_host(&self, host: &str) -> Option<WorkspaceHost> {
        if !self.covers(host) {
            return None;
        }
        let name = without_port(host).to_ascii_lowercase();
        let label = name.trim_end_matches('.').strip_suffix(&self.0)?.strip_suffix('.')?;
        if !crate::names::is_dns_label(label) {
            return None;
        }
        let (port, rest) = label.split_once('-')?;
        if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) || port.starts_with('0') {
            return None;
        }
        let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
        let (workspace, tag) = rest.rsplit_once('-')?;
        let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
        if tag.len() != TAG_LENGTH || !tag.bytes().all(hex) || !crate::names::is_dns_label(workspace) {
            return None;
        }
        Some(WorkspaceHost { port, workspace: workspace.into(), agent_tag: tag.into() })
    }
}

/// `host` without a `:port`; an IPv6 literal is never a workspace's host, and is left whole.
fn without_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host;
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

#[cfg(test)]
mod tests;
