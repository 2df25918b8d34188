//! HTTP: the agent-facing protocol endpoints, the JSON API for agents and workspaces, and the
//! server-rendered web page.

use super::access::{FrontDoor, Route, SECURITY_HEADERS};
use super::model::{Agent, NewWorkspace, OrphanFate, Workspace};
use super::pipeline::{self, PipelineConfig};
use super::store::{MAX_PAGE, Store, StoreError, hash_token};
use super::validation::{desired_for_action, is_dns_label, is_env_name, is_owner_name, url_part};
use crate::protocol::{ErrorBody, MAX_RECONCILE_BODY_BYTES, Prerequisites, ReconcileRequest};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;
use tower_http::set_header::SetResponseHeaderLayer;

/// Who may use the management API and sign in to the page.
#[derive(Debug, Clone)]
pub enum AdminCredential {
    /// The token in `--admin-token-file`, as its SHA-256.
    File { hash: String },
    /// The token generated on first start and stored, hashed, in the database.
    Stored,
}

impl AdminCredential {
    pub fn token(token: &str) -> Self {
        Self::File { hash: hash_token(token) }
    }
}

pub struct AppState {
    pub store: Store,
    pub pipeline: PipelineConfig,
    pub admin: AdminCredential,
    pub door: FrontDoor,
    /// How long a page session lasts.
    pub session_ttl_ms: i64,
    pub reconcile_path: String,
    pub prerequisites_path: String,
    pub metrics: super::metrics::Metrics,
    /// The SHA-256 of the token `/metrics` wants; None serves no metrics.
    pub metrics_token: Option<String>,
}

impl AppState {
    /// A state on the protocol's standard paths, with a 12-hour session, answering to any Host.
    pub fn new(store: Store, pipeline: PipelineConfig, admin: AdminCredential) -> Self {
        Self {
            store,
            pipeline,
            admin,
            door: FrontDoor { allowed_hosts: Vec::new(), scheme: "http" },
            session_ttl_ms: 12 * 3_600_000,
            reconcile_path: crate::protocol::RECONCILE_PATH.into(),
            prerequisites_path: crate::protocol::PREREQUISITES_PATH.into(),
            metrics: super::metrics::Metrics::default(),
            metrics_token: None,
        }
    }

    /// Whether `token` is the admin token.
    pub async fn is_admin(&self, token: &str) -> Result<bool, ApiError> {
        Ok(match &self.admin {
            AdminCredential::File { hash } => super::store::same_secret(hash, &hash_token(token)),
            AdminCredential::Stored => self.store.is_admin_token(token).await?,
        })
    }
}

/// The largest body of a management request or a page form.
pub const MAX_MANAGEMENT_BODY_BYTES: usize = 64 * 1024;

pub fn router(state: Arc<AppState>) -> Router {
    let agents = Router::new()
        .route(&state.reconcile_path, post(reconcile))
        .route(&state.prerequisites_path, get(prerequisites))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics));
    let management = Router::new()
        .route("/api/v1/agents/{agent}/workspaces", get(list_workspaces).post(create_workspace))
        .route("/api/v1/agents/{agent}/workspaces/{name}", get(get_workspace))
        .route("/api/v1/agents/{agent}/workspaces/{name}/{action}", post(workspace_action))
        .route("/api/v1/agents/{agent}/orphans", get(list_orphans))
        .route("/api/v1/agents/{agent}/orphans/{namespace}/{name}/{action}", post(orphan_action))
        .merge(super::agents_api::router())
        .layer(axum::middleware::from_fn_with_state(state.clone(), front_door::<{ API }>));
    let mut app = agents
        .merge(management)
        .merge(super::page::router(state.clone()))
        // Every body but a reconcile's (read by hand, after its token) is small.
        .layer(DefaultBodyLimit::max(MAX_MANAGEMENT_BODY_BYTES));
    for (name, value) in SECURITY_HEADERS {
        app = app.layer(SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value)));
    }
    app.with_state(state)
}

const API: u8 = 0;
pub(super) const PAGE: u8 = 1;

/// The front door ([`FrontDoor::judge`]) for a router of one [`Route`] kind.
pub(super) async fn front_door<const ROUTE: u8>(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let route = if ROUTE == PAGE { Route::Page } else { Route::Api };
    let authority = request.uri().authority().map(|a| a.as_str());
    match state.door.judge(route, request.method(), authority, request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::info!(method = %request.method(), path = %request.uri().path(), ?refusal, "refused at the front door");
            ApiError(refusal.status(), refusal.message().into()).into_response()
        }
    }
}

/// 200 while the database answers and its writer runs; 503 otherwise, saying which part
/// failed. The details go to the log: this endpoint answers anyone.
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.store.health().await {
        Ok(()) => "ok".into_response(),
        Err(error) => {
            tracing::warn!(%error, "unhealthy");
            (StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {}\n", error.health_label())).into_response()
        }
    }
}

