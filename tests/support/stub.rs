//! A scripted stand-in for the control plane: it records every request and answers with
//! whatever the test says. The real control plane is `wsync control-plane`.

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wsync::protocol::{
    ActualState, DesiredState, ImagePullSecret, MAX_RECONCILE_BODY_BYTES, PREREQUISITES_PATH, RECONCILE_PATH,
    ReconcileRequest, ReconcileResponse, Settings, UpdateType, WorkspaceRailsInfo,
};

use wsync::tunnel::transport::Opener;

pub const STUB_TOKEN: &str = "stub-agent-token";

#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
    pub delay: Duration,
    /// When set, the body is this many bytes, streamed without a Content-Length.
    pub streamed_bytes: usize,
    /// A `Location` header, for redirects.
    pub location: Option<String>,
}

impl Reply {
    pub fn created(response: &ReconcileResponse) -> Self {
        Self::status(201, &serde_json::to_string(response).expect("serialize"))
    }
    pub fn status(status: u16, body: &str) -> Self {
        Self { status, body: body.into(), delay: Duration::ZERO, streamed_bytes: 0, location: None }
    }
    /// A 307 to `location`.
    pub fn redirect(location: &str) -> Self {
        Self { location: Some(location.into()), ..Self::status(307, "") }
    }
    /// A 201 of `bytes` bytes, streamed: a body no honest control plane sends.
    pub fn streamed(bytes: usize) -> Self {
        Self { streamed_bytes: bytes, ..Self::status(201, "") }
    }
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub received: Instant,
    pub answered: Option<Instant>,
    pub request: ReconcileRequest,
    pub authorization: Option<String>,
}

type Responder = Box<dyn Fn(&ReconcileRequest) -> Reply + Send + Sync>;

struct Inner {
    recorded: Mutex<Vec<Recorded>>,
    responder: Mutex<Responder>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// What `GET …/prerequisites` answers, and how often it was asked.
    prerequisites_status: std::sync::atomic::AtomicU16,
    prerequisites_calls: AtomicUsize,
    /// The `shared_namespace` the prerequisites serve; empty for a namespace per workspace.
    shared_namespace: Mutex<String>,
    /// The agent's tunnel, once it opened one: the stub opens streams on it as it likes.
    tunnel: tokio::sync::watch::Sender<Option<Opener>>,
}

#[derive(Clone)]
pub struct StubControlPlane {
    inner: Arc<Inner>,
    pub url: String,
}

/// What a well-behaved control plane does: acknowledge every reported resourceVersion,
/// return every reported workspace, and hand out the configs the test registered.
#[derive(Clone, Default)]
pub struct Script {
    pub settings: Option<Settings>,
    /// (namespace, name) → config_to_apply
    pub configs: HashMap<(String, String), String>,
    /// Workspaces returned in every answer, whether reported or not.
    pub always_return: Vec<(String, String)>,
    /// Workspaces never returned, so their errors are never acknowledged.
    pub never_return: Vec<(String, String)>,
    /// (namespace, name) → the image pull secrets returned with it, as (namespace, name).
    pub image_pull_secrets: HashMap<(String, String), Vec<(String, String)>>,
}

impl Script {
    pub fn with_intervals(full_secs: u64, partial_secs: u64) -> Self {
        Self {
            settings: Some(Settings {
                full_reconciliation_interval_seconds: full_secs,
                partial_reconciliation_interval_seconds: partial_secs,
            }),
            ..Default::default()
        }
    }

