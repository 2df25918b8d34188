//! The page's routes about people: one's API tokens, the users (admins), and the audit trail
//! (an admin's whole, a user's own entries).

use super::actions::{self, own_user};
use super::callers::admins_only;
use super::page::{PageResult, SignedIn, session, sign_in_first};
use super::people_api::scoped;
use super::state::{AppState, PAGE, front_door, not_found};
use super::ui_people::{self, AuditFilters};
use super::validation::url_part;
use crate::control_plane::store::audit::AuditQuery;
use axum::Router;
use axum::extract::{Form, Path, Query, State};
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect};
use axum::routing::{get, post};
use std::sync::Arc;

pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/tokens", get(tokens).post(create_token))
        .route("/tokens/{id}/revoke", post(revoke_token))
        .route("/users", get(users))
        .route("/users/{name}/{action}", post(user_action))
        .route("/audit", get(audit))
        .layer(axum::middleware::from_fn_with_state(state, front_door::<{ PAGE }>))
}

async fn tokens(State(state): State<Arc<AppState>>, headers: HeaderMap) -> PageResult {
    let Some(session) = session(&state, &headers).await? else { return Ok(sign_in_first(&state, "/tokens")) };
    let signed_in = SignedIn(session);
    let tokens = match signed_in.caller().user() {
        Some(user) => state.store.api_tokens(&user.id).await?,
        None => Vec::new(),
    };
    Ok(Html(ui_people::tokens_page(&signed_in.nav(), &tokens, None, state.store.now())).into_response())
}

#[derive(serde::Deserialize)]
struct TokenForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    days: Option<u32>,
}

/// A new token, shown on the answer to this form and never again.
async fn create_token(
    State(state): State<Arc<AppState>>,
    signed_in: SignedIn,
    extensions: Extensions,
    Form(form): Form<TokenForm>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    let caller = signed_in.caller();
    let client = state.client(&extensions);
    let (token, secret) = actions::create_token(&state, caller, client, &form.name, form.days).await?;
    let user = own_user(caller)?;
    let tokens = state.store.api_tokens(&user.id).await?;
    let page = ui_people::tokens_page(&signed_in.nav(), &tokens, Some((&token.name, &secret)), state.store.now());
    // The secret is in this answer alone: no cache may keep it.
    Ok((StatusCode::CREATED, [(axum::http::header::CACHE_CONTROL, "no-store")], Html(page)).into_response())
}

#[derive(serde::Deserialize)]
struct Csrf {
    #[serde(default)]
    csrf: String,
}

async fn revoke_token(
    State(state): State<Arc<AppState>>,
    signed_in: SignedIn,
    extensions: Extensions,
    Path(id): Path<String>,
    Form(form): Form<Csrf>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    let Some(user) = signed_in.caller().user() else {
        return Err(not_found(format!("no live token {id:?} of yours")));
    };
    actions::revoke_token(&state, signed_in.caller(), state.client(&extensions), user, &id).await?;
    Ok(Redirect::to(&state.link("/tokens")).into_response())
}

async fn users(State(state): State<Arc<AppState>>, headers: HeaderMap) -> PageResult {
    let Some(session) = session(&state, &headers).await? else { return Ok(sign_in_first(&state, "/users")) };
    let signed_in = SignedIn(session);
    if !signed_in.caller().is_admin() {
        return Err(admins_only());
    }
    let users = state.store.users().await?;
    Ok(Html(ui_people::users_page(&signed_in.nav(), &users, state.store.now())).into_response())
}

async fn user_action(
    State(state): State<Arc<AppState>>,
    signed_in: SignedIn,
    extensions: Extensions,
    Path(target): Path<(String, String)>,
    Form(form): Form<Csrf>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    if !signed_in.caller().is_admin() {
        return Err(admins_only());
    }
    actions::set_user_disabled(&state, signed_in.caller(), state.client(&extensions), target).await?;
    Ok(Redirect::to(&state.link("/users")).into_response())
}

async fn audit(State(state): State<Arc<AppState>>, headers: HeaderMap, Query(query): Query<AuditQuery>) -> PageResult {
    let Some(session) = session(&state, &headers).await? else { return Ok(sign_in_first(&state, "/audit")) };
    let signed_in = SignedIn(session);
    let clean = |v: &Option<String>| v.clone().filter(|v| !v.trim().is_empty());
    let query = AuditQuery {
        user: clean(&query.user),
        agent: clean(&query.agent),
        workspace: clean(&query.workspace),
        ..query
    };
    let query = scoped(signed_in.caller(), query);
    let events = state.store.audit(&query).await?;
    let limit = query.limit.unwrap_or(50).clamp(1, crate::control_plane::store::audit::MAX_AUDIT_PAGE);
    let next = events.last().filter(|_| events.len() >= limit).map(|last| {
        let mut next = format!("limit={limit}&before={}", url_part(&format!("{}:{}", last.at, last.id)));
        for (key, value) in [("user", &query.user), ("agent", &query.agent), ("workspace", &query.workspace)] {
            if let Some(value) = value {
                next.push_str(&format!("&{key}={}", url_part(value)));
            }
        }
        next
    });
    let filters = AuditFilters {
        user: query.user.as_deref().unwrap_or(""),
        agent: query.agent.as_deref().unwrap_or(""),
        workspace: query.workspace.as_deref().unwrap_or(""),
    };
    Ok(Html(ui_people::audit_page(&signed_in.nav(), &events, &filters, next)).into_response())
}
