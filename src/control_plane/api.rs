//! HTTP: the agent-facing protocol endpoints, the JSON API for agents and workspaces, and the
//! server-rendered web page.

use super::model::{Agent, NewWorkspace, OrphanFate, Workspace, now_ms};
use super::pipeline::{self, PipelineConfig};
use super::store::{Store, StoreError};
use super::ui;
use crate::protocol::{
    DesiredState, ErrorBody, ImagePullSecret, MAX_RECONCILE_BODY_BYTES, Prerequisites, ReconcileRequest,
};
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use std::sync::Arc;

pub struct AppState {
    pub store: Store,
    pub pipeline: PipelineConfig,
    /// When set, the management API and the page require `Authorization: Bearer <it>`.
    pub admin_token: Option<String>,
    pub reconcile_path: String,
    pub prerequisites_path: String,
}

/// The largest body of a management request or a page form.
pub const MAX_MANAGEMENT_BODY_BYTES: usize = 64 * 1024;

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(&state.reconcile_path, post(reconcile))
        .route(&state.prerequisites_path, get(prerequisites))
        .route("/api/v1/agents", post(register_agent))
        .route("/api/v1/agents/{agent}/image-pull-secrets", put(set_image_pull_secrets))
        .route("/api/v1/agents/{agent}/workspaces", get(list_workspaces).post(create_workspace))
        .route("/api/v1/agents/{agent}/workspaces/{name}", get(get_workspace))
        .route("/api/v1/agents/{agent}/workspaces/{name}/{action}", post(workspace_action))
        .route("/api/v1/agents/{agent}/orphans", get(list_orphans))
        .route("/api/v1/agents/{agent}/orphans/{namespace}/{name}/{action}", post(orphan_action))
        .route("/agents/{agent}", get(agent_page))
        .route("/agents/{agent}/orphans/{namespace}/{name}/{action}", post(page_orphan_action))
        .route("/agents/{agent}/workspaces/{name}/{action}", post(page_action))
        .route("/healthz", get(healthz))
        // Every body but a reconcile's (read by hand, after its token) is small.
        .layer(DefaultBodyLimit::max(MAX_MANAGEMENT_BODY_BYTES))
        .with_state(state)
}

/// 200 while the database answers and its writer runs; 503 with the reason otherwise.
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.store.health().await {
        Ok(()) => "ok".into_response(),
        Err(error) => (StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {error}\n")).into_response(),
    }
}

/// An error answer: its status and `{"error": …}`.
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Conflict(message) => ApiError(StatusCode::CONFLICT, message),
            other => {
                tracing::error!(error = %other, "store failure");
                ApiError(StatusCode::INTERNAL_SERVER_ERROR, "internal error".into())
            }
        }
    }
}

type ApiResult = Result<Response, ApiError>;

fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::BAD_REQUEST, message.into())
}

fn not_found(message: impl Into<String>) -> ApiError {
    ApiError(StatusCode::NOT_FOUND, message.into())
}