    pub fn respond(&self, request: &ReconcileRequest) -> ReconcileResponse {
        let mut infos: Vec<WorkspaceRailsInfo> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for info in &request.workspace_agent_infos {
            let key = (info.namespace.clone(), info.name.clone());
            if self.never_return.contains(&key) || !seen.insert(key.clone()) {
                continue;
            }
            let rv = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.resource_version());
            infos.push(self.rails_info(&key, rv));
        }
        for key in &self.always_return {
            if seen.insert(key.clone()) {
                infos.push(self.rails_info(key, None));
            }
        }
        ReconcileResponse { workspace_rails_infos: infos, settings: self.settings }
    }

    /// What the script answers, minus the workspaces reported with an error: their errors
    /// stay unacknowledged.
    pub fn respond_unacknowledged(&self, request: &ReconcileRequest) -> ReconcileResponse {
        let mut response = self.respond(request);
        let erred: Vec<(&str, &str)> = request
            .workspace_agent_infos
            .iter()
            .filter(|i| i.error_details.is_some())
            .map(|i| (i.namespace.as_str(), i.name.as_str()))
            .collect();
        response.workspace_rails_infos.retain(|i| !erred.contains(&(i.namespace.as_str(), i.name.as_str())));
        response
    }

    fn rails_info(&self, key: &(String, String), rv: Option<String>) -> WorkspaceRailsInfo {
        WorkspaceRailsInfo {
            name: key.1.clone(),
            namespace: key.0.clone(),
            desired_state: DesiredState::Running,
            actual_state: ActualState::Running,
            deployment_resource_version: rv,
            config_to_apply: self.configs.get(key).cloned().unwrap_or_default(),
            image_pull_secrets: self
                .image_pull_secrets
                .get(key)
                .into_iter()
                .flatten()
                .map(|(namespace, name)| ImagePullSecret { namespace: namespace.clone(), name: name.clone() })
                .collect(),
        }
    }
}

impl StubControlPlane {
    pub async fn start(script: Script) -> Self {
        let responder: Responder = Box::new(move |req| Reply::created(&script.respond(req)));
        let inner = Arc::new(Inner {
            recorded: Mutex::new(Vec::new()),
            responder: Mutex::new(responder),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            prerequisites_status: std::sync::atomic::AtomicU16::new(200),
            prerequisites_calls: AtomicUsize::new(0),
            shared_namespace: Mutex::new(String::new()),
            tunnel: tokio::sync::watch::channel(None).0,
        });
        let app = axum::Router::new()
            .route(RECONCILE_PATH, post(reconcile).layer(DefaultBodyLimit::max(MAX_RECONCILE_BODY_BYTES)))
            .route(PREREQUISITES_PATH, get(prerequisites))
            .route(wsync::tunnel::TUNNEL_PATH, get(tunnel))
            .with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind stub");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move { axum::serve(listener, app).await.ok() });
        Self { inner, url }
    }

    pub fn set_script(&self, script: Script) {
        self.set_responder(move |req| Reply::created(&script.respond(req)));
    }

    pub fn set_responder(&self, responder: impl Fn(&ReconcileRequest) -> Reply + Send + Sync + 'static) {
        *self.inner.responder.lock().unwrap() = Box::new(responder);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.recorded.lock().unwrap().clone()
    }

    pub fn max_in_flight(&self) -> usize {
        self.inner.max_in_flight.load(Ordering::SeqCst)
    }

