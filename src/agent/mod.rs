//! The in-cluster agent (DESIGN §2), in three wings: `sync` decides (pure), `apply` owns
//! one workspace's apply, `k8s` holds the loop's own calls. `controller` runs the loop,
//! `actions` the applies it starts; `context` is what a term shares.

pub mod actions;
pub mod apply;
pub mod context;
pub mod control_plane_client;
pub mod controller;
pub mod error;
pub mod intents;
pub mod k8s;
pub mod metrics;
#[cfg(test)]
pub mod mock_apiserver;
pub mod objects;
pub mod policy;
pub mod retry;
pub mod sync;
pub mod tunnel;

use crate::protocol::ImagePullSecret;
use crate::protocol::inventory::DEFAULT_WORKSPACE_LABEL_KEY;
use crate::runtime::{LogLevelHandle, parse_duration, shutdown_signal};
use apply::Applier;
use context::{Context, LoopConfig, Parts};
use control_plane_client::{ControlPlaneClient, ControlPlaneConfig};
use error::{Error, Result};
use k8s::{Cluster, ClusterConfig};
use kube_lease_manager::LeaseManagerBuilder;
use policy::kinds::DEFAULT_ALLOWED_KINDS;
use policy::plan::ApplyPolicy;
use policy::pod_security::PodSecurityLevel;
use policy::shared_namespace::NamespaceMode;
use retry::{retry_transient, when};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use sync::backoff::Backoff;
use sync::index::SharedIndex;
use sync::ledger::Ledger;
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
    #[arg(long, env = "WSYNC_WORKSPACE_LABEL_KEY", default_value = DEFAULT_WORKSPACE_LABEL_KEY)]
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

    /// How long one workspace's apply may take; one that hits it is reported and retried,
    /// and frees its slot.
    #[arg(long, env = "WSYNC_APPLY_TIMEOUT", default_value = "60s", value_parser = parse_duration)]
    pub apply_timeout: Duration,

    /// How long a workspace's termination may run before it is reported as stuck, naming what
    /// holds its namespace.
    #[arg(long, env = "WSYNC_TERMINATION_TIMEOUT", default_value = "10m", value_parser = parse_duration)]
    pub termination_timeout: Duration,

    /// How long a workspace's Pod may wait for a node before that is reported: an autoscaler
    /// may be adding one.
    #[arg(long, env = "WSYNC_UNSCHEDULABLE_GRACE", default_value = "60s", value_parser = parse_duration)]
    pub unschedulable_grace: Duration,

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

    /// Where `PUT /loglevel` is served: loopback by default, so only `kubectl exec` or
    /// `kubectl port-forward` reach it.
    #[arg(long, env = "WSYNC_ADMIN_ADDRESS", default_value = "127.0.0.1:8082")]
    pub admin_address: std::net::SocketAddr,

    /// Accept a plain `http://` control-plane URL to a host that is not loopback.
    #[arg(long, env = "WSYNC_ALLOW_INSECURE_CONTROL_PLANE")]
    pub allow_insecure_control_plane: bool,

    /// The largest control-plane answer read; a longer one fails the cycle unread.
    #[arg(long, env = "WSYNC_MAX_RESPONSE_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_response_bytes: usize,

    /// An image pull secret the control plane may name, as `namespace/name` (repeatable, or
    /// comma-separated in the environment). Only these are ever read, and only of the
    /// docker-config types. Default: none.
    #[arg(long = "image-pull-secret-source", env = "WSYNC_IMAGE_PULL_SECRET_SOURCES", value_delimiter = ',',
          value_parser = parse_secret_source)]
    pub image_pull_secret_sources: Vec<ImagePullSecret>,

    /// The Pod Security Standard every workspace Pod template must meet, checked by the agent
    /// and set as the `pod-security.kubernetes.io/*` labels of every workspace namespace.
    #[arg(long, env = "WSYNC_POD_SECURITY_LEVEL", default_value = "baseline")]
    pub pod_security_level: PodSecurityLevel,

    /// Service types the control plane may apply.
    #[arg(long, env = "WSYNC_ALLOWED_SERVICE_TYPES", value_delimiter = ',', default_value = "ClusterIP")]
    pub allowed_service_types: Vec<String>,

    /// How long the leader's Lease lasts without renewal; a successor waits at most this long.
    #[arg(long, env = "WSYNC_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,

    /// How long before expiry the leader renews its Lease.
    #[arg(long, env = "WSYNC_LEASE_GRACE", default_value = "5s", value_parser = parse_duration)]
    pub lease_grace: Duration,

    /// Test builds only: abort at this failpoint (`runtime::failpoint`).
    #[arg(long, hide = true)]
    pub failpoint: Option<String>,

    /// Run every workspace in this one namespace (GitLab's `shared_namespace`), which the
    /// operator creates: the agent then never creates, labels or deletes a namespace, needs
    /// only namespaced Roles (manifests/overlays/shared-namespace), and the control plane's
    /// prerequisites must serve the same name.
    #[arg(long, env = "WSYNC_SHARED_NAMESPACE")]
    pub shared_namespace: Option<String>,

    /// Kinds the control plane may apply, as `Kind` (core group) or `group/Kind`. RBAC kinds
    /// and cluster-scoped objects are refused whatever this says.
    #[arg(long, env = "WSYNC_ALLOWED_KINDS", value_delimiter = ',',
          default_values_t = DEFAULT_ALLOWED_KINDS.iter().map(|k| k.to_string()))]
    pub allowed_kinds: Vec<String>,

    /// Hold the tunnel the control plane opens workspaces' ports through (#39) while leading.
    #[arg(long, env = "WSYNC_TUNNEL", default_value_t = true, action = clap::ArgAction::Set)]
    pub tunnel: bool,
}

