//! wsync: an in-cluster agent that keeps cloud development workspaces in step with a control
//! plane, over GitLab's Workspaces reconcile protocol. See DESIGN.md for the architecture.

pub mod agent;
pub mod cli;
pub mod control_plane;
pub mod crd;
pub mod protocol;
pub mod yaml;

pub use agent::control_plane::ControlPlaneError;

/// Everything that can go wrong in the agent, in the operator's words.
#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("Kubernetes API error: {0}")]
    Kube(#[from] kube::Error),

    #[error("control plane: {0}")]
    ControlPlane(#[from] ControlPlaneError),

    #[error("control plane prerequisites: {0}")]
    Prerequisites(ControlPlaneError),

    #[error("invalid configuration: {0}")]
    Config(String),

    #[error("leader election: {0}")]
    Lease(String),

    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),

    #[error("the WorkspaceSyncStatus CRD is not installed; run `kubectl apply -k manifests/` first")]
    CrdMissing,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Changes the log filter of a running process (`info`, `wsync=debug`, …).
pub type LogLevelHandle = std::sync::Arc<dyn Fn(&str) -> std::result::Result<(), String> + Send + Sync>;

/// Read a token from a file (a mounted Secret, say), trimmed; the error names the file only.
pub fn read_token_file(path: &std::path::Path) -> Result<String> {
    let token = std::fs::read_to_string(path)
        .map_err(|e| Error::Config(format!("token file {}: {e}", path.display())))?
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(Error::Config(format!("token file {} is empty", path.display())));
    }
    Ok(token)
}

/// Install rustls' ring provider once. kube and reqwest share it; without a default, a build
/// with two providers panics at the first TLS connection.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
