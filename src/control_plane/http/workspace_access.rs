//! What serving the workspaces' hosts shares, below the routes that use it (#39): where the
//! hosts are, how many streams a user and a workspace may hold, each stream's idle timeout,
//! and the workspaces' activity, written at most once a minute each.

use crate::control_plane::decisions::workspace_hosts::WorkspacesDomain;
use crate::control_plane::store::Store;
use crate::runtime::LockExt;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A workspace's activity is written at most this often.
pub const ACTIVITY_WRITE_EVERY: Duration = Duration::from_secs(60);
/// Whether a stream's caller still may hold it.
pub type Recheck = Arc<dyn Fn() -> futures::future::BoxFuture<'static, bool> + Send + Sync>;

/// The workspaces' hosts, when `--workspaces-domain` names their domain.
pub struct WorkspaceHosts {
    pub domain: WorkspacesDomain,
    /// `https` or `http`: what browsers speak to the hosts, as to the control plane.
    pub scheme: &'static str,
    /// `:8443`, or empty on the scheme's own port: the control plane's public port.
    pub port_suffix: String,
    /// Where browsers sign in: the control plane's own origin.
    pub control_plane_origin: String,
}

/// What every stream to a workspace counts in, whether through its host or the CLI's.
pub struct WorkspaceStreams {
    pub limits: StreamLimits,
    pub activity: Activity,
    /// How often a stream that lives on checks that whoever opened it still may: signed in,
    /// not disabled, the token live, the workspace theirs (`--tunnel-recheck`).
    pub recheck_every: Duration,
}

impl WorkspaceHosts {
    /// The hosts under `domain`, on the control plane's scheme and port (`own_origin`), and
    /// never its own host or one above it: its cookie would reach them.
    pub fn new(domain: &str, own_origin: &str) -> Result<Self, String> {
        let domain = WorkspacesDomain::parse(domain)?;
        let origin = url::Url::parse(own_origin).map_err(|e| format!("{own_origin}: {e}"))?;
        let own_host = origin.host_str().unwrap_or_default().to_ascii_lowercase();
        if own_host == domain.as_str() || domain.covers(&own_host) {
            return Err(format!(
                "--workspaces-domain {}: the control plane's own host {own_host} may not be it or under it, or \
                 workspaces would share its origin; give a domain of their own",
                domain.as_str()
            ));
        }
        tracing::info!(domain = domain.as_str(), "serving the workspaces' ports on hosts of their own");
        Ok(Self {
            domain,
            scheme: if origin.scheme() == "https" { "https" } else { "http" },
            port_suffix: origin.port().map(|port| format!(":{port}")).unwrap_or_default(),
            control_plane_origin: own_origin.trim_end_matches('/').to_string(),
        })
    }

    /// The URL of port `port` of workspace `workspace` of agent `agent`.
    pub fn url(&self, agent: &str, workspace: &str, port: u16) -> String {
        format!("{}://{}{}/", self.scheme, self.domain.host(agent, workspace, port), self.port_suffix)
    }

    /// A host's origin, as its pages' requests name it.
    pub fn origin(&self, host_name: &str) -> String {
        format!("{}://{host_name}{}", self.scheme, self.port_suffix)
    }

    /// Cookies are `Secure` (and `__Host-`) when the hosts are served over TLS.
    pub fn secure(&self) -> bool {
        self.scheme == "https"
    }
}

impl WorkspaceStreams {
    /// `limits`: streams per user, per workspace, and the idle timeout (a second at least).
    pub fn new(limits: (usize, usize, Duration), recheck_every: Duration, store: Store) -> Self {
        let (per_user, per_workspace, idle) = limits;
        Self {
            limits: StreamLimits::new(per_user, per_workspace, idle.max(Duration::from_secs(1))),
            activity: Activity::new(store),
            recheck_every: recheck_every.max(Duration::from_millis(100)),
        }
    }
}

/// Streams open at once, per user and per workspace, in this process.
pub struct StreamLimits {
    pub per_user: usize,
    pub per_workspace: usize,
    /// Streams idle both ways this long are closed.
    pub idle_timeout: Duration,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// Why a stream was not given a place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooManyStreams {
    User(usize),
    Workspace(usize),
}

/// One stream's place in its user's and its workspace's counts, given back when dropped.
pub struct StreamPermit {
    open: Arc<Mutex<HashMap<String, usize>>>,
    keys: [String; 2],
}

impl StreamLimits {
    pub fn new(per_user: usize, per_workspace: usize, idle_timeout: Duration) -> Self {
        Self { per_user, per_workspace, idle_timeout, open: Arc::default() }
    }

