//! The JSON API for agents: register, tokens (rotate, revoke), image pull secrets, and
//! GitLab's workspace settings. Behind the front door, for admins alone; each write audited.

use super::callers::{Admin, Target};
use super::state::{ApiResult, AppState, bad_request, no_agent, parse};
use super::validation::{is_dns_label, validate_pull_secrets};
use crate::control_plane::decisions::agent_config::AgentConfig;
use crate::protocol::ImagePullSecret;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::Extensions;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post, put};
use axum::{Json, Router};
use std::sync::Arc;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/agents", post(register_agent))
        .route("/api/v1/agents/{agent}/rotate-token", post(rotate_token))
        .route("/api/v1/agents/{agent}/revoke", post(revoke_agent))
        .route("/api/v1/agents/{agent}/image-pull-secrets", put(set_image_pull_secrets))
        .route("/api/v1/agents/{agent}/config", get(agent_config).put(set_agent_config))
}

#[derive(serde::Deserialize)]
struct RegisterAgent {
    id: String,
    #[serde(default)]
    image_pull_secrets: Vec<ImagePullSecret>,
    /// GitLab's workspace settings; its defaults when left out.
    #[serde(default)]
    config: Option<AgentConfig>,
}

async fn register_agent(
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    body: Bytes,
) -> ApiResult {
    let request: RegisterAgent = parse(&body)?;
    if !is_dns_label(&request.id) {
        return Err(bad_request("agent id must be a DNS label: lowercase letters, digits and '-'"));
    }
    validate_pull_secrets(&request.image_pull_secrets).map_err(bad_request)?;
    let config = request.config.unwrap_or_default();
    config.validate().map_err(bad_request)?;
    let token = state.store.create_agent_with(&request.id, &request.image_pull_secrets, &config).await?;
    state.audit(&caller, state.client(&extensions), "agent.register", Target::Agent(&request.id), "").await;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "id": request.id, "token": token }))).into_response())
}

#[derive(serde::Deserialize)]
struct SetImagePullSecrets {
    image_pull_secrets: Vec<ImagePullSecret>,
}

async fn set_image_pull_secrets(
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(agent): Path<String>,
    body: Bytes,
) -> ApiResult {
    let request: SetImagePullSecrets = parse(&body)?;
    validate_pull_secrets(&request.image_pull_secrets).map_err(bad_request)?;
    if !state.store.set_image_pull_secrets(&agent, &request.image_pull_secrets).await? {
        return Err(no_agent(&agent));
    }
    state.audit(&caller, state.client(&extensions), "agent.image-pull-secrets", Target::Agent(&agent), "").await;
    Ok(Json(serde_json::json!({ "id": agent, "image_pull_secrets": request.image_pull_secrets })).into_response())
}

#[derive(serde::Deserialize)]
struct Rotation {
    /// How long the replaced token keeps working.
    #[serde(default = "default_grace_seconds")]
    grace_seconds: u64,
}

fn default_grace_seconds() -> u64 {
    3600
}

async fn rotate_token(
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(agent): Path<String>,
    body: Bytes,
) -> ApiResult {
    let rotation: Rotation = parse(&body)?;
    let grace_ms = i64::try_from(rotation.grace_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let token = state.store.rotate_agent_token(&agent, grace_ms).await?;
    let token = token.ok_or_else(|| no_agent(&agent))?;
    let grace = format!("previous token valid {} s", rotation.grace_seconds);
    state.audit(&caller, state.client(&extensions), "agent.rotate-token", Target::Agent(&agent), &grace).await;
    Ok(Json(serde_json::json!({ "id": agent, "token": token, "previous_token_valid_seconds": rotation.grace_seconds }))
        .into_response())
}

async fn revoke_agent(
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(agent): Path<String>,
) -> ApiResult {
    if !state.store.revoke_agent(&agent).await? {
        return Err(no_agent(&agent));
    }
    state.audit(&caller, state.client(&extensions), "agent.revoke", Target::Agent(&agent), "").await;
    Ok(Json(serde_json::json!({ "id": agent, "revoked": true })).into_response())
}

/// The settings new workspaces get; the existing ones keep those they were created under.
async fn agent_config(_: Admin, State(state): State<Arc<AppState>>, Path(agent): Path<String>) -> ApiResult {
    let config = state.store.agent_config(&agent).await?.ok_or_else(|| no_agent(&agent))?;
    Ok(Json(config).into_response())
}

async fn set_agent_config(
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(agent): Path<String>,
    body: Bytes,
) -> ApiResult {
    let config: AgentConfig = parse(&body)?;
    config.validate().map_err(bad_request)?;
    if !state.store.set_agent_config(&agent, &config).await? {
        return Err(no_agent(&agent));
    }
    state.audit(&caller, state.client(&extensions), "agent.config", Target::Agent(&agent), "").await;
    Ok(Json(config).into_response())
}
