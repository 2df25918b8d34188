//! `/workspace-sign-in` on the control plane's own origin (#39): a browser signed in here is
//! handed a one-time code for one workspace host it may open, and sent there with it. The
//! code is good for a minute, once, for that host alone; the host trades it for its own
//! cookie (`workspace_proxy`). The control plane's own cookie never leaves its origin.

use super::front_door::{SESSION_COOKIE, cookie_value, local_path};
use super::page::sign_in_first;
use super::state::{AppState, PAGE, front_door};
use super::ui::{document, escape};
use super::validation::url_part;
use super::workspace_host_auth::AUTH_PATH;
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

/// How long a code is good for.
const CODE_TTL_MS: i64 = 60_000;

pub fn router(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/workspace-sign-in", get(sign_in_to_host))
        .layer(axum::middleware::from_fn_with_state(state, front_door::<{ PAGE }>))
}

#[derive(serde::Deserialize)]
struct HostSignIn {
    host: String,
    /// What the workspace's host gave the browser in a cookie: the code is good only there.
    state: String,
    #[serde(default)]
    next: String,
    /// Set on the page's own reload, which a browser sends the session cookie with.
    #[serde(default)]
    again: bool,
}

async fn sign_in_to_host(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(query): Query<HostSignIn>,
) -> Response {
    let Some(hosts) = state.workspace_hosts.as_ref() else { return not_found() };
    let Some(host) = hosts.domain.workspace_host(&query.host) else { return not_found() };
    let host_name = host.name(&hosts.domain);
    if query.state.is_empty() || query.state.len() > 128 {
        return not_found();
    }
    let next = local_path(&query.next);
    let here = format!(
        "/workspace-sign-in?host={}&state={}&next={}",
        url_part(&host_name),
        url_part(&query.state),
        url_part(next)
    );
    let cookie = cookie_value(&headers, SESSION_COOKIE);
    let session = match cookie {
        Some(cookie) => match state.store.session(cookie).await {
            Ok(session) => session,
            Err(error) => return super::state::ApiError::from(error).into_response(),
        },
        None => None,
    };
    let (Some(cookie), Some(session)) = (cookie, session) else {
        // Sent here from the workspace's host, a cross-site navigation, the browser kept the
        // SameSite=Strict session cookie back. A reload this page starts is same-site.
        let cross_site = headers.get("sec-fetch-site").is_some_and(|v| v.as_bytes() == b"cross-site");
        if cross_site && !query.again {
            return reload(&format!("{here}&again=true"));
        }
        return sign_in_first(&state, &here);
    };
    match state.store.workspace_at(&host).await {
        Ok(Some(workspace)) if session.caller.may_see(workspace.owner_id.as_deref()) => {}
        Ok(_) => return not_found(),
        Err(error) => return super::state::ApiError::from(error).into_response(),
    }
    let code = match state.store.issue_host_code(cookie, &host_name, &query.state, next, CODE_TTL_MS).await {
        Ok(code) => code,
        Err(error) => return super::state::ApiError::from(error).into_response(),
    };
    let target = format!("{}://{host_name}{}{AUTH_PATH}?code={code}", hosts.scheme, hosts.port_suffix);
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(&target) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A page that loads `path` again, from this origin.
fn reload(path: &str) -> Response {
    let path = escape(path);
    let html = format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>wsync: opening a workspace</title>\
         <meta http-equiv=\"refresh\" content=\"0;url={path}\"></head><body><p><a href=\"{path}\">Continue</a></p>\
         </body></html>\n"
    );
    ([(header::CACHE_CONTROL, "no-store")], axum::response::Html(html)).into_response()
}

fn not_found() -> Response {
    let body = "<h1>No such workspace</h1><p>There is no workspace there that you may open.</p>";
    (StatusCode::NOT_FOUND, axum::response::Html(document("wsync: no such workspace", false, body))).into_response()
}
