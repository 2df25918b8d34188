//! The web page's routes: sign in with the admin token (a session cookie, HttpOnly and
//! SameSite=Strict), the agents and their workspaces, and the forms behind the buttons, each
//! with the session's CSRF token. The front door ([`super::front_door`]) has judged every request.

use super::front_door::{SESSION_COOKIE, cookie_value, local_path, session_cookie};
use super::state::{ApiError, AppState, PAGE, PageQuery, exists, front_door, set_desired, settle_orphan, unauthorized};
use super::ui;
use crate::control_plane::model::Session;
use crate::control_plane::store::MAX_PAGE;
use axum::Router;
use axum::extract::{Form, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use std::sync::Arc;

type PageResult = Result<Response, ApiError>;

/// Workspaces on one page.
const PAGE_SIZE: usize = 100;

pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(index))
        .route("/sign-in", get(sign_in_form).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/agents/{agent}", get(agent_page))
        .route("/agents/{agent}/orphans/{namespace}/{name}/{action}", post(orphan_action))
        .route("/agents/{agent}/workspaces/{name}/{action}", post(workspace_action))
        .layer(axum::middleware::from_fn_with_state(state, front_door::<{ PAGE }>))
}

/// The session the request's cookie names, if it is live.
async fn session(state: &AppState, headers: &HeaderMap) -> Result<Option<Session>, ApiError> {
    match cookie_value(headers, SESSION_COOKIE) {
        Some(cookie) => Ok(state.store.session(cookie).await?),
        None => Ok(None),
    }
}

/// To the sign-in form, and back to `path` after it.
fn sign_in_first(state: &AppState, path: &str) -> Response {
    let next: String = path
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"/-_.".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect();
    Redirect::to(&state.link(&format!("/sign-in?next={next}"))).into_response()
}

/// A live session, from the cookie alone: a form's handler takes it before its `Form`, so a
/// request without one is answered 401 before its body is waited for or read.
struct SignedIn(Session);

impl FromRequestParts<Arc<AppState>> for SignedIn {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        session(state, &parts.headers).await?.map(SignedIn).ok_or_else(unauthorized)
    }
}

impl SignedIn {
    /// The form's CSRF token against the session's, compared in constant time.
    fn check(&self, csrf: &str) -> Result<(), ApiError> {
        if crate::control_plane::store::same_secret(&self.0.csrf_token, csrf) {
            Ok(())
        } else {
            Err(ApiError(
                StatusCode::FORBIDDEN,
                "the form's CSRF token does not match the session; reload the page".into(),
            ))
        }
    }
}

async fn index(State(state): State<Arc<AppState>>, headers: HeaderMap) -> PageResult {
    let Some(session) = session(&state, &headers).await? else { return Ok(sign_in_first(&state, "/")) };
    let agents = state.store.agent_ids().await?;
    Ok(Html(ui::index_page(&agents, &session.csrf_token)).into_response())
}

#[derive(serde::Deserialize, Default)]
struct SignInQuery {
    #[serde(default)]
    next: String,
}

async fn sign_in_form(Query(query): Query<SignInQuery>) -> Response {
    Html(ui::sign_in_page(local_path(&query.next), None)).into_response()
}

#[derive(serde::Deserialize)]
struct SignIn {
    token: String,
    #[serde(default)]
    next: String,
}

async fn sign_in(
    State(state): State<Arc<AppState>>,
    extensions: axum::http::Extensions,
    Form(form): Form<SignIn>,
) -> PageResult {
    let next = local_path(&form.next);
    // Counted before the token is checked, so that guessing is slow whatever the guess.
    let client = state.client(&extensions);
    if let Err(refused) = state.sign_in_limits.admit(client) {
        let (status, retry_after) = state.refused_sign_in(refused, client, "the page's sign-in");
        let said = format!("Too many sign-in attempts; try again in {} s.", refused.retry_after_seconds());
        return Ok((status, retry_after, Html(ui::sign_in_page(next, Some(&said)))).into_response());
    }
    if !state.is_admin(form.token.trim()).await? {
        state.sign_in_limits.failed(client);
        tracing::info!(%client, "a sign-in with a wrong admin token was refused");
        let page = ui::sign_in_page(next, Some("That is not the admin token."));
        return Ok((StatusCode::UNAUTHORIZED, Html(page)).into_response());
    }
    state.sign_in_limits.succeeded(client);
    let (cookie, _) = state.store.open_session(state.session_ttl_ms).await?;
    let cookie = session_cookie(&cookie, state.session_ttl_ms / 1000, state.door.secure());
    Ok(with_cookie(Redirect::to(&state.link(next)).into_response(), &cookie))
}

#[derive(serde::Deserialize)]
struct Csrf {
    #[serde(default)]
    csrf: String,
}

async fn sign_out(
    State(state): State<Arc<AppState>>,
    signed_in: SignedIn,
    headers: HeaderMap,
    Form(form): Form<Csrf>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    if let Some(cookie) = cookie_value(&headers, SESSION_COOKIE) {
        state.store.close_session(cookie).await?;
    }
    let cleared = session_cookie("", 0, state.door.secure());
    Ok(with_cookie(Redirect::to(&state.link("/sign-in")).into_response(), &cleared))
}

fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

async fn agent_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(agent): Path<String>,
    Query(page): Query<PageQuery>,
) -> PageResult {
    let Some(session) = session(&state, &headers).await? else {
        return Ok(sign_in_first(&state, &format!("/agents/{agent}")));
    };
    exists(&state, &agent).await?;
    let limit = page.limit.unwrap_or(PAGE_SIZE).clamp(1, MAX_PAGE);
    let workspaces = state.store.workspaces_page(&agent, &page.after, limit).await?;
    let more = workspaces.last().filter(|_| workspaces.len() == limit).map(|w| w.name.as_str());
    let orphans = state.store.orphans(&agent).await?;
    let settings = state.store.agent_config(&agent).await?.unwrap_or_default();
    let settings = crate::yaml::to_string(&settings).unwrap_or_default();
    let history = match (workspaces.first(), workspaces.last()) {
        (Some(first), Some(last)) => state.store.error_history(&agent, &first.name, &last.name).await?,
        _ => Vec::new(),
    };
    let view = ui::AgentView {
        agent: &agent,
        workspaces: &workspaces,
        more,
        orphans: &orphans,
        csrf: &session.csrf_token,
        settings: &settings,
        history: &history,
    };
    Ok(Html(ui::agent_page(&view, state.store.now())).into_response())
}

#[derive(serde::Deserialize)]
struct OrphanForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    image: String,
}

async fn orphan_action(
    State(state): State<Arc<AppState>>,
    signed_in: SignedIn,
    Path(target): Path<(String, String, String, String)>,
    Form(form): Form<OrphanForm>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    let agent = target.0.clone();
    settle_orphan(&state, target, form.image).await?;
    Ok(Redirect::to(&state.link(&format!("/agents/{agent}"))).into_response())
}

async fn workspace_action(
    State(state): State<Arc<AppState>>,
    signed_in: SignedIn,
    Path(target): Path<(String, String, String)>,
    Form(form): Form<Csrf>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    let agent = target.0.clone();
    set_desired(&state, target).await?;
    Ok(Redirect::to(&state.link(&format!("/agents/{agent}"))).into_response())
}
