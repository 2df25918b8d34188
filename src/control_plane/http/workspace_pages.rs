//! The pages a workspace's host answers itself (#39): its state, a refusal, a wait. None has a
//! script, none may be framed, none is cached; a page that waits reloads itself.

use super::ui::{document, escape};
use super::workspace_access::TooManyStreams;
use crate::control_plane::model::Workspace;
use crate::protocol::ActualState;
use crate::tunnel::transport::OpenError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

pub fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let refresh = status == StatusCode::SERVICE_UNAVAILABLE;
    let html = document(&format!("wsync: {title}"), refresh, &format!("<h1>{}</h1>{body}", escape(title)));
    with_page_headers((status, [(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

pub fn with_page_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in super::front_door::SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

pub fn no_workspace() -> Response {
    page(StatusCode::NOT_FOUND, "No such workspace", "<p>There is no workspace here that you may open.</p>")
}

pub fn unavailable(error: &str) -> Response {
    tracing::error!(error, "a workspace host could not read the database");
    page(StatusCode::SERVICE_UNAVAILABLE, "Unavailable", "<p>wsync cannot answer now; retry in a moment.</p>")
}

pub fn agent_not_connected() -> Response {
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Workspace unreachable",
        "<p>The agent that runs this workspace is not connected to wsync now. This page tries again every few \
         seconds.</p>",
    )
}

pub fn cross_site() -> Response {
    page(
        StatusCode::FORBIDDEN,
        "Refused",
        "<p>A page on another site asked for this workspace; only its own pages and links may.</p>",
    )
}

pub fn not_running(workspace: &Workspace) -> Response {
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

pub fn stream_refused(workspace: &Workspace, port: u16, error: &OpenError) -> Response {
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
        OpenError::Busy => {
            let mut response = page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Agent busy",
                "<p>The agent that runs this workspace carries all the connections it may; retry in a moment.</p>",
            );
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
        _ => page(
            StatusCode::BAD_GATEWAY,
            "Workspace unreachable",
            &format!("<p>The workspace's port {port} did not answer through its agent.</p>"),
        ),
    }
}

pub fn too_many_streams(too_many: TooManyStreams) -> Response {
    let said = match too_many {
        TooManyStreams::User(limit) => format!("You have {limit} connections open to workspaces, the most allowed."),
        TooManyStreams::Workspace(limit) => format!("This workspace has {limit} connections open, the most allowed."),
    };
    let mut response = page(StatusCode::TOO_MANY_REQUESTS, "Too many connections", &format!("<p>{said}</p>"));
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// The workspace closed its port without an answer.
pub fn bad_gateway(error: &dyn std::fmt::Display) -> Response {
    tracing::info!(%error, "a workspace did not answer through its stream");
    page(
        StatusCode::BAD_GATEWAY,
        "Workspace unreachable",
        "<p>The workspace's port closed the connection without an answer.</p>",
    )
}
