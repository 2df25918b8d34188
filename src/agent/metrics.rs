//! `/metrics` (Prometheus, `wsync_*`), `/healthz` and `/readyz` for the agent.

use super::error::Error;
use crate::runtime::LogLevelHandle;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CycleLabels {
    pub update_type: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UpdateTypeLabel {
    pub update_type: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    pub status: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

pub struct Metrics {
    pub cycles: Family<CycleLabels, Counter>,
    pub cycle_duration: HistogramFamily<UpdateTypeLabel>,
    pub workspaces_sent: Histogram,
    pub pending_errors: Gauge,
    pub applies: Family<ResultLabel, Counter>,
    pub control_plane_duration: Histogram,
    pub control_plane_requests: Family<StatusLabel, Counter>,
    pub last_success: Family<UpdateTypeLabel, Gauge<f64, AtomicU64>>,
    /// When the latest cycle of each type began: the bench times cycles from it.
    pub last_start: Family<UpdateTypeLabel, Gauge<f64, AtomicU64>>,
    /// The partial and full intervals in effect (the control plane's settings): the alert
    /// rules compare the time since the last success against them.
    pub sync_interval: Family<UpdateTypeLabel, Gauge<f64, AtomicU64>>,
    pub leader: Gauge,
    pub terminations_stuck: Gauge,
    /// Workload failures that began, by reason (`protocol::failure_reason`).
    pub workspace_failures: Family<ReasonLabel, Counter>,
    /// Refused WorkspaceSyncStatus writes, by the apiserver's reason.
    pub status_write_failures: Family<ReasonLabel, Counter>,
    /// 1 while the last status write failed.
    pub status_write_failing: Gauge,
    /// 1 while this replica holds a tunnel to the control plane (#39).
    pub tunnel_open: Gauge,
    /// Streams the control plane asked for, by outcome: `opened`, or the refusal's label.
    pub tunnel_streams: Family<ResultLabel, Counter>,
    registry: Registry,
    crd_present: AtomicBool,
    leading_cycle_done: AtomicBool,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::with_prefix("wsync");
        let cycles = Family::<CycleLabels, Counter>::default();
        let cycle_duration: HistogramFamily<UpdateTypeLabel> = Family::new_with_constructor(seconds_histogram);
        let workspaces_sent = Histogram::new(exponential_buckets(1.0, 4.0, 8));
        let pending_errors = Gauge::default();
        let applies = Family::<ResultLabel, Counter>::default();
        let control_plane_duration = seconds_histogram();
        let control_plane_requests = Family::<StatusLabel, Counter>::default();
        let last_success = Family::<UpdateTypeLabel, Gauge<f64, AtomicU64>>::default();
        let last_start = Family::<UpdateTypeLabel, Gauge<f64, AtomicU64>>::default();
        let sync_interval = Family::<UpdateTypeLabel, Gauge<f64, AtomicU64>>::default();
        let leader = Gauge::default();
        let terminations_stuck = Gauge::default();
        let workspace_failures = Family::<ReasonLabel, Counter>::default();
        let status_write_failures = Family::<ReasonLabel, Counter>::default();
        let status_write_failing = Gauge::default();
        let tunnel_open = Gauge::default();
        let tunnel_streams = Family::<ResultLabel, Counter>::default();
        // Every known label set starts at 0, so that a rate() sees the first increase and
        // dashboards show the series before anything happens.
        for result in ["success", "failure", "retry_failure", "stale"] {
            applies.get_or_create(&ResultLabel { result: result.into() }).inc_by(0);
        }
        for result in [
            "opened",
            "malformed",
            "not_our_workspace",
            "undeclared_port",
            "no_pod",
            "forbidden_address",
            "dial_failed",
        ] {
            tunnel_streams.get_or_create(&ResultLabel { result: result.into() }).inc_by(0);
        }
        for reason in crate::protocol::failure_reason::FailureReason::ALL {
            workspace_failures.get_or_create(&ReasonLabel { reason: reason.as_str().into() }).inc_by(0);
        }
        for update_type in ["partial", "full"] {
            for result in ["success", "error"] {
                cycles.get_or_create(&CycleLabels { update_type: update_type.into(), result: result.into() }).inc_by(0);
            }
        }
        registry.register(
            "workspace_failures",
            "Workspace workload failures that began, by reason",
            workspace_failures.clone(),
        );
        registry.register(
            "terminations_stuck",
            "Workspace terminations running past --termination-timeout",
            terminations_stuck.clone(),
        );
        registry.register(
            "status_write_failures",
            "WorkspaceSyncStatus writes the apiserver refused, by its reason",
            status_write_failures.clone(),
        );
        registry.register(
            "status_write_failing",
            "1 while the agent cannot write its WorkspaceSyncStatus",
            status_write_failing.clone(),
        );
        registry.register("sync_cycles", "Sync cycles by update type and result", cycles.clone());
        registry.register("sync_cycle_duration_seconds", "Sync cycle duration", cycle_duration.clone());
        registry.register("sync_workspaces_sent", "Workspace infos sent per cycle", workspaces_sent.clone());
        registry.register("pending_errors", "Errors the control plane has not acknowledged", pending_errors.clone());
        registry.register("applies", "Workspace applies by result", applies.clone());
        registry.register(
            "control_plane_request_duration_seconds",
            "Reconcile request latency",
            control_plane_duration.clone(),
        );
        registry.register(
            "control_plane_requests",
            "Reconcile requests by HTTP status",
            control_plane_requests.clone(),
        );
        registry.register(
            "last_successful_sync_timestamp_seconds",
            "When the last successful cycle of each type ended",
            last_success.clone(),
        );
        registry.register(
            "sync_cycle_last_start_timestamp_seconds",
            "When the latest cycle of each type began",
            last_start.clone(),
        );
        registry.register(
            "sync_interval_seconds",
            "The interval between cycles of each type, as the control plane set it",
            sync_interval.clone(),
        );
        registry.register("leader", "1 while this replica holds the Lease", leader.clone());
        registry.register(
            "tunnel_open",
            "1 while this replica holds a tunnel to the control plane",
            tunnel_open.clone(),
        );
        registry.register(
            "tunnel_streams",
            "Streams the control plane asked the tunnel for, by outcome (opened, or why refused)",
            tunnel_streams.clone(),
        );
        Arc::new(Self {
            cycles,
            cycle_duration,
            workspaces_sent,
            pending_errors,
            applies,
            control_plane_duration,
            control_plane_requests,
            last_success,
            last_start,
            sync_interval,
            leader,
            terminations_stuck,
            workspace_failures,
            status_write_failures,
            status_write_failing,
            tunnel_open,
            tunnel_streams,
            registry,
            crd_present: AtomicBool::new(false),
            leading_cycle_done: AtomicBool::new(false),
        })
    }

    pub fn set_crd_present(&self) {
        self.crd_present.store(true, Ordering::Relaxed);
    }

    /// The CRD was deleted while the agent runs: not ready until it is back.
    pub fn set_crd_absent(&self) {
        self.crd_present.store(false, Ordering::Relaxed);
    }

    /// Leading, or not: a new term is not ready until its first cycle completes.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
        self.leading_cycle_done.store(false, Ordering::Relaxed);
        if !leading {
            // A follower holds no ledger: what it showed as leader would outlive its term in
            // the alerts (max over replicas) and hide the new leader's.
            self.pending_errors.set(0);
            self.terminations_stuck.set(0);
            self.status_write_failing.set(0);
        }
    }

    /// A new term starts from the ledger's record, so that an agent that never succeeds after
    /// a restart still shows how long ago it last did, and the intervals to judge that by.
    pub fn restored(&self, ledger: &crate::agent::sync::ledger::Ledger) {
        self.set_intervals(ledger.partial_interval(), ledger.full_interval());
        let seconds = |t: jiff::Timestamp| t.as_millisecond() as f64 / 1000.0;
        for (update_type, last) in
            [("full", ledger.fields.last_full_sync), ("partial", ledger.fields.last_partial_sync)]
        {
            let label = UpdateTypeLabel { update_type: update_type.into() };
            if let Some(last) = last {
                self.last_success.get_or_create(&label).set(seconds(last));
            }
        }
    }

    pub fn cycle_started(&self, update_type: crate::protocol::UpdateType) {
        let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
        self.last_start.get_or_create(&UpdateTypeLabel { update_type: update_type.to_string() }).set(now);
    }

    pub fn set_intervals(&self, partial: std::time::Duration, full: std::time::Duration) {
        for (update_type, interval) in [("partial", partial), ("full", full)] {
            let label = UpdateTypeLabel { update_type: update_type.into() };
            self.sync_interval.get_or_create(&label).set(interval.as_secs_f64());
        }
    }

    pub fn cycle_completed(&self) {
        self.leading_cycle_done.store(true, Ordering::Relaxed);
    }

    /// Ready: the CRD is there, and this replica is a follower, or a leader past its first cycle.
    pub fn ready(&self) -> bool {
        self.crd_present.load(Ordering::Relaxed)
            && (self.leader.get() == 0 || self.leading_cycle_done.load(Ordering::Relaxed))
    }

    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}

