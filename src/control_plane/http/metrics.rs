//! The control plane's `/metrics` (Prometheus text): reconciles by agent and result, their
//! duration and the database's share of it, and workspaces by actual state, counted at most
//! every ten seconds however often it is scraped. The agent label takes only authenticated
//! agents' ids, so its values are bounded by the agents registered.

use crate::control_plane::store::{Store, StoreResult};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::{Duration, Instant};

/// How long a count of the workspaces serves scrapes.
const COUNTS_FRESH_FOR: Duration = Duration::from_secs(10);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    agent: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabel {
    agent: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LimitLabel {
    limit: String,
}

pub struct Metrics {
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_duration: Histogram,
    database_duration: Histogram,
    workspaces: Family<StateLabel, Gauge>,
    agents_last_seen: Family<AgentLabel, Gauge>,
    sign_in_refusals: Family<LimitLabel, Counter>,
    audit_write_failures: Counter,
    /// When the workspaces were last counted; one scrape at a time counts and encodes.
    counted: tokio::sync::Mutex<Option<Instant>>,
    registry: Registry,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("wsync_control_plane");
        let reconciles = Family::<ReconcileLabels, Counter>::default();
        let reconcile_duration = Histogram::new(exponential_buckets(0.001, 2.0, 14));
        let database_duration = Histogram::new(exponential_buckets(0.0005, 2.0, 14));
        let workspaces = Family::<StateLabel, Gauge>::default();
        registry.register("reconciles", "Reconcile requests by agent and result", reconciles.clone());
        registry.register(
            "reconcile_duration_seconds",
            "Reconcile requests, from the request to the answer",
            reconcile_duration.clone(),
        );
        registry.register(
            "database_duration_seconds",
            "A reconcile's database transaction, commit included",
            database_duration.clone(),
        );
        registry.register("workspaces", "Workspaces by actual state", workspaces.clone());
        let agents_last_seen = Family::<AgentLabel, Gauge>::default();
        registry.register(
            "agent_last_seen_timestamp_seconds",
            "When the agent last reconciled, from the database (every replica reports the same)",
            agents_last_seen.clone(),
        );
        let sign_in_refusals = Family::<LimitLabel, Counter>::default();
        for limit in ["backoff", "address", "global"] {
            sign_in_refusals.get_or_create(&LimitLabel { limit: limit.into() }).inc_by(0);
        }
        registry.register(
            "sign_in_refusals",
            "Sign-in attempts refused with 429 before their token was checked, by the limit",
            sign_in_refusals.clone(),
        );
        let audit_write_failures = Counter::default();
        registry.register(
            "audit_write_failures",
            "Writes done whose audit entry could not be recorded",
            audit_write_failures.clone(),
        );
        Self {
            sign_in_refusals,
            audit_write_failures,
            reconciles,
            reconcile_duration,
            database_duration,
            workspaces,
            agents_last_seen,
            counted: tokio::sync::Mutex::new(None),
            registry,
        }
    }
}

impl Metrics {
    pub fn sign_in_refused(&self, limit: &str) {
        self.sign_in_refusals.get_or_create(&LimitLabel { limit: limit.into() }).inc();
    }

    pub fn audit_write_failed(&self) {
        self.audit_write_failures.inc();
    }

    /// `agent` is None when the request was not authenticated; `status` is the answer's.
    pub fn reconciled(&self, agent: Option<&str>, status: u16, took: Duration) {
        let result = match status {
            200..=299 => "success",
            401 | 403 => "unauthorized",
            400..=499 => "refused",
            _ => "error",
        };
        let labels = ReconcileLabels { agent: agent.unwrap_or("-").into(), result: result.into() };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_duration.observe(took.as_secs_f64());
    }

    pub fn database(&self, took: Duration) {
        self.database_duration.observe(took.as_secs_f64());
    }

    /// The text to serve, the workspaces counted again when the last count is stale.
    pub async fn encode(&self, store: &Store) -> StoreResult<String> {
        let mut counted = self.counted.lock().await;
        if counted.is_none_or(|at| at.elapsed() > COUNTS_FRESH_FOR) {
            let workspaces = store.workspace_counts().await?;
            self.workspaces.clear();
            for (state, count) in workspaces {
                self.workspaces.get_or_create(&StateLabel { state }).set(count);
            }
            let seen = store.agents_last_seen().await?;
            self.agents_last_seen.clear();
            for (agent, at_ms) in seen {
                self.agents_last_seen.get_or_create(&AgentLabel { agent }).set(at_ms.div_euclid(1000));
            }
            *counted = Some(Instant::now());
        }
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        Ok(text)
    }
}
