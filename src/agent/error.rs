//! The agent's errors, in the operator's words. Each has a `reason()`: the `Synced` condition's
//! reason and the metric label for it, as in kube-rs/controller-rs.

use crate::protocol::ErrorType;
use std::time::Duration;

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("Kubernetes API error: {}", crate::agent::error::api_message(.0))]
    Kube(#[from] kube::Error),

    #[error("control plane: {0}")]
    ControlPlane(#[from] ControlPlaneError),

    #[error("control plane prerequisites: {0}")]
    Prerequisites(ControlPlaneError),

    #[error("control plane prerequisites: {0}")]
    NamespaceModeMismatch(String),

    #[error("--shared-namespace {namespace}: {reason}")]
    SharedNamespace { namespace: String, reason: String },

    #[error("the WorkspaceSyncStatus CRD is not installed; run `kubectl apply -k manifests/` first")]
    CrdMissing,

    #[error("leader election on Lease {lease}: {reason}")]
    Lease { lease: String, reason: String },

    #[error("rendering the WorkspaceSyncStatus: {0}")]
    RenderStatus(#[from] serde_json::Error),

    #[error("the control-plane URL joined with {path:?} is not a URL: {reason}")]
    ControlPlaneUrl { path: String, reason: String },

    #[error("CA bundle {path}: {reason}")]
    CaBundle { path: String, reason: String },

    #[error("building the HTTP client: {0}")]
    HttpClient(reqwest::Error),

    #[error(
        "no CA certificate to check {url} against: the system's bundle ({bundle}) is missing or \
         empty, and no --control-plane-ca-file was given; install ca-certificates, or give the \
         control plane's CA with --control-plane-ca-file"
    )]
    NoTrustedRoots { url: String, bundle: String },

    #[error(
        "the control-plane URL {url} is plain HTTP to a host that is not loopback: agent tokens and \
         workspace configs would cross the network in clear; use https://, or pass \
         --allow-insecure-control-plane if this network is trusted"
    )]
    InsecureControlPlane { url: String },

    /// A listening address that cannot be served, named by its flag (`--metrics-address`,
    /// `--admin-address`).
    #[error("{flag} {address}: {source}")]
    ListenAddress { flag: &'static str, address: std::net::SocketAddr, source: std::io::Error },
}

impl Error {
    /// CamelCase, as Kubernetes condition reasons are; also the metric label.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "KubernetesError",
            Error::ControlPlane(e) => e.reason(),
            Error::Prerequisites(_) | Error::NamespaceModeMismatch(_) => "PrerequisitesFailed",
            Error::CrdMissing => "CrdMissing",
            Error::Lease { .. } => "LeaseFailed",
            Error::RenderStatus(_) => "StatusRenderFailed",
            Error::ControlPlaneUrl { .. }
            | Error::CaBundle { .. }
            | Error::HttpClient(_)
            | Error::NoTrustedRoots { .. }
            | Error::InsecureControlPlane { .. }
            | Error::ListenAddress { .. }
            | Error::SharedNamespace { .. } => "InvalidConfiguration",
        }
    }

    /// The reconcile was sent, but its answer was not received or not read: the control
    /// plane may have committed it (and stamped its changes as delivered).
    pub fn answer_lost(&self) -> bool {
        matches!(
            self,
            Error::ControlPlane(
                ControlPlaneError::Timeout(_)
                    | ControlPlaneError::Unreachable(_)
                    | ControlPlaneError::InvalidBody(_)
                    | ControlPlaneError::TooLarge { .. }
                    | ControlPlaneError::Redirected { .. }
            )
        )
    }

    /// Retrying cannot help: the operator must change something first.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Error::CrdMissing
                | Error::ControlPlaneUrl { .. }
                | Error::CaBundle { .. }
                | Error::HttpClient(_)
                | Error::NoTrustedRoots { .. }
                | Error::InsecureControlPlane { .. }
                | Error::ListenAddress { .. }
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(thiserror::Error, Debug)]
pub enum ControlPlaneError {
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    #[error("unreachable: {0}")]
    Unreachable(String),
    #[error("answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("answered with a body that is not a valid response: {0}")]
    InvalidBody(String),
    #[error("answered with more than {limit} bytes (--max-response-bytes); the rest was not read")]
    TooLarge { limit: usize },
    #[error("answered with a redirect to {location:?}; redirects are never followed")]
    Redirected { location: String },
    #[error("cannot read the token file {path}: {reason}")]
    Token { path: String, reason: String },
}

impl ControlPlaneError {
    /// The `Synced` condition's reason for this failure.
    pub fn reason(&self) -> &'static str {
        match self {
            ControlPlaneError::Timeout(_) => "ControlPlaneTimeout",
            ControlPlaneError::Unreachable(_) => "ControlPlaneUnreachable",
            ControlPlaneError::Status { .. } => "ControlPlaneRejected",
            ControlPlaneError::InvalidBody(_) => "ControlPlaneInvalidResponse",
            ControlPlaneError::TooLarge { .. } => "ControlPlaneResponseTooLarge",
            ControlPlaneError::Redirected { .. } => "ControlPlaneRedirected",
            ControlPlaneError::Token { .. } => "TokenUnreadable",
        }
    }

    /// The metric label of a reconcile's outcome: the HTTP status, or what went wrong.
    pub fn status_label(&self) -> String {
        match self {
            ControlPlaneError::Status { status, .. } => status.to_string(),
            other => other.reason().to_string(),
        }
    }
}

/// Why one workspace's apply or termination failed, as the control plane is told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyError {
    pub error_type: ErrorType,
    pub message: String,
    /// Retrying the same config cannot help (the agent's policy refused it): retried only at
    /// the slow end.
    pub lasting: bool,
}

impl ApplyError {
    /// Failed in the applier: the config itself is at fault.
    pub fn applier(message: impl Into<String>) -> Self {
        Self { error_type: ErrorType::Applier, message: message.into(), lasting: false }
    }

    /// Refused by the agent's own policy: the same config is refused again.
    pub fn refused(message: impl Into<String>) -> Self {
        Self { lasting: true, ..Self::applier(message) }
    }

    /// The cluster refused or failed around the config (namespace, pull secrets).
    pub fn kubernetes(message: impl Into<String>) -> Self {
        Self { error_type: ErrorType::Kubernetes, message: message.into(), lasting: false }
    }
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The apiserver's own words for an API error, which is what a person needs to see.
pub fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}