/// `PUT /loglevel` with a filter such as `debug` or `info,wsync=trace` changes the log level.
async fn set_log_level(State(log_level): State<LogLevelHandle>, body: String) -> axum::response::Response {
    match log_level(body.trim()) {
        Ok(()) => {
            tracing::info!(filter = body.trim(), "log level changed");
            (StatusCode::OK, "ok\n").into_response()
        }
        Err(error) => (StatusCode::BAD_REQUEST, format!("invalid filter: {error}\n")).into_response(),
    }
}

/// Read-only, for Prometheus and the kubelet's probes.
fn router(metrics: Arc<Metrics>) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            get(|State(m): State<Arc<Metrics>>| async move {
                ([("content-type", crate::runtime::OPENMETRICS_CONTENT_TYPE)], m.encode())
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(|State(m): State<Arc<Metrics>>| async move {
                if m.ready() {
                    (StatusCode::OK, "ready").into_response()
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "not ready").into_response()
                }
            }),
        )
        .with_state(metrics)
}

/// What changes the agent, on its own address (loopback by default, so reachable only with
/// `kubectl exec` or `kubectl port-forward`).
fn admin_router(log_level: LogLevelHandle) -> axum::Router {
    axum::Router::new().route("/loglevel", axum::routing::put(set_log_level)).with_state(log_level)
}

