//! The JSON API for workspaces and orphans (Bearer only): listed a page at a time, created,
//! read, acted on. A user reaches their own workspaces; anyone else's answers 404, as one
//! that does not exist. Orphans are the admins'.

use super::actions::{self, set_desired, settle_orphan};
use super::callers::{Admin, Asking, shown, visible_devfile, visible_workspace};
use super::state::{ApiResult, AppState, MAX_CREATE_BODY_BYTES, PageQuery, bad_request, exists, parse};
use super::validation::url_part;
use crate::control_plane::model::NewWorkspace;
use crate::control_plane::store::MAX_PAGE;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, Query, State};
use axum::http::{Extensions, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/workspaces", get(my_workspaces))
        .route(
            "/api/v1/agents/{agent}/workspaces",
            get(list_workspaces).post(create_workspace).layer(DefaultBodyLimit::max(MAX_CREATE_BODY_BYTES)),
        )
        .route("/api/v1/agents/{agent}/workspaces/{name}", get(get_workspace))
        .route("/api/v1/agents/{agent}/workspaces/{name}/devfile", get(workspace_devfile))
        .route("/api/v1/agents/{agent}/workspaces/{name}/{action}", post(workspace_action))
        .route("/api/v1/agents/{agent}/orphans", get(list_orphans))
        .route("/api/v1/agents/{agent}/orphans/{namespace}/{name}/{action}", post(orphan_action))
}

/// `Link: <path?query>; rel="next"`, relative (RFC 8288 resolves it against the request):
/// right through any proxy.
fn with_next(mut response: Response, next: Option<String>) -> Response {
    if let Some(value) = next.and_then(|next| HeaderValue::from_str(&format!("<{next}>; rel=\"next\"")).ok()) {
        response.headers_mut().insert(header::LINK, value);
    }
    response
}

/// One page of an agent's workspaces (a user's own alone); when more follow, `Link` says where.
async fn list_workspaces(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    Path(agent): Path<String>,
    Query(page): Query<PageQuery>,
) -> ApiResult {
    exists(&state, &agent).await?;
    let limit = page.limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
    let workspaces = state.store.workspaces_page(&agent, &page.after, limit, caller.listing_scope()).await?;
    let workspaces: Vec<_> = workspaces.into_iter().map(|w| shown(&state, w)).collect();
    let next = workspaces.last().filter(|_| workspaces.len() == limit).map(|last| {
        format!("/api/v1/agents/{}/workspaces?after={}&limit={limit}", url_part(&agent), url_part(&last.name))
    });
    Ok(with_next(Json(&workspaces).into_response(), next))
}

/// The caller's own workspaces across every agent, a page at a time (`after=<agent>/<name>`).
async fn my_workspaces(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    Query(page): Query<PageQuery>,
) -> ApiResult {
    let Some(user) = caller.user() else {
        return Err(bad_request(
            "the admin token owns no workspaces; list an agent's with /api/v1/agents/<agent>/workspaces",
        ));
    };
    let limit = page.limit.unwrap_or(MAX_PAGE).clamp(1, MAX_PAGE);
    let after = page.after.split_once('/').unwrap_or((page.after.as_str(), ""));
    let workspaces = state.store.workspaces_of(&user.id, after, limit).await?;
    let workspaces: Vec<_> = workspaces.into_iter().map(|w| shown(&state, w)).collect();
    let next = workspaces.last().filter(|_| workspaces.len() == limit).map(|last| {
        format!("/api/v1/workspaces?after={}%2F{}&limit={limit}", url_part(&last.agent_id), url_part(&last.name))
    });
    Ok(with_next(Json(&workspaces).into_response(), next))
}

async fn create_workspace(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(agent): Path<String>,
    body: Bytes,
) -> ApiResult {
    exists(&state, &agent).await?;
    let new: NewWorkspace = parse(&body)?;
    let workspace = actions::create_workspace(&state, &caller, state.client(&extensions), &agent, new).await?;
    Ok((StatusCode::CREATED, Json(shown(&state, workspace))).into_response())
}

async fn get_workspace(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    Path((agent, name)): Path<(String, String)>,
) -> ApiResult {
    Ok(Json(visible_workspace(&state, &caller, &agent, &name).await?).into_response())
}

/// The devfile a workspace was created from, as its user wrote it; for one created from an
/// image, the one-container devfile that image stands for.
async fn workspace_devfile(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    Path((agent, name)): Path<(String, String)>,
) -> ApiResult {
    let (_, devfile, from_image) = visible_devfile(&state, &caller, &agent, &name).await?;
    Ok(Json(serde_json::json!({ "devfile": devfile, "from_image": from_image })).into_response())
}

async fn workspace_action(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(target): Path<(String, String, String)>,
) -> ApiResult {
    let client = state.client(&extensions);
    Ok(Json(shown(&state, set_desired(&state, &caller, client, target).await?)).into_response())
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
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(target): Path<(String, String, String, String)>,
    body: Bytes,
) -> ApiResult {
    let adoption: Adoption = if body.is_empty() { Adoption::default() } else { parse(&body)? };
    let client = state.client(&extensions);
    Ok(Json(settle_orphan(&state, &caller, client, target, adoption.image).await?).into_response())
}
