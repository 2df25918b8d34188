//! Sign-in through the identity provider (`--oidc-issuer`): the start, which keeps the
//! sign-in's state, nonce and PKCE verifier under a cookie of its own and sends the browser to
//! the provider, and the callback, which takes them once, checks the state, has the code
//! exchanged and the ID token verified, and opens a session for the user it names.

use super::callers::Target;
use super::front_door::{
    cookie_value, local_path, pending_sign_in_cookie, pending_sign_in_cookie_name, session_cookie,
};
use super::page::{PageResult, too_many_sign_ins, with_cookie};
use super::state::{AppState, PAGE, front_door};
use super::ui;
use crate::control_plane::decisions::access::{Role, username_from_claims};
use crate::control_plane::identity_provider::{IdentityProvider, ProviderError};
use crate::control_plane::store::pending_sign_ins::{PendingSignIn, Taken};
use crate::control_plane::store::people::ProviderClaims;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use std::net::IpAddr;
use std::sync::Arc;

/// How long a sign-in may take at the provider.
const PENDING_FOR_SECONDS: i64 = 600;

pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/sign-in/oidc", get(start))
        .route("/sign-in/oidc/callback", get(callback))
        .layer(axum::middleware::from_fn_with_state(state, front_door::<{ PAGE }>))
}

#[derive(serde::Deserialize, Default)]
struct StartQuery {
    #[serde(default)]
    next: String,
}

/// The sign-in page again, with what went wrong, and a status.
fn refused(status: StatusCode, next: &str, problem: &str) -> Response {
    (status, Html(ui::sign_in_page(next, Some(problem), true))).into_response()
}

fn no_provider() -> Response {
    let said = "This control plane signs in with tokens only: no identity provider is set.";
    (StatusCode::NOT_FOUND, Html(ui::sign_in_page("/", Some(said), false))).into_response()
}

const START_AGAIN: &str =
    "This sign-in was not started in this browser, was used already, or took longer than 10 minutes. Sign in again.";

