//! A workspace's host (#39): every request to a host under `--workspaces-domain` comes here,
//! and never to the control plane's own routes. Its owner (or an admin) signed in to the
//! control plane is handed a one-time code for the host (`workspace_sign_in`), which the host
//! trades for its own cookie; then each request is a stream through the agent's tunnel to the
//! workspace's port, its body and answer streamed, a WebSocket spliced both ways.
//!
//! What the workspace serves is its user's code: none of the control plane's headers or
//! cookies go with it, and the host's cookie is taken out of what the workspace is sent.

use super::state::AppState;
use super::ui::{document, escape};
use super::workspace_access::{TooManyStreams, Watch, WorkspaceHosts};
use super::workspace_relay::Forwarded;
use crate::control_plane::decisions::access::Caller;
use crate::control_plane::decisions::workspace_hosts::WorkspaceHost;
use crate::control_plane::model::{Session, Workspace};
use crate::protocol::ActualState;
use crate::tunnel::OpenStream;
use crate::tunnel::transport::OpenError;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// Where the host trades a code for its cookie. The workspace never sees this path.
pub const AUTH_PATH: &str = "/.wsync/auth";
/// How many of the host's cookies a request may carry that are tried (a sibling host may
/// have planted some without `__Host-`).
const COOKIES_TRIED: usize = 4;

/// The host's cookie's name: `__Host-` prefixed over TLS, so no sibling host can set it.
pub fn host_cookie_name(secure: bool) -> &'static str {
    if secure { "__Host-wsync_workspace" } else { "wsync_workspace" }
}

/// The host's cookie: unreadable by the workspace's scripts, host-only (no Domain), sent on
/// top-level navigations from elsewhere (Lax), over TLS only when the hosts are served so.
fn host_cookie(value: &str, max_age_seconds: i64, secure: bool) -> String {
    let secure_attribute = if secure { "; Secure" } else { "" };
    let name = host_cookie_name(secure);
    format!("{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure_attribute}", max_age_seconds.max(0))
}

/// Every value of cookie `name` the request carries, the first few.
fn cookie_values<'a>(headers: &'a HeaderMap, name: &'a str) -> impl Iterator<Item = &'a str> {
    let pairs = headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';'));
    pairs.filter_map(|pair| pair.trim().split_once('=')).filter(move |(key, _)| *key == name).map(|(_, v)| v)
}

/// Answer one request to a workspace's host.
pub async fn serve(state: Arc<AppState>, request: Request) -> Response {
    let Some(hosts) = state.workspace_hosts.as_ref() else { return page(StatusCode::NOT_FOUND, "Not found", "") };
    let named = request
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).map(str::to_string));
    let Some(host) = named.as_deref().and_then(|named| hosts.domain.workspace_host(named)) else {
        return no_workspace();
    };
    let host_name = host.name(&hosts.domain);
    if request.uri().path() == AUTH_PATH {
        return redeem(&state, hosts, &host_name, request.uri().query().unwrap_or_default()).await;
    }
    let session = match host_session(&state, hosts, &host_name, request.headers()).await {
        Ok(session) => session,
        Err(response) => return response,
    };
    let Some(session) = session else { return sign_in_first(hosts, &host_name, &request) };
    let workspace = match state.store.workspace_at(&host).await {
        Ok(Some(workspace)) if session.caller.may_see(workspace.owner_id.as_deref()) => workspace,
        Ok(_) => return no_workspace(),
        Err(error) => return unavailable(&error.to_string()),
    };
    open(&state, hosts, &session.caller, &workspace, &host, &host_name, request).await
}

/// The live session behind one of the request's host cookies, if any.
async fn host_session(
    state: &AppState,
    hosts: &WorkspaceHosts,
    host_name: &str,
    headers: &HeaderMap,
) -> Result<Option<Session>, Response> {
    for cookie in cookie_values(headers, host_cookie_name(hosts.secure())).take(COOKIES_TRIED) {
        match state.store.host_session(cookie, host_name).await {
            Ok(Some(session)) => return Ok(Some(session)),
            Ok(None) => {}
            Err(error) => return Err(unavailable(&error.to_string())),
        }
    }
    Ok(None)
}

/// `/.wsync/auth?code=…`: the code traded for the host's cookie, once, then on to the path
/// the sign-in began at.
async fn redeem(state: &AppState, hosts: &WorkspaceHosts, host_name: &str, query: &str) -> Response {
    let code = url::form_urlencoded::parse(query.as_bytes()).find(|(k, _)| k == "code").map(|(_, v)| v.into_owned());
    let Some(code) = code.filter(|c| !c.is_empty() && c.len() <= 128) else {
        return page(StatusCode::BAD_REQUEST, "Sign-in link incomplete", "<p>This link carries no sign-in code.</p>");
    };
    match state.store.redeem_host_code(&code, host_name, state.session_ttl_ms).await {
        Ok(Some((cookie, next))) => {
            let next = super::front_door::local_path(&next).to_string();
            let max_age = state.session_ttl_ms / 1000;
            let mut response = StatusCode::SEE_OTHER.into_response();
            let headers = response.headers_mut();
            if let Ok(location) = HeaderValue::from_str(&next) {
                headers.insert(header::LOCATION, location);
            }
            if let Ok(cookie) = HeaderValue::from_str(&host_cookie(&cookie, max_age, hosts.secure())) {
                headers.insert(header::SET_COOKIE, cookie);
            }
            headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
            response
        }
        Ok(None) => {
            let again = format!("{}/", hosts.control_plane_origin);
            let body = format!(
                "<p>This sign-in link was used already, has expired, or is not for this workspace. \
                 <a href=\"{}\">Open the workspace again from wsync</a>.</p>",
                escape(&again)
            );
            page(StatusCode::BAD_REQUEST, "Sign-in link not valid", &body)
        }
        Err(error) => unavailable(&error.to_string()),
    }
}

