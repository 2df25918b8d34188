//! The control plane's web layer: the accept loop, the front door, the agents' endpoints, the
//! JSON API and the page. Routes share `state` below them; their routers merge here alone.

pub mod actions;
pub mod agent_endpoints;
pub mod agents_api;
pub mod api;
pub mod callers;
pub mod connection_limits;
pub mod front_door;
pub mod metrics;
pub mod page;
pub mod page_people;
mod page_workspaces;
pub mod people_api;
pub mod server;
pub mod sign_in_limits;
pub mod sign_in_oidc;
pub mod state;
pub mod tunnel;
pub mod tunnel_broker;
pub mod tunnel_forward;
pub mod tunnels;
pub mod ui;
pub mod ui_people;
pub mod upgrades;
pub mod validation;
pub mod workspace_access;
pub mod workspace_admission;
pub mod workspace_host_auth;
pub mod workspace_pages;
pub mod workspace_proxy;
pub mod workspace_relay;
pub mod workspace_sign_in;
pub mod workspace_streams;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderValue;
use front_door::SECURITY_HEADERS;
use state::{API, front_door};
pub use state::{AdminCredential, AppState, MAX_MANAGEMENT_BODY_BYTES};
use std::sync::Arc;
use tower_http::set_header::SetResponseHeaderLayer;

/// Every route of the control plane, each kind behind what guards it; and, when
/// `--workspaces-domain` names one, the workspaces' hosts, which reach none of them.
pub fn router(state: Arc<AppState>, body_timeout: std::time::Duration) -> Router {
    let agents = agent_endpoints::router(&state);
    let management = api::router()
        .merge(agents_api::router())
        .merge(people_api::router())
        .merge(workspace_streams::router())
        .layer(axum::middleware::from_fn_with_state(state.clone(), front_door::<{ API }>));
    let mut app = agents
        .merge(management)
        .merge(page::router(state.clone()))
        .merge(page_people::router(state.clone()))
        .merge(page_workspaces::router(state.clone()))
        .merge(sign_in_oidc::router(state.clone()))
        .merge(workspace_sign_in::router(state.clone()))
        // Every body but a reconcile's (read by hand, after its token) is small.
        .layer(DefaultBodyLimit::max(MAX_MANAGEMENT_BODY_BYTES))
        .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(body_timeout));
    for (name, value) in SECURITY_HEADERS {
        app = app.layer(SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value)));
    }
    let control_plane = app.with_state(state.clone());
    if state.workspace_hosts.is_none() {
        return control_plane;
    }
    // A workspace's requests stream for as long as they last: no body limit or timeout but
    // the stream's idle timeout, and none of the control plane's headers.
    Router::new().fallback_service(tower::service_fn(move |request: axum::extract::Request| {
        let (state, control_plane) = (state.clone(), control_plane.clone());
        async move {
            let host = front_door::request_host(request.uri(), request.headers());
            let workspaces =
                state.workspace_hosts.as_ref().is_some_and(|h| host.is_some_and(|host| h.domain.covers(host)));
            if workspaces {
                Ok(workspace_proxy::serve(state, request).await)
            } else {
                tower::ServiceExt::oneshot(control_plane, request).await
            }
        }
    }))
}
