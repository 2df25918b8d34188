//! The JSON API for workspaces and orphans (Bearer only): listed a page at a time, created,
//! read, acted on.

use super::state::{
    Admin, ApiResult, AppState, PageQuery, bad_request, exists, not_found, parse, set_desired, settle_orphan,
};
use super::validation::{is_dns_label, is_env_name, is_owner_name, url_part};
use crate::control_plane::model::NewWorkspace;
use crate::control_plane::store::MAX_PAGE;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/agents/{agent}/workspaces", get(list_workspaces).post(create_workspace))
        .route("/api/v1/agents/{agent}/workspaces/{name}", get(get_workspace))
        .route("/api/v1/agents/{agent}/workspaces/{name}/{action}", post(workspace_action))
        .route("/api/v1/agents/{agent}/orphans", get(list_orphans))
        .route("/api/v1/agents/{agent}/orphans/{namespace}/{name}/{action}", post(orphan_action))
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
        // Relative (RFC 8288 resolves it against the request): right through any proxy.
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

async fn orphan_action(
    _: Admin,
    State(state): State<Arc<AppState>>,
    Path(target): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult {
    let adoption: Adoption = if body.is_empty() { Adoption::default() } else { parse(&body)? };
    Ok(Json(settle_orphan(&state, target, adoption.image).await?).into_response())
}