/// Prometheus text, for the bearer of `--metrics-token-file`'s token only: it names every
/// agent and counts the fleet's workspaces.
async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    let Some(wanted) = &state.metrics_token else {
        return Err(not_found("no metrics: start the control plane with --metrics-token-file"));
    };
    let given = bearer(&headers).ok_or_else(unauthorized)?;
    if !super::store::same_secret(wanted, &hash_token(given)) {
        return Err(unauthorized());
    }
    let text = state.metrics.encode(&state.store).await?;
    Ok(([(header::CONTENT_TYPE, crate::runtime::OPENMETRICS_CONTENT_TYPE)], text).into_response())
}

/// An error answer: its status and `{"error": …}`.
pub struct ApiError(pub StatusCode, pub String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(message) => ApiError(StatusCode::CONFLICT, message),
            // Transient for the caller, who retries; /healthz names the cause.
            StoreError::Writer(reason) => {
                tracing::error!(%reason, "the database writer failed");
                ApiError(StatusCode::SERVICE_UNAVAILABLE, "the database writer is unavailable; retry".into())
            }
            other => {
                tracing::error!(error = %other, "store failure");
                ApiError(StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
            }
        }
    }
}

pub(super) type ApiResult = Result<Response, ApiError>;

pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message.into())
}

pub(super) fn not_found(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, message.into())
}

pub(super) fn no_agent(agent: &str) -> ApiError {
    not_found(format!("no agent {agent:?}"))
}

pub(super) fn unauthorized() -> ApiError {
    ApiError(StatusCode::UNAUTHORIZED, "unauthorized".into())
}

pub(super) fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body).map_err(|e| bad_request(format!("invalid payload: {e}")))
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get("authorization")?.to_str().ok()?.strip_prefix("Bearer ")
}

/// 401 for a missing or unknown token, the same either way: it never says whether an agent exists.
async fn authenticate_agent(state: &AppState, headers: &HeaderMap) -> Result<Agent, ApiError> {
    let token = bearer(headers).ok_or_else(unauthorized)?;
    state.store.agent_by_token(token).await?.ok_or_else(unauthorized)
}

/// The JSON API's admin check: a Bearer token, never the page's cookie.
async fn authorize_admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let given = bearer(headers).ok_or_else(unauthorized)?;
    if state.is_admin(given).await? { Ok(()) } else { Err(unauthorized()) }
}

/// A request the admin token authorizes: a handler that takes it runs only for the admin, and
/// its body, extracted after it, is read only then.
pub(super) struct Admin;

impl axum::extract::FromRequestParts<Arc<AppState>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        authorize_admin(state, &parts.headers).await.map(|()| Admin)
    }
}

/// The token is checked before a byte of the body is read: an unauthenticated 64 MiB upload
/// costs the control plane nothing.
async fn reconcile(State(state): State<Arc<AppState>>, request: axum::extract::Request) -> Response {
    let started = std::time::Instant::now();
    let (agent, answer) = match authenticate_agent(&state, request.headers()).await {
        Ok(agent) => {
            let answer = reconcile_for(&state, &agent, request).await;
            (Some(agent.id), answer)
        }
        Err(refused) => (None, Err(refused)),
    };
    let response = answer.unwrap_or_else(IntoResponse::into_response);
    state.metrics.reconciled(agent.as_deref(), response.status().as_u16(), started.elapsed());
    response
}

