//! Who is asking a workspace's host (#39): its own cookie, and how a browser gets one. A page
//! load without one is sent to the control plane's `/workspace-sign-in` with a fresh state,
//! which the host also gives the browser in a cookie of its own; the control plane sends it
//! back with a one-time code bound to that state, and `/.wsync/auth` trades the code for the
//! host's cookie only in the browser that holds the state. A code made for one browser is
//! worth nothing in another (no one can sign a victim in to the attacker's workspace).

use super::state::AppState;
use super::ui::escape;
use super::validation::url_part;
use super::workspace_access::WorkspaceHosts;
use super::workspace_pages::{page, unavailable, with_page_headers};
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Where the host trades a code for its cookie. The workspace never sees this path.
pub const AUTH_PATH: &str = "/.wsync/auth";
/// How many of one cookie a request may carry that are tried (a sibling host may have
/// planted some without `__Host-`).
const COOKIES_TRIED: usize = 4;
/// How long a sign-in's state is kept by the browser.
const STATE_MAX_AGE_SECONDS: i64 = 600;

/// The host's cookie's name: `__Host-` prefixed over TLS, so no sibling host can set it.
pub fn host_cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-wsync_workspace" } else { "wsync_workspace" }
}

fn state_cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-wsync_workspace_state" } else { "wsync_workspace_state" }
}

/// A cookie of the host's: unreadable by the workspace's scripts, host-only (no Domain), sent
/// on top-level navigations from elsewhere (Lax), over TLS only when the hosts are served so.
fn cookie(name: &str, value: &str, max_age_seconds: i64, secure: bool) -> Option<HeaderValue> {
    let secure_attribute = if secure { "; Secure" } else { "" };
    let set =
        format!("{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure_attribute}", max_age_seconds.max(0));
    HeaderValue::from_str(&set).ok()
}

/// Every value of cookie `name` the request carries, the first few; read as bytes, so that
/// a cookie that is not ASCII (the workspace's own, say) hides none of the others.
pub fn cookie_values<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> {
    let pairs = headers.get_all(header::COOKIE).iter().flat_map(|v| v.as_bytes().split(|b| *b == b';'));
    let pairs = pairs.filter_map(|pair| std::str::from_utf8(pair).ok());
    let values = pairs.filter_map(|pair| pair.trim().split_once('=')).filter(move |(key, _)| *key == name);
    values.map(|(_, value)| value).take(COOKIES_TRIED)
}

/// `/.wsync/auth?code=…`: the code traded for the host's cookie, once, in the browser that
/// holds its state, then on to the path the sign-in began at.
pub async fn redeem(
    state: &AppState,
    hosts: &WorkspaceHosts,
    host_name: &str,
    headers: &HeaderMap,
    query: &str,
) -> Response {
    let code = url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "code").map(|(_, v)| v.into_owned());
    let Some(code) = code.filter(|c| !c.is_empty() && c.len() <= 128) else {
        return page(StatusCode::BAD_REQUEST, "Sign-in link incomplete", "<p>This link carries no sign-in code.</p>");
    };
    let secure = hosts.secure();
    let states: Vec<&str> = cookie_values(headers, state_cookie_name(secure)).collect();
    match state.store.redeem_host_code(&code, host_name, &states, state.session_ttl_ms).await {
        Ok(Some((session, next))) => {
            let next = super::front_door::local_path(&next).to_string();
            let mut response = StatusCode::SEE_OTHER.into_response();
            let headers = response.headers_mut();
            if let Ok(location) = HeaderValue::from_str(&next) {
                headers.insert(header::LOCATION, location);
            }
            let cookies = [
                cookie(host_cookie_name(secure), &session, state.session_ttl_ms / 1000, secure),
                cookie(state_cookie_name(secure), "", 0, secure),
            ];
            for set in cookies.into_iter().flatten() {
                headers.append(header::SET_COOKIE, set);
            }
            headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            with_page_headers(response)
        }
        Ok(None) => {
            let again = format!("{}/", hosts.control_plane_origin);
            let body = format!(
                "<p>This sign-in link was used already, has expired, or was made for another browser or \
                 workspace. <a href=\"{}\">Open the workspace again from wsync</a>.</p>",
                escape(&again)
            );
            page(StatusCode::BAD_REQUEST, "Sign-in link not valid", &body)
        }
        Err(error) => unavailable(&error.to_string()),
    }
}

/// No host cookie: a page load goes to the control plane to sign in, with a fresh state
/// this browser keeps; anything else is told to.
pub fn sign_in_first(hosts: &WorkspaceHosts, host_name: &str, request: &Request) -> Response {
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return page(StatusCode::UNAUTHORIZED, "Sign in first", "<p>Open this workspace from wsync to sign in.</p>");
    }
    let Ok(sign_in_state) = crate::control_plane::store::new_token() else {
        return unavailable("no randomness for a sign-in's state");
    };
    let next = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let target = format!(
        "{}/workspace-sign-in?host={}&state={sign_in_state}&next={}",
        hosts.control_plane_origin,
        url_part(host_name),
        url_part(next)
    );
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(&target) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    let secure = hosts.secure();
    if let Some(set) = cookie(state_cookie_name(secure), &sign_in_state, STATE_MAX_AGE_SECONDS, secure) {
        response.headers_mut().append(header::SET_COOKIE, set);
    }
    with_page_headers(response)
}

/// A request another site's page made: a write, an upgrade (a WebSocket), or anything but a
/// navigation when the browser says it came from elsewhere. Every workspace host is the same
/// site as every other, so the Lax cookie alone would not keep one workspace's pages from
/// driving another's.
pub fn from_another_site(request: &Request, own_origin: &str) -> bool {
    let headers = request.headers();
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let writes = !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let upgrades = headers.contains_key(header::UPGRADE);
    if (writes || upgrades) && text("origin").is_some_and(|origin| !origin.eq_ignore_ascii_case(own_origin)) {
        return true;
    }
    let elsewhere = matches!(text("sec-fetch-site"), Some("same-site" | "cross-site"));
    elsewhere && text("sec-fetch-mode") != Some("navigate")
}
