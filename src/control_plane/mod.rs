//! The reference control plane (DESIGN §3): it plays GitLab Rails' part of the protocol.

pub mod api;
pub mod config_builder;
pub mod error;
pub mod model;
pub mod pipeline;
pub mod rules;
pub mod store;
pub mod ui;

use crate::protocol::Settings;
use crate::protocol::inventory::DEFAULT_WORKSPACE_LABEL_KEY;
use crate::runtime::{parse_duration, read_token_file, shutdown_signal};
use error::Error;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug, Clone)]
pub struct ControlPlaneArgs {
    /// Address to listen on.
    #[arg(long, env = "WSYNC_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// `sqlite://<path>` (created if missing) or `postgres://…`.
    #[arg(long, env = "WSYNC_DATABASE_URL", default_value = "sqlite://wsync-control-plane.db")]
    pub database_url: String,

    /// File holding the token that the management API and the page require. Without it they
    /// are open: keep the listen address on loopback then.
    #[arg(long, env = "WSYNC_ADMIN_TOKEN_FILE")]
    pub admin_token_file: Option<PathBuf>,

    #[arg(long, env = "WSYNC_FULL_RECONCILIATION_INTERVAL_SECONDS", default_value_t = 3600)]
    pub full_reconciliation_interval_seconds: u64,

    #[arg(long, env = "WSYNC_PARTIAL_RECONCILIATION_INTERVAL_SECONDS", default_value_t = 10)]
    pub partial_reconciliation_interval_seconds: u64,

    /// Stop a workspace that has run this long since its desired state last changed.
    #[arg(long, env = "WSYNC_MAX_RUNNING", default_value = "36h", value_parser = parse_duration)]
    pub max_running: std::time::Duration,

    /// Terminate a workspace that has been stopped this long.
    #[arg(long, env = "WSYNC_MAX_STOPPED", default_value = "744h", value_parser = parse_duration)]
    pub max_stopped: std::time::Duration,

    /// Label key that marks a workspace's objects with its agent id.
    #[arg(long, env = "WSYNC_WORKSPACE_LABEL_KEY", default_value = DEFAULT_WORKSPACE_LABEL_KEY)]
    pub workspace_label_key: String,
}

pub async fn run(args: ControlPlaneArgs) -> Result<(), Error> {
    let settings = Settings {
        full_reconciliation_interval_seconds: args.full_reconciliation_interval_seconds,
        partial_reconciliation_interval_seconds: args.partial_reconciliation_interval_seconds,
    };
    settings.validate().map_err(Error::Settings)?;
    let admin_token = args.admin_token_file.as_deref().map(read_token_file).transpose()?;
    let store = store::Store::connect(&args.database_url)
        .await
        .map_err(|source| Error::Database { url: redact(&args.database_url), source })?;
    let millis = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    let state = Arc::new(api::AppState {
        store,
        pipeline: pipeline::PipelineConfig {
            settings,
            lifecycle: rules::Lifecycle {
                max_running_ms: millis(args.max_running),
                max_stopped_ms: millis(args.max_stopped),
            },
            label_key: args.workspace_label_key.clone(),
        },
        admin_token,
        reconcile_path: crate::protocol::RECONCILE_PATH.into(),
        prerequisites_path: crate::protocol::PREREQUISITES_PATH.into(),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| Error::Listen { address: args.listen, source })?;
    tracing::info!(listen = %args.listen, database = %redact(&args.database_url), "control plane serving");
    axum::serve(listener, api::router(state)).with_graceful_shutdown(shutdown_signal()).await.map_err(Error::Serve)?;
    Ok(())
}

/// A database URL without its password, for logs.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}://…@{}", &url[..scheme], &url[at + 1..]),
        _ => url.to_string(),
    }
}