/// Run the agent until SIGTERM or Ctrl-C. Only the holder of the Lease syncs; losing it stops
/// syncing at once, and shutting down releases it so that a successor need not wait.
pub async fn run(args: AgentArgs, log_level: LogLevelHandle) -> Result<()> {
    if let Some(name) = &args.failpoint {
        crate::runtime::failpoint::arm(name);
    }
    // At start, not at the first term: a refused URL, an unreadable CA file or no trusted
    // root at all is a configuration error.
    ControlPlaneClient::new(&control_plane_config(&args))?;
    check_shared_namespace(&args)?;
    let client = kube::Client::try_default().await?;
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        let _ = stop_tx.send(true);
    });
    let metrics = metrics::Metrics::new();
    let server = metrics::serve(args.metrics_address, args.admin_address, metrics.clone(), log_level).await?;
    let cluster = Cluster::new(client.clone(), cluster_config(&args));
    retry_transient("checking the WorkspaceSyncStatus CRD", Backoff::START_UP, when(stop.clone(), true), || {
        cluster.check_crd()
    })
    .await?;
    metrics.set_crd_present();

    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| {
        let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
        format!("{}-{}", host.trim(), std::process::id())
    });
    let lease_name = format!("wsync-agent-{}", args.agent_id);
    let lease = retry_transient("creating the leader Lease", Backoff::START_UP, when(stop.clone(), true), || async {
        LeaseManagerBuilder::new(client.clone(), &lease_name)
            .with_namespace(&args.namespace)
            .with_identity(&identity)
            .with_duration(args.lease_duration.as_secs().max(2))
            .with_grace(args.lease_grace.as_secs().max(1))
            .with_field_manager(&args.field_manager)
            .build()
            .await
            .map_err(|e| Error::Lease { lease: lease_name.clone(), reason: e.to_string() })
    })
    .await?;
    let (leader, lease_task) = lease.watch().await;
    let lease_keeper = tokio::spawn(k8s::lease::keep_present(
        kube::Api::namespaced(client.clone(), &args.namespace),
        lease_name.clone(),
        args.field_manager.clone(),
        args.lease_duration.max(Duration::from_secs(1)),
    ));
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
    lease_keeper.abort();
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

fn parse_secret_source(text: &str) -> std::result::Result<ImagePullSecret, String> {
    let (namespace, name) = text.trim().split_once('/').ok_or("expected namespace/name")?;
    crate::names::dns_label("namespace", namespace)?;
    if name.is_empty() || name.len() > 253 || name.contains('/') {
        return Err(format!("{name:?} is not a Secret name"));
    }
    Ok(ImagePullSecret { namespace: namespace.into(), name: name.into() })
}

fn control_plane_config(args: &AgentArgs) -> ControlPlaneConfig {
    ControlPlaneConfig {
        base_url: args.control_plane_url.clone(),
        reconcile_path: args.reconcile_path.clone(),
        prerequisites_path: args.prerequisites_path.clone(),
        token_file: args.token_file.clone(),
        ca_file: args.control_plane_ca_file.clone(),
        connect_timeout: args.connect_timeout,
        request_timeout: args.request_timeout,
        max_response_bytes: args.max_response_bytes,
        allow_insecure: args.allow_insecure_control_plane,
    }
}

