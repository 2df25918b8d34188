//! The JSON API for people: who am I, users (admins), personal tokens (one's own), and the
//! audit trail (an admin's whole, a user's own entries).

use super::actions::{self, own_user};
use super::callers::{Admin, Asking, Target};
use super::state::{ApiError, ApiResult, AppState, bad_request, not_found, parse};
use crate::control_plane::decisions::access::{Caller, Role, is_username, token_days};
use crate::control_plane::store::audit::AuditQuery;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Extensions, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/v1/whoami", get(whoami))
        .route("/api/v1/users", get(list_users).post(create_user))
        .route("/api/v1/users/{name}", axum::routing::delete(delete_user))
        .route("/api/v1/users/{name}/{action}", post(user_action))
        .route("/api/v1/tokens", get(list_tokens).post(create_token))
        .route("/api/v1/tokens/{id}/revoke", post(revoke_token))
        .route("/api/v1/audit", get(audit))
}

async fn whoami(Asking(caller): Asking) -> ApiResult {
    let user = caller.user().map(|u| u.username.clone());
    let role = if caller.is_admin() { Role::Admin } else { Role::User };
    Ok(Json(serde_json::json!({ "username": user, "role": role, "admin_token": caller == Caller::AdminToken }))
        .into_response())
}

async fn list_users(_: Admin, State(state): State<Arc<AppState>>) -> ApiResult {
    Ok(Json(state.store.users().await?).into_response())
}

#[derive(serde::Deserialize)]
struct NewUser {
    username: String,
    #[serde(default)]
    admin: bool,
    /// How long the first token lives, in days.
    token_days: Option<u32>,
}

/// A user an admin creates, with a first token shown once: the way to have users without
/// an identity provider.
async fn create_user(
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    body: Bytes,
) -> ApiResult {
    let new: NewUser = parse(&body)?;
    if !is_username(&new.username) {
        return Err(bad_request(
            "a username is 1 to 64 letters, digits, '_', '.' and '-', starting with a letter or digit",
        ));
    }
    let days = token_days(new.token_days).map_err(bad_request)?;
    let role = if new.admin { Role::Admin } else { Role::User };
    let (user, token, claimed) = state.store.create_local_user(&new.username, role, days).await?;
    let detail = format!("role {}; {claimed} earlier workspaces of this name became theirs", role.as_str());
    state
        .audit(
            &caller,
            state.client(&extensions),
            "user.create",
            Target::Nothing,
            &format!("{} ({detail})", user.username),
        )
        .await;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "user": user, "token": token, "claimed_workspaces": claimed })))
        .into_response())
}

fn no_user(name: &str) -> ApiError {
    not_found(format!("no user {name:?}"))
}

async fn user_action(
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(target): Path<(String, String)>,
) -> ApiResult {
    let user = actions::set_user_disabled(&state, &caller, state.client(&extensions), target).await?;
    Ok(Json(user).into_response())
}

async fn delete_user(
    Admin(caller): Admin,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(name): Path<String>,
) -> ApiResult {
    if !state.store.delete_user(&name).await? {
        return Err(no_user(&name));
    }
    state.audit(&caller, state.client(&extensions), "user.delete", Target::Nothing, &name).await;
    Ok(Json(serde_json::json!({ "username": name, "deleted": true })).into_response())
}

async fn list_tokens(Asking(caller): Asking, State(state): State<Arc<AppState>>) -> ApiResult {
    Ok(Json(state.store.api_tokens(&own_user(&caller)?.id).await?).into_response())
}

#[derive(serde::Deserialize)]
struct NewToken {
    name: String,
    days: Option<u32>,
}

async fn create_token(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    body: Bytes,
) -> ApiResult {
    let new: NewToken = parse(&body)?;
    let client = state.client(&extensions);
    let (token, secret) = actions::create_token(&state, &caller, client, &new.name, new.days).await?;
    Ok((StatusCode::CREATED, Json(serde_json::json!({ "token": secret, "details": token }))).into_response())
}

async fn revoke_token(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    extensions: Extensions,
    Path(id): Path<String>,
) -> ApiResult {
    let user = own_user(&caller)?;
    actions::revoke_token(&state, &caller, state.client(&extensions), user, &id).await?;
    Ok(Json(serde_json::json!({ "id": id, "revoked": true })).into_response())
}

/// A page of the trail; a user's own entries alone, whatever they filter by.
pub fn scoped(caller: &Caller, mut query: AuditQuery) -> AuditQuery {
    if !caller.is_admin() {
        query.actor_id = Some(caller.user_id().unwrap_or("-").to_string());
    }
    query
}

async fn audit(
    Asking(caller): Asking,
    State(state): State<Arc<AppState>>,
    Query(query): Query<AuditQuery>,
) -> ApiResult {
    Ok(Json(state.store.audit(&scoped(&caller, query)).await?).into_response())
}
