//! The agent's end of the tunnel (#39): the leader keeps one connection to the control plane
//! open (an HTTP/1.1 upgrade on its token, then HTTP/2 with the control plane asking), and
//! answers each stream the control plane asks for through `policy::dial`, the gate. The
//! cluster needs no inbound port: the agent dials out, as it does for the reconcile.
//!
//! The leader holds it, not every replica: the gate reads the cluster for each stream, and
//! the control plane keeps one tunnel per agent (a newer one closes the older), so replicas
//! would only take the tunnel from each other. A new leader opens it within its first seconds.

use super::control_plane_client::ControlPlaneClient;
use super::k8s::Cluster;
use super::metrics::{Metrics, ResultLabel};
use super::policy::dial::{NeverDialled, WorkspaceEndpoints, dial};
use super::sync::backoff::Backoff;
use super::sync::workspace::WorkspaceKey;
use crate::runtime::LockExt;
use crate::tunnel::{OpenStream, StreamRefusal, transport};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

/// Reconnects double from 1 s to 30 s, each with jitter, so agents that lost one control
/// plane do not return together.
const RECONNECT: Backoff = Backoff { first: Duration::from_secs(1), cap: Duration::from_secs(30) };
/// A tunnel that stayed up this long resets the backoff.
const STAYED_UP: Duration = Duration::from_secs(60);
/// What the gate read of a workspace is used again for this long: a browser opens many
/// streams at once, each would otherwise read the cluster three times.
const READ_FRESH: Duration = Duration::from_secs(2);
/// Workspaces whose reads are kept, at most.
const READS_KEPT: usize = 4096;

/// Judges and dials each stream.
pub struct Gate {
    cluster: Arc<Cluster>,
    never: NeverDialled,
    metrics: Arc<Metrics>,
    reads: Mutex<HashMap<WorkspaceKey, (Instant, Option<WorkspaceEndpoints>)>>,
}

impl Gate {
    pub fn new(cluster: Arc<Cluster>, never: NeverDialled, metrics: Arc<Metrics>) -> Self {
        Self { cluster, never, metrics, reads: Mutex::default() }
    }

    async fn endpoints(&self, key: &WorkspaceKey) -> Result<Option<WorkspaceEndpoints>, StreamRefusal> {
        if let Some((at, read)) = self.reads.lock_unpoisoned().get(key)
            && at.elapsed() < READ_FRESH
        {
            return Ok(read.clone());
        }
        let read = self.cluster.workspace_endpoints(key).await.map_err(|error| {
            tracing::warn!(%error, workspace = %key, "could not read a workspace for a stream");
            StreamRefusal::DialFailed("the agent could not read the workspace from the cluster".into())
        })?;
        let mut reads = self.reads.lock_unpoisoned();
        if reads.len() >= READS_KEPT {
            reads.retain(|_, (at, _)| at.elapsed() < READ_FRESH);
        }
        if reads.len() < READS_KEPT {
            reads.insert(key.clone(), (Instant::now(), read.clone()));
        }
        Ok(read)
    }

    /// Open one stream, or refuse it; each is logged and counted by its outcome.
    pub async fn open(&self, request: OpenStream) -> Result<TcpStream, StreamRefusal> {
        let opened = self.judge_and_dial(&request).await;
        let outcome = match &opened {
            Ok(_) => "opened",
            Err(refusal) => {
                let address = match refusal {
                    StreamRefusal::ForbiddenAddress { address, .. } => Some(*address),
                    _ => None,
                };
                tracing::warn!(
                    namespace = %request.namespace, workspace = %request.workspace, port = request.port,
                    refused = refusal.label(), address = ?address, "refused a tunnel stream: {refusal}"
                );
                refusal.label()
            }
        };
        self.metrics.tunnel_streams.get_or_create(&ResultLabel { result: outcome.into() }).inc();
        opened
    }

    async fn judge_and_dial(&self, request: &OpenStream) -> Result<TcpStream, StreamRefusal> {
        let key = WorkspaceKey::new(&request.namespace, &request.workspace);
        let endpoints = self.endpoints(&key).await?;
        let address = dial(request, endpoints.as_ref(), &self.never)?;
        match TcpStream::connect(address).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                Ok(stream)
            }
            Err(error) => {
                // The Pod may have moved: read it again next time.
                self.reads.lock_unpoisoned().remove(&key);
                Err(StreamRefusal::DialFailed(error.kind().to_string()))
            }
        }
    }
}

/// The addresses this agent never dials, from its own environment: its Pod's and its node's
/// (the downward API's `POD_IP` and `HOST_IP`, in the chart and the manifests) and the
/// `kubernetes` Service's, which every Pod is given.
pub fn never_dialled() -> NeverDialled {
    let named = ["POD_IP", "HOST_IP", "KUBERNETES_SERVICE_HOST"].iter().filter_map(|name| std::env::var(name).ok());
    let addresses: Vec<IpAddr> =
        named.flat_map(|value| value.split(',').filter_map(|ip| ip.trim().parse().ok()).collect::<Vec<_>>()).collect();
    NeverDialled::new(addresses)
}

/// Hold the tunnel in a task of its own, until it is aborted.
pub fn start(
    cluster: Cluster,
    control_plane: &super::control_plane_client::ControlPlaneConfig,
    metrics: &Arc<Metrics>,
) -> Result<tokio::task::JoinHandle<()>, super::error::Error> {
    let gate = Arc::new(Gate::new(Arc::new(cluster), never_dialled(), metrics.clone()));
    let control_plane = Arc::new(ControlPlaneClient::new(control_plane)?);
    Ok(tokio::spawn(hold(control_plane, gate)))
}

/// Keep the tunnel open until dropped: reconnect with jittered backoff whenever it closes.
pub async fn hold(control_plane: Arc<ControlPlaneClient>, gate: Arc<Gate>) {
    let mut failures: u32 = 0;
    loop {
        let opened_at = Instant::now();
        match control_plane.open_tunnel().await {
            Ok(upgraded) => {
                tracing::info!("opened the tunnel to the control plane");
                gate.metrics.tunnel_open.set(1);
                let serving = gate.clone();
                let dial = move |request: OpenStream| {
                    let gate = serving.clone();
                    async move { gate.open(request).await }
                };
                let ended = transport::serve_streams(upgraded, dial).await;
                gate.metrics.tunnel_open.set(0);
                match ended {
                    Ok(()) => tracing::info!("the control plane closed the tunnel"),
                    Err(error) => tracing::warn!(%error, "the tunnel broke"),
                }
            }
            Err(error) => tracing::warn!(%error, "could not open the tunnel to the control plane"),
        }
        failures = if opened_at.elapsed() >= STAYED_UP { 1 } else { failures.saturating_add(1) };
        tokio::time::sleep(jittered(RECONNECT.after(failures))).await;
    }
}

/// Between half the wait and all of it.
fn jittered(wait: Duration) -> Duration {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    let fraction = 0.5 + (random % 1000) as f64 / 2000.0;
    wait.mul_f64(fraction)
}