async fn start(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    extensions: Extensions,
    Query(query): Query<StartQuery>,
) -> PageResult {
    let Some(provider) = state.identity_provider.as_deref() else { return Ok(no_provider()) };
    let next = local_path(&query.next);
    // The sign-in's cookie must come back to the host the provider returns to: a browser on
    // another of this control plane's names starts again there.
    let own = provider.config.redirect_url.as_str();
    let own_origin = own.strip_suffix(CALLBACK_PATH).unwrap_or(own);
    let own_host = own_origin.split("://").nth(1).unwrap_or_default();
    let host = headers.get(axum::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    if !host.eq_ignore_ascii_case(own_host) {
        let again = format!("{own_origin}/sign-in/oidc?next={}", super::validation::url_part(next));
        return Ok(Redirect::to(&again).into_response());
    }
    // Each start writes a row: counted as a sign-in attempt.
    let client = state.client(&extensions);
    if let Err(too_many) = state.sign_in_limits.admit(client) {
        return Ok(too_many_sign_ins(&state, too_many, client, "the identity provider's sign-in", next));
    }
    let started = match provider.start().await {
        Ok(started) => started,
        Err(error) => {
            tracing::warn!(%error, "a sign-in could not start");
            let said =
                format!("{error}. Try again later; signed-in sessions keep working, and a token still signs in.");
            return Ok(refused(StatusCode::SERVICE_UNAVAILABLE, next, &said));
        }
    };
    let pending = PendingSignIn {
        state: started.state,
        nonce: started.nonce,
        pkce_verifier: started.pkce_verifier,
        next_path: next.to_string(),
    };
    let cookie = state.store.begin_sign_in(&pending, PENDING_FOR_SECONDS.saturating_mul(1000)).await?;
    let cookie = pending_sign_in_cookie(&cookie, PENDING_FOR_SECONDS, state.door.secure());
    Ok(with_cookie(Redirect::to(&started.authorize_url).into_response(), &cookie))
}

/// Where the provider sends the browser back.
pub const CALLBACK_PATH: &str = "/sign-in/oidc/callback";

/// What the provider sends the browser back with.
#[derive(serde::Deserialize, Default)]
struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    /// RFC 9207: the issuer that answered, when the provider says.
    iss: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

async fn callback(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    extensions: Extensions,
    Query(query): Query<CallbackQuery>,
) -> PageResult {
    let Some(provider) = state.identity_provider.as_deref() else { return Ok(no_provider()) };
    let client = state.client(&extensions);
    let secure = state.door.secure();
    let cleared = pending_sign_in_cookie("", 0, secure);
    // A callback that finds no sign-in of this browser's is refused, and only that: any page
    // can make a browser load it, so it neither counts against the address nor is audited.
    let Some(cookie) = cookie_value(&headers, pending_sign_in_cookie_name(secure)) else {
        tracing::debug!(%client, "a sign-in callback without a sign-in cookie");
        return Ok(with_cookie(refused(StatusCode::BAD_REQUEST, "/", START_AGAIN), &cleared));
    };
    let outcome = match state.store.take_sign_in(cookie, query.state.as_deref().unwrap_or_default()).await? {
        Taken::Missing => {
            tracing::debug!(%client, "a sign-in callback for no sign-in in flight");
            return Ok(with_cookie(refused(StatusCode::BAD_REQUEST, "/", START_AGAIN), &cleared));
        }
        Taken::OtherState => {
            Err(Refused::new(StatusCode::BAD_REQUEST, "/", START_AGAIN, "the state is not the sign-in's"))
        }
        Taken::Pending(pending) => finish(&state, provider, client, pending, query).await,
    };
    match outcome {
        Ok(answer) => Ok(with_cookie(answer, &cleared)),
        Err(Refused { status, next, said, why }) => {
            state.sign_in_limits.failed(client);
            tracing::info!(%client, why, "a sign-in through the identity provider was refused");
            state.audit_refused("", client, "sign-in", &format!("identity provider: {why}")).await;
            Ok(with_cookie(refused(status, &next, &said), &cleared))
        }
    }
}

/// A refused callback: what the page says, and what the log and the audit trail keep.
struct Refused {
    status: StatusCode,
    next: String,
    said: String,
    why: String,
}

impl Refused {
    fn new(status: StatusCode, next: &str, said: &str, why: impl Into<String>) -> Self {
        Self { status, next: next.into(), said: said.into(), why: why.into() }
    }
}

/// The rest of a callback whose sign-in was taken: the provider's answer, the code, the ID
/// token, the user, the session.
async fn finish(
    state: &AppState,
    provider: &IdentityProvider,
    client: IpAddr,
    pending: PendingSignIn,
    query: CallbackQuery,
) -> Result<Response, Refused> {
    let store_failed = |e: crate::control_plane::store::StoreError| {
        let said = "The control plane could not keep the sign-in; try again.";
        Refused::new(StatusCode::SERVICE_UNAVAILABLE, "/", said, e.to_string())
    };
    let next = pending.next_path.as_str();
    if query.iss.as_deref().is_some_and(|iss| iss != provider.config.issuer) {
        let said = "The answer came from another identity provider than this control plane's.";
        return Err(Refused::new(StatusCode::BAD_REQUEST, next, said, format!("iss {:?}", query.iss)));
    }
    if let Some(error) = query.error {
        let described = query.error_description.unwrap_or_default();
        let said = format!("The identity provider did not sign you in: {error} {described}");
        let why = format!("provider error {error}: {described}");
        return Err(Refused::new(StatusCode::UNAUTHORIZED, next, &said, why));
    }
    let code = query.code.filter(|c| !c.is_empty()).ok_or_else(|| {
        Refused::new(StatusCode::BAD_REQUEST, next, "The sign-in came back without a code.", "no code in the callback")
    })?;
    let verified = provider.finish(&code, &pending.pkce_verifier, &pending.nonce).await.map_err(|error| {
        let status = match error {
            ProviderError::Unreachable { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::UNAUTHORIZED,
        };
        Refused::new(status, next, &format!("Not signed in: {error}."), error.to_string())
    })?;
    let role = Role::from_groups(&verified.groups, provider.config.admin_group.as_deref());
    // An email names the user only when the provider vouches for it.
    let email = verified.email.as_deref().filter(|_| verified.email_verified);
    let username = username_from_claims(verified.preferred_username.as_deref(), email, &verified.subject);
    let claims = ProviderClaims {
        issuer: &verified.issuer,
        subject: &verified.subject,
        username: &username,
        email: verified.email.as_deref(),
        name: verified.name.as_deref(),
        role,
    };
    let user = state.store.sign_in_from_provider(&claims).await.map_err(store_failed)?;
    if user.disabled_at.is_some() {
        let said = "Your account is disabled on this control plane; ask an admin.";
        return Err(Refused::new(StatusCode::FORBIDDEN, next, said, format!("user {} is disabled", user.username)));
    }
    state.sign_in_limits.succeeded(client);
    let reference = user.reference();
    let caller = crate::control_plane::decisions::access::Caller::User(reference.clone());
    state.audit(&caller, client, "sign-in", Target::Nothing, "through the identity provider").await;
    let (cookie, _) = state.store.open_session(state.session_ttl_ms, Some(&reference)).await.map_err(store_failed)?;
    let cookie = session_cookie(&cookie, state.session_ttl_ms / 1000, state.door.secure());
    Ok(with_cookie(Html(ui::signed_in_page(&state.link(next))).into_response(), &cookie))
}
