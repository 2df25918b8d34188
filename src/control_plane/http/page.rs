//! The web page's routes: sign in (a session cookie, HttpOnly and SameSite=Strict), a user's
//! workspaces and the form that creates one, the agents and their workspaces (admins), and
//! the forms behind the buttons, each with the session's CSRF token. The front door
//! ([`super::front_door`]) has judged every request.

use super::actions::{set_desired, settle_orphan};
use super::callers::{Target, admins_only};
use super::front_door::{SESSION_COOKIE, cookie_value, local_path, session_cookie};
use super::state::{ApiError, AppState, PAGE, PageQuery, exists, front_door, not_found, unauthorized};
use super::ui;
use crate::control_plane::decisions::access::Caller;
use crate::control_plane::model::Session;
use crate::control_plane::store::MAX_PAGE;
use axum::Router;
use axum::extract::{Form, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use std::sync::Arc;

pub type PageResult = Result<Response, ApiError>;

/// Workspaces on one page.
const PAGE_SIZE: usize = 100;

pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(home))
        .route("/sign-in", get(sign_in_form).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/agents/{agent}", get(agent_page))
        .route("/agents/{agent}/orphans/{namespace}/{name}/{action}", post(orphan_action))
        .route("/agents/{agent}/workspaces/{name}/{action}", post(workspace_action))
        .layer(axum::middleware::from_fn_with_state(state, front_door::<{ PAGE }>))
}

/// The session the request's cookie names, if it is live.
pub async fn session(state: &AppState, headers: &HeaderMap) -> Result<Option<Session>, ApiError> {
    match cookie_value(headers, SESSION_COOKIE) {
        Some(cookie) => Ok(state.store.session(cookie).await?),
        None => Ok(None),
    }
}

/// To the sign-in form, and back to `path` after it.
pub fn sign_in_first(state: &AppState, path: &str) -> Response {
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
pub struct SignedIn(pub Session);

impl FromRequestParts<Arc<AppState>> for SignedIn {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        session(state, &parts.headers).await?.map(SignedIn).ok_or_else(unauthorized)
    }
}

impl SignedIn {
    pub fn caller(&self) -> &Caller {
        &self.0.caller
    }