/// No host cookie: a page load goes to the control plane to sign in (and comes back with a
/// code); anything else is told to.
fn sign_in_first(hosts: &WorkspaceHosts, host_name: &str, request: &Request) -> Response {
    let next = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let target = format!(
        "{}/workspace-sign-in?host={}&next={}",
        hosts.control_plane_origin,
        super::validation::url_part(host_name),
        super::validation::url_part(next)
    );
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return page(StatusCode::UNAUTHORIZED, "Sign in first", "<p>Open this workspace from wsync to sign in.</p>");
    }
    let mut response = StatusCode::SEE_OTHER.into_response();
    if let Ok(location) = HeaderValue::from_str(&target) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    with_page_headers(response)
}

/// Open a stream to the workspace's port and pass the request through it.
async fn open(
    state: &Arc<AppState>,
    hosts: &Arc<WorkspaceHosts>,
    caller: &Caller,
    workspace: &Workspace,
    host: &WorkspaceHost,
    host_name: &str,
    request: Request,
) -> Response {
    if workspace.actual_state != ActualState::Running {
        return not_running(workspace);
    }
    let Some(opener) = state.tunnels.opener(&workspace.agent_id) else {
        return page(
            StatusCode::SERVICE_UNAVAILABLE,
            "Workspace unreachable",
            "<p>The agent that runs this workspace is not connected to wsync now. This page tries again every few \
             seconds.</p>",
        );
    };
    let who = caller.user_id().unwrap_or(crate::control_plane::decisions::access::ADMIN_TOKEN_ACTOR);
    let permit = match hosts.limits.admit(who, &workspace.agent_id, &workspace.name) {
        Ok(permit) => permit,
        Err(too_many) => return too_many_streams(too_many),
    };
    let asked =
        OpenStream { namespace: workspace.namespace.clone(), workspace: workspace.name.clone(), port: host.port };
    let stream = match opener.open(&asked).await {
        Ok(stream) => stream,
        Err(error) => return stream_refused(workspace, host.port, &error),
    };
    hosts.activity.touch(&workspace.agent_id, &workspace.name);
    let client = state.client(request.extensions());
    let forwarded =
        Forwarded { host: host_name, scheme: hosts.scheme, client, cookie: host_cookie_name(hosts.secure()) };
    let watch = Watch::new(hosts.clone(), &workspace.agent_id, &workspace.name, permit);
    super::workspace_relay::forward(stream, request, &forwarded, watch).await
}

fn not_running(workspace: &Workspace) -> Response {
    let state = workspace.actual_state.as_str();
    let starting = matches!(workspace.actual_state, ActualState::CreationRequested | ActualState::Starting);
    let body = format!(
        "<p>Workspace <b>{}</b> is <b>{}</b>{}.</p>",
        escape(&workspace.name),
        escape(state),
        if starting { "; this page reloads until it is running" } else { "; start it from wsync to open it" }
    );
    let mut response = page(StatusCode::SERVICE_UNAVAILABLE, &format!("{} is {state}", workspace.name), &body);
    if starting {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
    }
    response
}

fn stream_refused(workspace: &Workspace, port: u16, error: &OpenError) -> Response {
    tracing::info!(agent = %workspace.agent_id, workspace = %workspace.name, port, %error, "a workspace stream was not opened");
    match error {
        OpenError::Refused { label, .. } if label == "undeclared_port" => page(
            StatusCode::NOT_FOUND,
            "No such port",
            &format!("<p>Workspace <b>{}</b> declares no port {port}.</p>", escape(&workspace.name)),
        ),
        OpenError::Refused { label, .. } if label == "no_pod" => page(
            StatusCode::SERVICE_UNAVAILABLE,
            "Workspace starting",
            "<p>The workspace has no ready Pod yet; this page reloads until it has.</p>",
        ),
        OpenError::Busy => too_many_streams(TooManyStreams::Workspace(crate::tunnel::transport::MAX_STREAMS as usize)),
        _ => page(
            StatusCode::BAD_GATEWAY,
            "Workspace unreachable",
            &format!("<p>The workspace's port {port} did not answer through its agent.</p>"),
        ),
    }
}

fn too_many_streams(too_many: TooManyStreams) -> Response {
    let said = match too_many {
        TooManyStreams::User(limit) => format!("You have {limit} connections open to workspaces, the most allowed."),
        TooManyStreams::Workspace(limit) => format!("This workspace has {limit} connections open, the most allowed."),
    };
    let mut response = page(StatusCode::TOO_MANY_REQUESTS, "Too many connections", &format!("<p>{said}</p>"));
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn no_workspace() -> Response {
    page(StatusCode::NOT_FOUND, "No such workspace", "<p>There is no workspace here that you may open.</p>")
}

fn unavailable(error: &str) -> Response {
    tracing::error!(error, "a workspace host could not read the database");
    page(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", "<p>wsync cannot answer now; retry in a moment.</p>")
}

/// One of the host's own pages: no script, not framed, never cached, reloaded when it says
/// it waits.
fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let refresh = status == StatusCode::SERVICE_UNAVAILABLE;
    let html = document(&format!("wsync: {title}"), refresh, &format!("<h1>{}</h1>{body}", escape(title)));
    with_page_headers((status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

fn with_page_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in super::front_door::SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