fn cluster_config(args: &AgentArgs) -> ClusterConfig {
    ClusterConfig {
        agent_id: args.agent_id.clone(),
        agent_namespace: args.namespace.clone(),
        workspace_label_key: args.workspace_label_key.clone(),
        field_manager: args.field_manager.clone(),
        apply_cache: args.apply_cache,
        pod_security_level: args.pod_security_level,
        namespace_mode: namespace_mode(args),
    }
}

/// A shared namespace is a workspace namespace: never the agent's own or a system one.
fn check_shared_namespace(args: &AgentArgs) -> Result<()> {
    let Some(namespace) = args.shared_namespace.as_deref().filter(|n| !n.is_empty()) else { return Ok(()) };
    let refuse = |reason: String| Err(Error::SharedNamespace { namespace: namespace.to_string(), reason });
    if let Err(reason) = crate::names::dns_label("namespace", namespace) {
        return refuse(reason);
    }
    if ApplyPolicy::new(Vec::<String>::new(), args.namespace.clone()).protected_namespace(namespace) {
        return refuse("a protected namespace (kube-*, default, or the agent's own) cannot hold workspaces".into());
    }
    Ok(())
}

fn namespace_mode(args: &AgentArgs) -> NamespaceMode {
    NamespaceMode::from_flag(args.shared_namespace.as_deref())
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
    let control_plane = ControlPlaneClient::new(&control_plane_config(args))?;
    let (wss, created) =
        retry_transient("reading the WorkspaceSyncStatus", Backoff::START_UP, when(stop.clone(), true), || {
            cluster.ensure_ledger_object()
        })
        .await?;
    if created {
        tracing::info!(agent = %args.agent_id, namespace = %args.namespace, "created the WorkspaceSyncStatus");
    }
    let ledger = Ledger::restore(wss.status.as_ref());
    metrics.restored(&ledger);
    tracing::info!(
        agent = %args.agent_id,
        epoch = ledger.errors().epoch(),
        pending_errors = ledger.errors().pending_count(),
        "agent starting"
    );

    let index = SharedIndex::default();
    let policy = ApplyPolicy::new(args.allowed_kinds.clone(), args.namespace.clone())
        .with_pull_secret_sources(args.image_pull_secret_sources.iter().cloned())
        .with_pod_security(args.pod_security_level)
        .with_service_types(args.allowed_service_types.iter().cloned())
        .with_namespace_mode(namespace_mode(args));
    let parts = Parts {
        applier: Applier::new(client.clone(), cluster_config(args), policy),
        cluster,
        control_plane,
        index: index.clone(),
        config: LoopConfig {
            min_cycle_gap: args.min_cycle_gap,
            apply_concurrency: args.apply_concurrency,
            apply_timeout: args.apply_timeout,
            termination_timeout: args.termination_timeout,
        },
        metrics,
        leading: leader.clone(),
    };
    let ctx = Arc::new(Context::new(parts, ledger, wss.status.as_ref()));

    let watch_ctx = ctx.clone();
    let watcher = tokio::spawn(async move { watch_ctx.parts.cluster.watch_workspaces(index).await });
    let cache_ctx = ctx.clone();
    let cache_watcher = tokio::spawn(async move { cache_ctx.parts.applier.watch_caches().await });
    let pods_ctx = ctx.clone();
    let grace = jiff::SignedDuration::try_from(args.unschedulable_grace).unwrap_or(jiff::SignedDuration::MAX);
    let pod_watcher = tokio::spawn(async move {
        let (failures, index) = (pods_ctx.pod_failures.clone(), pods_ctx.parts.index.clone());
        pods_ctx.parts.cluster.watch_pods(failures, index, grace).await
    });
    let crd_watcher = tokio::spawn(controller::watch_crd(ctx.clone()));
    let tunnel_cluster = || Cluster::new(client.clone(), cluster_config(args));
    let tunnel = args.tunnel.then(|| tunnel::start(tunnel_cluster(), &control_plane_config(args), &ctx.parts.metrics));
    let tunnel = tunnel.transpose()?;
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
    pod_watcher.abort();
    crd_watcher.abort();
    tunnel.inspect(tokio::task::JoinHandle::abort);
    Ok(())
}