    /// The header's view of who is signed in.
    pub fn nav(&self) -> ui::Nav<'_> {
        ui::Nav { csrf: &self.0.csrf_token, who: self.0.caller.name(), admin: self.0.caller.is_admin() }
    }

    /// The form's CSRF token against the session's, compared in constant time.
    pub fn check(&self, csrf: &str) -> Result<(), ApiError> {
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

/// `/?after=<agent>/<name>`: a page of the user's own workspaces.
#[derive(serde::Deserialize, Default)]
struct HomeQuery {
    #[serde(default)]
    after: String,
}

async fn home(State(state): State<Arc<AppState>>, headers: HeaderMap, Query(query): Query<HomeQuery>) -> PageResult {
    let Some(session) = session(&state, &headers).await? else { return Ok(sign_in_first(&state, "/")) };
    Ok(Html(home_page(&state, &SignedIn(session), &query.after, None).await?).into_response())
}

pub async fn home_page(
    state: &AppState,
    signed_in: &SignedIn,
    after: &str,
    problem: Option<&str>,
) -> Result<String, ApiError> {
    let agents = state.store.agent_ids().await?;
    let (mine, more) = match signed_in.caller().user() {
        Some(user) => {
            let after = after.split_once('/').unwrap_or((after, ""));
            let mine = state.store.workspaces_of(&user.id, after, PAGE_SIZE).await?;
            let mine: Vec<_> = mine.into_iter().map(|w| super::callers::shown(state, w)).collect();
            let more = mine.last().filter(|_| mine.len() == PAGE_SIZE).map(|w| format!("{}/{}", w.agent_id, w.name));
            (Some(mine), more)
        }
        None => (None, None),
    };
    let view = ui::HomeView { nav: signed_in.nav(), mine: mine.as_deref(), more, agents: &agents, problem };
    Ok(ui::home_page(&view, state.store.now()))
}

#[derive(serde::Deserialize, Default)]
struct SignInQuery {
    #[serde(default)]
    next: String,
}

async fn sign_in_form(State(state): State<Arc<AppState>>, Query(query): Query<SignInQuery>) -> Response {
    Html(ui::sign_in_page(local_path(&query.next), None, state.signs_in_with_provider())).into_response()
}

#[derive(serde::Deserialize)]
struct SignIn {
    token: String,
    #[serde(default)]
    next: String,
}

async fn sign_in(State(state): State<Arc<AppState>>, extensions: Extensions, Form(form): Form<SignIn>) -> PageResult {
    let next = local_path(&form.next);
    let provider = state.signs_in_with_provider();
    // Counted before the token is checked, so that guessing is slow whatever the guess.
    let client = state.client(&extensions);
    if let Err(refused) = state.sign_in_limits.admit(client) {
        return Ok(too_many_sign_ins(&state, refused, client, "the page's sign-in", next));
    }
    let Some(caller) = state.caller_by_token(form.token.trim()).await? else {
        state.sign_in_limits.failed(client);
        tracing::info!(%client, "a sign-in with a wrong token was refused");
        state.audit_refused("", client, "sign-in", "a token that is not live").await;
        let page = ui::sign_in_page(
            next,
            Some("That token is not one this control plane knows, or it has expired."),
            provider,
        );
        return Ok((StatusCode::UNAUTHORIZED, Html(page)).into_response());
    };
    state.sign_in_limits.succeeded(client);
    state.audit(&caller, client, "sign-in", Target::Nothing, "with a token").await;
    state.open_session_for(caller.user(), next).await
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
    extensions: Extensions,
    Form(form): Form<Csrf>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    if let Some(cookie) = cookie_value(&headers, SESSION_COOKIE) {
        state.store.close_session(cookie).await?;
    }
    state.audit(signed_in.caller(), state.client(&extensions), "sign-out", Target::Nothing, "").await;
    let cleared = session_cookie("", 0, state.door.secure());
    Ok(with_cookie(Redirect::to(&state.link("/sign-in")).into_response(), &cleared))
}

/// The response with one more cookie set (appended: an answer may set two).
pub fn with_cookie(mut response: Response, cookie: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
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
    let signed_in = SignedIn(session);
    // A user's workspaces are on their own page; an agent's whole list is the admins'.
    if !signed_in.caller().is_admin() {
        return Err(not_found(format!("no agent {agent:?}")));
    }
    exists(&state, &agent).await?;
    let limit = page.limit.unwrap_or(PAGE_SIZE).clamp(1, MAX_PAGE);
    let workspaces = state.store.workspaces_page(&agent, &page.after, limit, None).await?;
    let workspaces: Vec<_> = workspaces.into_iter().map(|w| super::callers::shown(&state, w)).collect();
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
        nav: signed_in.nav(),
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
    extensions: Extensions,
    Path(target): Path<(String, String, String, String)>,
    Form(form): Form<OrphanForm>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    if !signed_in.caller().is_admin() {
        return Err(admins_only());
    }
    let agent = target.0.clone();
    settle_orphan(&state, signed_in.caller(), state.client(&extensions), target, form.image).await?;
    Ok(Redirect::to(&state.link(&format!("/agents/{agent}"))).into_response())
}

#[derive(serde::Deserialize)]
struct ActionForm {
    #[serde(default)]
    csrf: String,
    /// The page the button was on, to go back to.
    #[serde(default)]
    next: String,
}

async fn workspace_action(
    State(state): State<Arc<AppState>>,
    signed_in: SignedIn,
    extensions: Extensions,
    Path(target): Path<(String, String, String)>,
    Form(form): Form<ActionForm>,
) -> PageResult {
    signed_in.check(&form.csrf)?;
    let back = if form.next.is_empty() { format!("/agents/{}", target.0) } else { local_path(&form.next).to_string() };
    set_desired(&state, signed_in.caller(), state.client(&extensions), target).await?;
    Ok(Redirect::to(&state.link(&back)).into_response())
}

/// The sign-in page again, after its limits refused an attempt: 429, when to retry, and why.
pub fn too_many_sign_ins(
    state: &AppState,
    refused: super::sign_in_limits::TooMany,
    client: std::net::IpAddr,
    what: &str,
    next: &str,
) -> Response {
    let (status, retry_after) = state.refused_sign_in(refused, client, what);
    let said = format!("Too many sign-in attempts; try again in {} s.", refused.retry_after_seconds());
    let page = ui::sign_in_page(next, Some(&said), state.signs_in_with_provider());
    (status, retry_after, Html(page)).into_response()
}

impl AppState {
    /// Open a session for a user (or the admin token's holder) and go to `next` with its cookie.
    pub async fn open_session_for(
        &self,
        user: Option<&crate::control_plane::decisions::access::UserRef>,
        next: &str,
    ) -> PageResult {
        let (cookie, _) = self.store.open_session(self.session_ttl_ms, user).await?;
        let cookie = session_cookie(&cookie, self.session_ttl_ms / 1000, self.door.secure());
        Ok(with_cookie(Redirect::to(&self.link(next)).into_response(), &cookie))
    }
}