    /// Wait until a request recorded after `after` matches.
    pub async fn wait_for(
        &self,
        what: &str,
        after: usize,
        timeout: Duration,
        matches: impl Fn(&Recorded) -> bool,
    ) -> (usize, Recorded) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = self.requests().into_iter().enumerate().skip(after).find(|(_, r)| matches(r)) {
                return found;
            }
            if Instant::now() > deadline {
                let seen: Vec<String> = self.requests().iter().skip(after).map(summary).collect();
                panic!("timed out after {timeout:?} waiting for {what}; requests since #{after}: {seen:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn set_prerequisites_status(&self, status: u16) {
        self.inner.prerequisites_status.store(status, Ordering::SeqCst);
    }

    pub fn set_shared_namespace(&self, namespace: &str) {
        *self.inner.shared_namespace.lock().unwrap() = namespace.to_string();
    }

    pub fn prerequisites_calls(&self) -> usize {
        self.inner.prerequisites_calls.load(Ordering::SeqCst)
    }

    /// The agent's tunnel, once it opened one (within `timeout`).
    pub async fn tunnel(&self, timeout: Duration) -> Opener {
        let mut opened = self.inner.tunnel.subscribe();
        let waited = tokio::time::timeout(timeout, opened.wait_for(Option::is_some)).await;
        let opener = waited.expect("the agent opened its tunnel").expect("the stub is up").clone();
        opener.expect("a tunnel")
    }

    pub fn count(&self) -> usize {
        self.inner.recorded.lock().unwrap().len()
    }
}

pub fn summary(r: &Recorded) -> String {
    let names: Vec<String> = r
        .request
        .workspace_agent_infos
        .iter()
        .map(|i| {
            let mut s = format!("{}/{}", i.namespace, i.name);
            if let Some(d) = &i.latest_k8s_deployment_info {
                s += &format!("@{}", d.resource_version().as_deref().unwrap_or("?"));
            }
            if i.error_details.is_some() {
                s += "!error";
            }
            s
        })
        .collect();
    format!("{} {:?}", r.request.update_type, names)
}

pub fn is_full(r: &Recorded) -> bool {
    r.request.update_type == UpdateType::Full
}

/// The agent's tunnel: any token, an upgrade, and the stub as the HTTP/2 client.
async fn tunnel(State(inner): State<Arc<Inner>>, request: axum::extract::Request) -> Response {
    let upgraded = hyper::upgrade::on(request);
    tokio::spawn(async move {
        let Ok(upgraded) = upgraded.await else { return };
        if let Ok((opener, driver)) = Opener::handshake(hyper_util::rt::TokioIo::new(upgraded)).await {
            inner.tunnel.send_replace(Some(opener));
            let _ = driver.await;
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "upgrade")
        .header("upgrade", wsync::tunnel::UPGRADE_PROTOCOL)
        .body(axum::body::Body::empty())
        .unwrap_or_default()
}

async fn prerequisites(State(inner): State<Arc<Inner>>) -> Response {
    inner.prerequisites_calls.fetch_add(1, Ordering::SeqCst);
    let status = StatusCode::from_u16(inner.prerequisites_status.load(Ordering::SeqCst)).unwrap_or(StatusCode::OK);
    let shared_namespace = inner.shared_namespace.lock().unwrap().clone();
    (status, axum::Json(serde_json::json!({"shared_namespace": shared_namespace, "unknown_field": true})))
        .into_response()
}

async fn reconcile(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let received = Instant::now();
    let Ok(request) = serde_json::from_slice::<ReconcileRequest>(&body) else {
        return (StatusCode::BAD_REQUEST, r#"{"error":"invalid payload"}"#).into_response();
    };
    let now_in_flight = inner.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    inner.max_in_flight.fetch_max(now_in_flight, Ordering::SeqCst);
    // Decrements even when the agent gives up and the handler is dropped mid-delay.
    let _in_flight = InFlight(inner.clone());
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
    let index = {
        let mut recorded = inner.recorded.lock().unwrap();
        recorded.push(Recorded { received, answered: None, request: request.clone(), authorization });
        recorded.len() - 1
    };
    let reply = (inner.responder.lock().unwrap())(&request);
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    inner.recorded.lock().unwrap()[index].answered = Some(Instant::now());
    let status = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if reply.streamed_bytes > 0 {
        const CHUNK: usize = 1 << 20;
        let chunks = (0..reply.streamed_bytes.div_ceil(CHUNK))
            .map(|_| Ok::<_, std::io::Error>(Bytes::from_static(&[b' '; CHUNK])));
        let body = axum::body::Body::from_stream(futures::stream::iter(chunks));
        return (status, [("content-type", "application/json")], body).into_response();
    }
    if let Some(location) = reply.location {
        return (status, [("location", location)], reply.body).into_response();
    }
    (status, [("content-type", "application/json")], reply.body).into_response()
}

struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}
