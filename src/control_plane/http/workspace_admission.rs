//! Who a workspace host's cookie admits, to which workspace (#39). Both come from the
//! database on every request, so that signing out, a disabled user or a workspace given away
//! stop the next request at once, in every process. The two reads are made together: each
//! is a hand-off to the database's thread and back, and on the benchmark those hand-offs, not
//! the tunnel, set most of a request's added latency.

use super::state::AppState;
use super::workspace_access::WorkspaceHosts;
use super::workspace_host_auth::{cookie_values, host_cookie_name};
use super::workspace_pages::unavailable;
use crate::control_plane::decisions::workspace_hosts::WorkspaceHost;
use crate::control_plane::model::{Session, Workspace};
use axum::http::HeaderMap;
use axum::response::Response;

pub enum Admission {
    /// No host cookie with a live session: the browser signs in first.
    SignInFirst,
    /// No such workspace, or not the caller's to see: the same answer for both.
    NoWorkspace,
    Admitted(Box<Admitted>),
}

pub struct Admitted {
    pub session: Session,
    /// The host cookie that admitted it.
    pub cookie: String,
    pub workspace: Workspace,
}

/// Whom the request's host cookies admit to `host`'s workspace.
pub async fn admit(
    state: &AppState,
    hosts: &WorkspaceHosts,
    host: &WorkspaceHost,
    host_name: &str,
    headers: &HeaderMap,
) -> Result<Admission, Response> {
    let mut cookies = cookie_values(headers, host_cookie_name(hosts.secure()));
    let Some(first) = cookies.next() else { return Ok(Admission::SignInFirst) };
    let (first_session, workspace) =
        tokio::join!(state.store.host_session(first, host_name), state.store.workspace_at(host));
    let mut signed_in = first_session.map_err(|e| unavailable(&e.to_string()))?.map(|session| (session, first));
    // A browser may hold more than one (an old one on a parent path): rare, read in turn.
    for cookie in cookies {
        if signed_in.is_some() {
            break;
        }
        let session = state.store.host_session(cookie, host_name).await.map_err(|e| unavailable(&e.to_string()))?;
        signed_in = session.map(|session| (session, cookie));
    }
    let Some((session, cookie)) = signed_in else { return Ok(Admission::SignInFirst) };
    match workspace.map_err(|e| unavailable(&e.to_string()))? {
        Some(workspace) if session.caller.may_see(workspace.owner_id.as_deref()) => {
            Ok(Admission::Admitted(Box::new(Admitted { session, cookie: cookie.to_string(), workspace })))
        }
        _ => Ok(Admission::NoWorkspace),
    }
}
