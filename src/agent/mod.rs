//! The in-cluster agent (DESIGN §2).

pub mod applier;
pub mod apply_cache;
pub mod apply_plan;
pub mod cluster;
pub mod control_plane;
pub mod controller;
pub mod cycle;
pub mod errors;
pub mod index;
pub mod ledger;
pub mod memory;
pub mod metrics;
pub mod pull_secrets;
pub mod slim;
pub mod workspace;

use crate::{Error, Result};
use cluster::{Cluster, ClusterConfig};
use control_plane::{ControlPlaneClient, ControlPlaneConfig};
use controller::{Context, LoopConfig};
use index::SharedIndex;
use kube_lease_manager::LeaseManagerBuilder;
use ledger::Ledger;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// `wsync agent` flags; each has an environment fallback for use in a Deployment.
#[derive(clap::Args, Debug, Clone)]
pub struct AgentArgs {
    /// The agent's id: names its WorkspaceSyncStatus and selects its workspaces.
    #[arg(long, env = "WSYNC_AGENT_ID")]
    pub agent_id: String,

    /// Base URL of the control plane.
    #[arg(long, env = "WSYNC_CONTROL_PLANE_URL")]
    pub control_plane_url: reqwest::Url,

    #[arg(long, env = "WSYNC_RECONCILE_PATH", default_value = crate::protocol::RECONCILE_PATH)]
    pub reconcile_path: String,

    #[arg(long, env = "WSYNC_PREREQUISITES_PATH", default_value = crate::protocol::PREREQUISITES_PATH)]
    pub prerequisites_path: String,

    /// PEM bundle to trust for the control plane's certificate, beside the system roots.
    #[arg(long, env = "WSYNC_CONTROL_PLANE_CA_FILE")]
    pub control_plane_ca_file: Option<PathBuf>,

    /// File holding the agent token (a mounted Secret); re-read when it changes.
    #[arg(long, env = "WSYNC_TOKEN_FILE")]
    pub token_file: PathBuf,

    /// The agent's own namespace, where its WorkspaceSyncStatus lives.
    #[arg(long, env = "WSYNC_NAMESPACE", default_value = "wsync-system")]
    pub namespace: String,

    /// Label whose value is the agent id on every workspace Deployment.
    #[arg(long, env = "WSYNC_WORKSPACE_LABEL_KEY", default_value = "agent.gitlab.com/id")]
    pub workspace_label_key: String,

    /// Field manager for server-side apply and status writes.
    #[arg(long, env = "WSYNC_FIELD_MANAGER", default_value = "wsync")]
    pub field_manager: String,

    #[arg(long, env = "WSYNC_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    #[arg(long, env = "WSYNC_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: Duration,

    /// Workspaces applied at once.
    #[arg(long, env = "WSYNC_APPLY_CONCURRENCY", default_value_t = 16)]
    pub apply_concurrency: usize,

    /// Read namespaces and inventories from watched caches (needs list/watch on namespaces
    /// and configmaps); `false` reads them with one GET per apply instead.
    #[arg(long, env = "WSYNC_APPLY_CACHE", default_value_t = true, action = clap::ArgAction::Set)]
    pub apply_cache: bool,

    /// Minimum gap between the starts of two cycles; triggers within it merge.
    #[arg(long, env = "WSYNC_MIN_CYCLE_GAP", default_value = "500ms", value_parser = parse_duration)]
    pub min_cycle_gap: Duration,

    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, env = "WSYNC_METRICS_ADDRESS", default_value = "0.0.0.0:8081")]
    pub metrics_address: std::net::SocketAddr,

    /// How long the leader's Lease lasts without renewal; a successor waits at most this long.
    #[arg(long, env = "WSYNC_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// How long before expiry the leader renews its Lease.
    #[arg(long, env = "WSYNC_LEASE_GRACE", default_value = "5s", value_parser = parse_duration)]
    pub lease_grace: Duration,

    /// Kinds the control plane may apply, as `Kind` (core group) or `group/Kind`. RBAC kinds
    /// and cluster-scoped objects are refused whatever this says.
    #[arg(long, env = "WSYNC_ALLOWED_KINDS", value_delimiter = ',',
          default_values_t = apply_plan::DEFAULT_ALLOWED_KINDS.iter().map(|k| k.to_string()))]
    pub allowed_kinds: Vec<String>,
}