fn unauthorized() -> ApiError {
    ApiError(StatusCode::UNAUTHORIZED, "unauthorized".into())
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
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

fn authorize_admin(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    use subtle::ConstantTimeEq;
    let Some(expected) = &state.admin_token else { return Ok(()) };
    // In constant time: how much of a guess matches must not show in the answer's timing.
    let given = bearer(headers).unwrap_or_default();
    if bool::from(expected.as_bytes().ct_eq(given.as_bytes())) { Ok(()) } else { Err(unauthorized()) }
}

/// The token is checked before a byte of the body is read: an unauthenticated 64 MiB upload
/// costs the control plane nothing.
async fn reconcile(State(state): State<Arc<AppState>>, request: axum::extract::Request) -> ApiResult {
    let agent = authenticate_agent(&state, request.headers()).await?;
    let body = axum::body::to_bytes(request.into_body(), MAX_RECONCILE_BODY_BYTES).await.map_err(|_| {
        ApiError(StatusCode::PAYLOAD_TOO_LARGE, format!("a reconcile body is at most {MAX_RECONCILE_BODY_BYTES} bytes"))
    })?;
    let request: ReconcileRequest = parse(&body)?;
    pipeline::validate(&request).map_err(bad_request)?;
    let (update_type, received) = (request.update_type, request.workspace_agent_infos.len());
    let response = state.store.reconcile(&agent, request, &state.pipeline).await?;
    tracing::debug!(agent = %agent.id, %update_type, received, returned = response.workspace_rails_infos.len(), "reconciled");
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

async fn prerequisites(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    authenticate_agent(&state, &headers).await?;
    Ok(Json(Prerequisites::default()).into_response())
}

#[derive(serde::Deserialize)]
struct RegisterAgent {
    id: String,
    #[serde(default)]
    image_pull_secrets: Vec<ImagePullSecret>,
}

async fn register_agent(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Bytes) -> ApiResult {
    authorize_admin(&state, &headers)?;
    let request: RegisterAgent = parse(&body)?;
    if !is_dns_label(&request.id) {
        return Err(bad_request("agent id must be a DNS label: lowercase letters, digits and '-'"));
    }
    validate_pull_secrets(&request.image_pull_secrets)?;
    let token = state.store.create_agent(&request.id, &request.image_pull_secrets).await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": request.id, "token": token }))).into_response())
}

#[derive(serde::Deserialize)]
struct SetImagePullSecrets {
    image_pull_secrets: Vec<ImagePullSecret>,
}

async fn set_image_pull_secrets(
    State(state): State<Arc<AppState>>,
    Path(agent): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    authorize_admin(&state, &headers)?;
    let request: SetImagePullSecrets = parse(&body)?;
    validate_pull_secrets(&request.image_pull_secrets)?;
    if !state.store.set_image_pull_secrets(&agent, &request.image_pull_secrets).await? {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no agent {agent:?}")));
    }
    Ok(Json(serde_json::json!({ "id": agent, "image_pull_secrets": request.image_pull_secrets })).into_response())
}

/// Names and namespaces must be DNS names, and one name may come from one namespace only:
/// every copy lands in the workspace namespace under the source's name.
fn validate_pull_secrets(secrets: &[ImagePullSecret]) -> Result<(), ApiError> {
    let mut names = std::collections::HashMap::new();
    for secret in secrets {
        if !is_dns_subdomain(&secret.name) || secret.namespace.contains('.') || !is_dns_subdomain(&secret.namespace) {
            return Err(bad_request("image pull secrets need a DNS name and namespace"));
        }
        if let Some(other) = names.insert(&secret.name, &secret.namespace)
            && *other != secret.namespace
        {
            return Err(bad_request(format!(
                "image pull secret {} is named in both {other} and {}",
                secret.name, secret.namespace
            )));
        }
    }
    Ok(())
}

pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 40
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    s.len() <= 253 && s.split('.').all(label)
}

async fn known_agent(state: &AppState, headers: &HeaderMap, agent: &str) -> Result<(), ApiError> {
    authorize_admin(state, headers)?;
    if state.store.agent_exists(agent).await? { Ok(()) } else { Err(not_found(format!("no agent {agent:?}"))) }
}

async fn list_workspaces(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(agent): Path<String>,
) -> ApiResult {
    known_agent(&state, &headers, &agent).await?;
    Ok(Json(state.store.workspaces(&agent).await?).into_response())
}

async fn create_workspace(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(agent): Path<String>,
    body: Bytes,
) -> ApiResult {
    known_agent(&state, &headers, &agent).await?;
    let new: NewWorkspace = parse(&body)?;
    if !is_dns_label(&new.name) {
        return Err(bad_request("workspace name must be a DNS label: lowercase letters, digits and '-'"));
    }
    if new.image.trim().is_empty() {
        return Err(bad_request("image is required"));
    }
    Ok((StatusCode::CREATED, Json(state.store.create_workspace(&agent, &new).await?)).into_response())
}

async fn get_workspace(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path((agent, name)): Path<(String, String)>,
) -> ApiResult {
    authorize_admin(&state, &headers)?;
    let workspace = state.store.workspace(&agent, &name).await?;
    let workspace = workspace.ok_or_else(|| not_found(format!("no workspace {name:?} for agent {agent:?}")))?;
    Ok(Json(workspace).into_response())
}

pub fn desired_for_action(action: &str) -> Option<DesiredState> {
    match action {
        "start" => Some(DesiredState::Running),
        "stop" => Some(DesiredState::Stopped),
        "restart" => Some(DesiredState::RestartRequested),
        "terminate" => Some(DesiredState::Terminated),
        _ => None,
    }
}

async fn set_desired(
    state: &AppState,
    headers: &HeaderMap,
    (agent, name, action): (String, String, String),
) -> Result<Workspace, ApiError> {
    authorize_admin(state, headers)?;
    let desired = desired_for_action(&action)
        .ok_or_else(|| not_found(format!("unknown action {action:?}; use start, stop, restart or terminate")))?;
    let workspace = state.store.set_desired(&agent, &name, desired).await?;
    workspace.ok_or_else(|| not_found(format!("no workspace {name:?} for agent {agent:?}")))
}

async fn workspace_action(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(target): Path<(String, String, String)>,
) -> ApiResult {
    Ok(Json(set_desired(&state, &headers, target).await?).into_response())
}

async fn agent_page(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(agent): Path<String>) -> ApiResult {
    known_agent(&state, &headers, &agent).await?;
    let workspaces = state.store.workspaces(&agent).await?;
    let orphans = state.store.orphans(&agent).await?;
    Ok(axum::response::Html(ui::agent_page(&agent, &workspaces, &orphans, now_ms())).into_response())
}

async fn list_orphans(State(state): State<Arc<AppState>>, headers: HeaderMap, Path(agent): Path<String>) -> ApiResult {
    known_agent(&state, &headers, &agent).await?;
    Ok(Json(state.store.orphans(&agent).await?).into_response())
}

#[derive(serde::Deserialize, Default)]
struct Adoption {
    #[serde(default)]
    image: String,
}

/// `adopt` (with the image it runs, which the agent's report does not carry) or `terminate`.
async fn settle_orphan(
    state: &AppState,
    headers: &HeaderMap,
    (agent, namespace, name, action): (String, String, String, String),
    image: String,
) -> Result<Workspace, ApiError> {
    known_agent(state, headers, &agent).await?;
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
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(target): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult {
    let adoption: Adoption = if body.is_empty() { Adoption::default() } else { parse(&body)? };
    Ok(Json(settle_orphan(&state, &headers, target, adoption.image).await?).into_response())
}

async fn page_orphan_action(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(target): Path<(String, String, String, String)>,
    axum::extract::Form(adoption): axum::extract::Form<Adoption>,
) -> ApiResult {
    let agent = target.0.clone();
    settle_orphan(&state, &headers, target, adoption.image).await?;
    Ok(Redirect::to(&format!("/agents/{agent}")).into_response())
}

async fn page_action(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(target): Path<(String, String, String)>,
) -> ApiResult {
    let agent = target.0.clone();
    set_desired(&state, &headers, target).await?;
    Ok(Redirect::to(&format!("/agents/{agent}")).into_response())
}