    /// A place for one more stream of `user` (an id, or the admin token's holder) to the
    /// workspace `agent`/`name`, or which limit it would pass.
    pub fn admit(&self, user: &str, agent: &str, name: &str) -> Result<StreamPermit, TooManyStreams> {
        let keys = [format!("user\0{user}"), format!("workspace\0{agent}\0{name}")];
        let mut open = self.open.lock_unpoisoned();
        let count = |key: &String| open.get(key).copied().unwrap_or(0);
        if count(&keys[0]) >= self.per_user {
            return Err(TooManyStreams::User(self.per_user));
        }
        if count(&keys[1]) >= self.per_workspace {
            return Err(TooManyStreams::Workspace(self.per_workspace));
        }
        for key in &keys {
            *open.entry(key.clone()).or_insert(0) += 1;
        }
        drop(open);
        Ok(StreamPermit { open: self.open.clone(), keys })
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = self.open.lock_unpoisoned();
        for key in &self.keys {
            if let Some(count) = open.get_mut(key) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    open.remove(key);
                }
            }
        }
    }
}

/// When each workspace's activity was last written by this process.
pub struct Activity {
    store: Store,
    written: Mutex<HashMap<(String, String), Instant>>,
}

impl Activity {
    pub fn new(store: Store) -> Self {
        Self { store, written: Mutex::default() }
    }

    /// The workspace was used now: written unless this process wrote it within the minute.
    pub fn touch(&self, agent: &str, name: &str) {
        {
            let mut written = self.written.lock_unpoisoned();
            let key = (agent.to_string(), name.to_string());
            if written.get(&key).is_some_and(|at| at.elapsed() < ACTIVITY_WRITE_EVERY) {
                return;
            }
            if written.len() > 10_000 {
                written.retain(|_, at| at.elapsed() < ACTIVITY_WRITE_EVERY);
            }
            written.insert(key, Instant::now());
        }
        let (store, agent, name) = (self.store.clone(), agent.to_string(), name.to_string());
        tokio::spawn(async move {
            if let Err(error) = store.record_activity(&agent, &name, store.now()).await {
                tracing::warn!(%error, agent, workspace = name, "a workspace's activity could not be written");
            }
        });
    }
}

/// What watches a stream while it lives: its place in the limits (given back when the last
/// task holding it ends), its idle timeout, and the workspace's activity.
#[derive(Clone)]
pub struct Watch {
    streams: Arc<WorkspaceStreams>,
    agent: Arc<str>,
    workspace: Arc<str>,
    recheck: Recheck,
    _permit: Arc<StreamPermit>,
}

impl Watch {
    pub fn new(
        streams: Arc<WorkspaceStreams>,
        agent: &str,
        workspace: &str,
        permit: StreamPermit,
        recheck: Recheck,
    ) -> Self {
        Self { streams, agent: agent.into(), workspace: workspace.into(), recheck, _permit: Arc::new(permit) }
    }

    /// Resolves once the stream has moved no bytes for the idle timeout, or its caller may no
    /// longer hold it; marks the workspace active whenever it moved bytes.
    pub async fn until_idle(self, moved: Arc<AtomicBool>) {
        let streams = &self.streams;
        let activity = || streams.activity.touch(&self.agent, &self.workspace);
        tokio::select! {
            () = watch_stream(moved, streams.limits.idle_timeout, activity) => {}
            () = revoked(&self.recheck, streams.recheck_every) => tracing::info!(
                agent = %self.agent, workspace = %self.workspace,
                "closed a stream whose caller may no longer open the workspace"
            ),
        }
    }
}

/// A byte stream that notes whether bytes moved since it was last asked: the proxy's
/// watchdog reads it for the idle timeout and the workspace's activity.
pub struct Watched<S> {
    inner: S,
    moved: Arc<AtomicBool>,
}

impl<S> Watched<S> {
    pub fn new(inner: S) -> (Self, Arc<AtomicBool>) {
        let moved = Arc::new(AtomicBool::new(true));
        (Self { inner, moved: moved.clone() }, moved)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.moved.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.moved.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Resolves once a stream has moved no bytes for `idle`.
pub async fn idle_for(moved: Arc<AtomicBool>, idle: Duration) {
    watch_stream(moved, idle, || {}).await
}

/// Resolves once the recheck says no; a recheck that fails (the database) keeps the stream.
async fn revoked(recheck: &Recheck, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        if !recheck().await {
            return;
        }
    }
}

/// Runs beside a stream until it has moved no bytes for `idle`, marking the workspace active
/// whenever it has: the caller drops the stream when this returns.
async fn watch_stream(moved: Arc<AtomicBool>, idle: Duration, activity: impl Fn()) {
    let tick = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(15));
    let mut quiet_since = Instant::now();
    loop {
        tokio::time::sleep(tick).await;
        if moved.swap(false, Ordering::Relaxed) {
            quiet_since = Instant::now();
            activity();
        } else if quiet_since.elapsed() >= idle {
            return;
        }
    }
}