/// Parse `500ms`, `5s`, `2m` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("invalid duration {text:?}"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!("invalid duration unit in {text:?}; use ms, s, m or h"));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// Run the agent until SIGTERM or Ctrl-C. Only the holder of the Lease syncs; losing it stops
/// syncing at once, and shutting down releases it so that a successor need not wait.
pub async fn run(args: AgentArgs, log_level: crate::LogLevelHandle) -> Result<()> {
    let client = kube::Client::try_default().await?;
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let metrics = metrics::Metrics::new();
    let server = metrics::serve(args.metrics_address, metrics.clone(), log_level).await?;
    retry_transient("checking the WorkspaceSyncStatus CRD", &stop, || async {
        Cluster::new(client.clone(), cluster_config(&args)).check_crd().await
    })
    .await?;
    metrics.set_crd_present();

    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    let lease_name = format!("wsync-agent-{}", args.agent_id);
    let lease = retry_transient("creating the leader Lease", &stop, || async {
        LeaseManagerBuilder::new(client.clone(), &lease_name)
            .with_namespace(&args.namespace)
            .with_identity(&identity)
            .with_duration(args.lease_duration.as_secs().max(2))
            .with_grace(args.lease_grace.as_secs().max(1))
            .with_field_manager(&args.field_manager)
            .build()
            .await
            .map_err(|e| Error::Lease(format!("{lease_name}: {e}")))
    })
    .await?;
    let (leader, lease_task) = lease.watch().await;
    tracing::info!(%identity, lease = %lease_name, "waiting to lead");

    let mut outcome = Ok(());
    loop {
        let mut stop_rx = stop.clone();
        let mut leader_rx = leader.clone();
        tokio::select! {
            _ = stop_rx.wait_for(|s| *s) => break,
            became = leader_rx.wait_for(|l| *l) => if became.is_err() { break },
        }
        tracing::info!(%identity, "became the leader; syncing");
        metrics.set_leader(true);
        let term = lead(&client, &args, metrics.clone(), stop.clone(), leader.clone()).await;
        metrics.set_leader(false);
        if let Err(error) = term {
            outcome = Err(error);
            break;
        }
        if *stop.borrow() {
            break;
        }
        tracing::warn!(%identity, "lost the Lease; stopped syncing");
    }
    // Dropping the receiver makes the lease task release the Lease before it ends.
    drop(leader);
    match lease_task.await {
        Ok(Ok(_)) => tracing::info!("released the Lease"),
        Ok(Err(error)) => tracing::warn!(%error, "could not release the Lease; it expires on its own"),
        Err(error) => tracing::warn!(%error, "lease task failed"),
    }
    server.abort();
    tracing::info!("agent stopped");
    outcome
}

fn cluster_config(args: &AgentArgs) -> ClusterConfig {
    ClusterConfig {
        agent_id: args.agent_id.clone(),
        agent_namespace: args.namespace.clone(),
        workspace_label_key: args.workspace_label_key.clone(),
        field_manager: args.field_manager.clone(),
        apply_cache: args.apply_cache,
    }
}

/// Retry a start-up step with backoff while it fails transiently; a missing CRD or a bad
/// configuration fails at once, and a shutdown request ends the wait.
async fn retry_transient<T, F, Fut>(what: &str, stop: &watch::Receiver<bool>, mut step: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut delay = Duration::from_millis(500);
    loop {
        match step().await {
            Ok(value) => return Ok(value),
            Err(error @ (Error::CrdMissing | Error::Config(_))) => return Err(error),
            Err(error) => {
                tracing::warn!(%error, retry_in_s = delay.as_secs_f32(), "{what} failed; retrying");
                let mut stop = stop.clone();
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {},
                    _ = stop.wait_for(|s| *s) => return Err(error),
                }
                delay = (delay * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// One term as leader: sync until shutdown (graceful: the cycle in flight finishes and the
/// status is written) or until the Lease is lost (at once: the cycle and its applies are
/// dropped). Everything is built fresh, so the first cycle of every term is full.
async fn lead(
    client: &kube::Client,
    args: &AgentArgs,
    metrics: Arc<metrics::Metrics>,
    mut stop: watch::Receiver<bool>,
    mut leader: watch::Receiver<bool>,
) -> Result<()> {
    let cluster = Cluster::new(client.clone(), cluster_config(args));
    let control_plane = ControlPlaneClient::new(&ControlPlaneConfig {
        base_url: args.control_plane_url.clone(),
        reconcile_path: args.reconcile_path.clone(),
        prerequisites_path: args.prerequisites_path.clone(),
        token_file: args.token_file.clone(),
        ca_file: args.control_plane_ca_file.clone(),
        connect_timeout: args.connect_timeout,
        request_timeout: args.request_timeout,
    })?;
    let (wss, created) =
        retry_transient("reading the WorkspaceSyncStatus", &stop, || cluster.ensure_ledger_object()).await?;
    if created {
        tracing::info!(agent = %args.agent_id, namespace = %args.namespace, "created the WorkspaceSyncStatus");
    }
    let ledger = Ledger::restore(wss.status.as_ref());
    tracing::info!(
        agent = %args.agent_id,
        epoch = ledger.errors().epoch(),
        pending_errors = ledger.errors().pending_count(),
        "agent starting"
    );

    let index = SharedIndex::default();
    let ctx = Arc::new(Context::new(
        cluster,
        control_plane,
        index.clone(),
        LoopConfig {
            min_cycle_gap: args.min_cycle_gap,
            apply_concurrency: args.apply_concurrency,
            policy: apply_plan::ApplyPolicy::new(args.allowed_kinds.clone(), args.namespace.clone()),
        },
        ledger,
        wss.status.clone(),
        metrics,
    ));

    let watch_ctx = ctx.clone();
    let watcher = tokio::spawn(async move { watch_ctx.cluster().watch_workspaces(index).await });
    let cache_ctx = ctx.clone();
    let cache_watcher = tokio::spawn(async move { cache_ctx.cluster().watch_apply_cache().await });
    let (graceful_tx, graceful_rx) = tokio::sync::oneshot::channel::<()>();
    let graceful = async move {
        let _ = graceful_rx.await;
    };
    let controller = controller::run(ctx.clone(), graceful);
    tokio::pin!(controller);
    tokio::select! {
        _ = &mut controller => {}
        _ = stop.wait_for(|s| *s) => {
            let _ = graceful_tx.send(());
            controller.await;
        }
        _ = leader.wait_for(|l| !*l) => ctx.abort_applies(),
    }
    watcher.abort();
    cache_watcher.abort();
    Ok(())
}

pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
    tracing::info!("shutdown requested");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }
}
