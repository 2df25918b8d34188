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
pub mod people_api;
pub mod server;
pub mod sign_in_limits;
pub mod sign_in_oidc;
pub mod state;
pub mod tunnel;
pub mod tunnels;
pub mod ui;
pub mod ui_people;
pub mod validation;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::HeaderValue;
use front_door::SECURITY_HEADERS;
use state::{API, front_door};
pub use state::{AdminCredential, AppState, MAX_MANAGEMENT_BODY_BYTES};
use std::sync::Arc;
use tower_http::set_header::SetResponseHeaderLayer;

/// Every route of the control plane, each kind behind what guards it.
pub fn router(state: Arc<AppState>) -> Router {
    let agents = agent_endpoints::router(&state);
    let management = api::router()
        .merge(agents_api::router())
        .merge(people_api::router())
        .layer(axum::middleware::from_fn_with_state(state.clone(), front_door::<{ API }>));
    let mut app = agents
        .merge(management)
        .merge(page::router(state.clone()))
        .merge(page_people::router(state.clone()))
        .merge(sign_in_oidc::router(state.clone()))
        // Every body but a reconcile's (read by hand, after its token) is small.
        .layer(DefaultBodyLimit::max(MAX_MANAGEMENT_BODY_BYTES));
    for (name, value) in SECURITY_HEADERS {
        app = app.layer(SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value)));
    }
    app.with_state(state)
}