async fn bind(flag: &'static str, address: std::net::SocketAddr) -> Result<tokio::net::TcpListener, Error> {
    tokio::net::TcpListener::bind(address).await.map_err(|source| Error::ListenAddress { flag, address, source })
}

const METRICS_FLAG: &str = "--metrics-address";
const ADMIN_FLAG: &str = "--admin-address";

/// Serve the endpoints; a port that cannot be bound is a configuration error, named by its flag.
pub async fn serve(
    address: std::net::SocketAddr,
    admin_address: std::net::SocketAddr,
    metrics: Arc<Metrics>,
    log_level: LogLevelHandle,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let listener = bind(METRICS_FLAG, address).await?;
    let admin = bind(ADMIN_FLAG, admin_address).await?;
    let bound = |l: &tokio::net::TcpListener, flag, address| {
        l.local_addr().map_err(|source| Error::ListenAddress { flag, address, source })
    };
    tracing::info!(address = %bound(&listener, METRICS_FLAG, address)?, "serving /metrics, /healthz and /readyz");
    tracing::info!(address = %bound(&admin, ADMIN_FLAG, admin_address)?, "serving PUT /loglevel");
    Ok(tokio::spawn(async move {
        let serving = async { axum::serve(listener, router(metrics)).await };
        let administering = async { axum::serve(admin, admin_router(log_level)).await };
        let _ = futures::join!(serving, administering);
    }))
}
