//! The control plane's errors at start-up and while serving. Each has a `reason()`, the
//! label a log or metric files it under. Requests fail as HTTP answers instead (`api`).

use super::store::StoreError;
use crate::runtime::TokenFileError;

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("invalid reconciliation intervals: {0}")]
    Settings(String),
    #[error("admin token: {0}")]
    AdminToken(#[from] TokenFileError),
    #[error("metrics token: {0}")]
    MetricsToken(TokenFileError),
    #[error("database {url}: {source}")]
    Database { url: String, source: StoreError },
    #[error("cannot listen on {address}: {source}")]
    Listen { address: std::net::SocketAddr, source: std::io::Error },
    #[error("serving: {0}")]
    Serve(std::io::Error),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("{0}")]
    PublicUrl(String),
    #[error("{0}")]
    WorkspacesDomain(String),
    #[error("--advertise-url: {0}")]
    AdvertiseUrl(String),
    #[error("identity provider: {0}")]
    IdentityProvider(String),
    #[error(
        "refusing to serve plain HTTP on {address}, which is not loopback: agent and admin tokens would cross \
         the network in clear. Give --tls-cert-file and --tls-key-file, or --allow-insecure-http behind a \
         proxy that terminates TLS"
    )]
    InsecureListen { address: std::net::SocketAddr },
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Settings(_) => "InvalidSettings",
            Error::AdminToken(_) => "AdminTokenUnusable",
            Error::MetricsToken(_) => "MetricsTokenUnusable",
            Error::Database { .. } => "DatabaseUnavailable",
            Error::Listen { .. } => "ListenFailed",
            Error::Serve(_) => "ServeFailed",
            Error::Tls(_) => "TlsUnusable",
            Error::PublicUrl(_) => "InvalidPublicUrl",
            Error::WorkspacesDomain(_) => "InvalidWorkspacesDomain",
            Error::AdvertiseUrl(_) => "InvalidAdvertiseUrl",
            Error::IdentityProvider(_) => "IdentityProviderUnusable",
            Error::InsecureListen { .. } => "InsecureListen",
        }
    }
}