async fn reconcile_for(state: &AppState, agent: &Agent, request: axum::extract::Request) -> ApiResult {
    let body = axum::body::to_bytes(request.into_body(), MAX_RECONCILE_BODY_BYTES).await.map_err(|_| {
        ApiError(StatusCode::PAYLOAD_TOO_LARGE, format!("a reconcile body is at most {MAX_RECONCILE_BODY_BYTES} bytes"))
    })?;
    let request: ReconcileRequest = parse(&body)?;
    pipeline::validate(&request).map_err(bad_request)?;
    let (update_type, received) = (request.update_type, request.workspace_agent_infos.len());
    let started = std::time::Instant::now();
    let response = state.store.reconcile(agent, request, &state.pipeline).await;
    state.metrics.database(started.elapsed());
    let response = response?;
    tracing::debug!(agent = %agent.id, %update_type, received, returned = response.workspace_rails_infos.len(), "reconciled");
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

async fn prerequisites(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    let agent = authenticate_agent(&state, &headers).await?;
    let config = state.store.agent_config(&agent.id).await?.unwrap_or_default();
    Ok(Json(Prerequisites { shared_namespace: config.shared_namespace }).into_response())
}

pub(super) async fn exists(state: &AppState, agent: &str) -> Result<(), ApiError> {
    if state.store.agent_exists(agent).await? { Ok(()) } else { Err(no_agent(agent)) }
}

/// `?after=<name>&limit=<n>`: one page of workspaces in name order.
#[derive(serde::Deserialize, Default)]
pub(super) struct PageQuery {
    #[serde(default)]
    pub after: String,
    pub limit: Option<usize>,
}

/// One page; when more follow, `Link: <…?after=last>; rel="next"` says where.
async fn list_workspaces(
    _: Admin,
    State(state): State<Arc<AppState>>,
    Path(agent): Path<String>,
    Query(page): Query<PageQuery>,
) -> ApiResult {
    exists(&state, &agent).await?;
    let limit = page.limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
    let workspaces = state.store.workspaces_page(&agent, &page.after, limit).await?;
    let mut response = Json(&workspaces).into_response();
    if let Some(last) = workspaces.last().filter(|_| workspaces.len() == limit) {
        let (agent, after) = (url_part(&agent), url_part(&last.name));
        let link = format!("</api/v1/agents/{agent}/workspaces?after={after}&limit={limit}>; rel=\"next\"");
        if let Ok(value) = HeaderValue::from_str(&link) {
            response.headers_mut().insert(header::LINK, value);
        }
    }
    Ok(response)
}

async fn create_workspace(
    _: Admin,
    State(state): State<Arc<AppState>>,
    Path(agent): Path<String>,
    body: Bytes,
) -> ApiResult {
    exists(&state, &agent).await?;
    let new: NewWorkspace = parse(&body)?;
    if !is_dns_label(&new.name) {
        return Err(bad_request("workspace name must be a DNS label: lowercase letters, digits and '-'"));
    }
    if new.image.trim().is_empty() {
        return Err(bad_request("image is required"));
    }
    if let Some(name) = new.env.keys().find(|name| !is_env_name(name)) {
        return Err(bad_request(format!(
            "environment variable {name:?}: a name is letters, digits, '_', '.' and '-', not starting with a digit"
        )));
    }
    if new.owner.as_deref().is_some_and(|owner| !is_owner_name(owner)) {
        return Err(bad_request("owner must be a username: letters, digits, '_', '.' and '-', at most 255"));
    }
    Ok((StatusCode::CREATED, Json(state.store.create_workspace(&agent, &new).await?)).into_response())
}

async fn get_workspace(
    _: Admin,
    State(state): State<Arc<AppState>>,
    Path((agent, name)): Path<(String, String)>,
) -> ApiResult {
    let workspace = state.store.workspace(&agent, &name).await?;
    let workspace = workspace.ok_or_else(|| not_found(format!("no workspace {name:?} for agent {agent:?}")))?;
    Ok(Json(workspace).into_response())
}

/// Set a workspace's desired state by an action's name; the caller has authorized it.
pub(super) async fn set_desired(
    state: &AppState,
    (agent, name, action): (String, String, String),
) -> Result<Workspace, ApiError> {
    let desired = desired_for_action(&action)
        .ok_or_else(|| not_found(format!("unknown action {action:?}; use start, stop, restart or terminate")))?;
    let workspace = state.store.set_desired(&agent, &name, desired).await?;
    workspace.ok_or_else(|| not_found(format!("no workspace {name:?} for agent {agent:?}")))
}

async fn workspace_action(
    _: Admin,
    State(state): State<Arc<AppState>>,
    Path(target): Path<(String, String, String)>,
) -> ApiResult {
    Ok(Json(set_desired(&state, target).await?).into_response())
}

async fn list_orphans(_: Admin, State(state): State<Arc<AppState>>, Path(agent): Path<String>) -> ApiResult {
    exists(&state, &agent).await?;
    Ok(Json(state.store.orphans(&agent).await?).into_response())
}

#[derive(serde::Deserialize, Default)]
struct Adoption {
    #[serde(default)]
    image: String,
}

/// `adopt` (with the image it runs, which the agent's report does not carry) or `terminate`;
/// the caller has authorized it.
pub(super) async fn settle_orphan(
    state: &AppState,
    (agent, namespace, name, action): (String, String, String, String),
    image: String,
) -> Result<Workspace, ApiError> {
    exists(state, &agent).await?;
    let fate = match action.as_str() {
        "adopt" if image.trim().is_empty() => return Err(bad_request("adopting needs the image the workspace runs")),
        "adopt" => OrphanFate::Adopt { image: image.trim().to_string() },
        "terminate" => OrphanFate::Terminate,
        _ => return Err(not_found(format!("unknown action {action:?}; use adopt or terminate"))),
    };
    let workspace = state.store.settle_orphan(&agent, &namespace, &name, fate).await?;
    workspace.ok_or_else(|| not_found(format!("no orphan {namespace}/{name} for agent {agent:?}")))
}

async fn orphan_action(
    _: Admin,
    State(state): State<Arc<AppState>>,
    Path(target): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult {
    let adoption: Adoption = if body.is_empty() { Adoption::default() } else { parse(&body)? };
    Ok(Json(settle_orphan(&state, target, adoption.image).await?).into_response())
}
