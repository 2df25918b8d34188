//! The agents' endpoints: the reconcile and the prerequisites (GitLab's protocol, with the
//! agent's Bearer token), the tunnel (`tunnel`), `/healthz` and `/metrics`. They stand outside the front door: agents
//! come through ingresses under Hosts the control plane cannot know, and no browser can send
//! their Bearer header cross-origin.

use super::state::{
    ApiError, ApiResult, AppState, authenticate_agent, bad_request, bearer, not_found, parse, unauthorized,
};
use crate::control_plane::decisions::pipeline;
use crate::control_plane::model::Agent;
use crate::control_plane::store::{hash_token, same_secret};
use crate::protocol::{MAX_RECONCILE_BODY_BYTES, Prerequisites, ReconcileRequest};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;

/// The agents' routes, on the protocol's paths as configured.
pub fn router(state: &AppState) -> Router<Arc<AppState>> {
    Router::new()
        .route(&state.reconcile_path, post(reconcile))
        .route(&state.prerequisites_path, get(prerequisites))
        .route(crate::tunnel::TUNNEL_PATH, get(super::tunnel::tunnel))
        .route(super::tunnel_broker::FORWARD_PATH, get(super::tunnel_forward::forward))
        .route("/healthz", get(healthz))
        .route("/livez", get(livez))
        .route("/metrics", get(metrics))
}

/// 200 while the database answers and its writer runs; 503 otherwise, saying which part
/// failed. The details go to the log: this endpoint answers anyone.
async fn healthz(State(state): State<Arc<AppState>>) -> Response {
    match state.store.health().await {
        Ok(()) => "ok".into_response(),
        Err(error) => {
            tracing::warn!(%error, "unhealthy");
            (StatusCode::SERVICE_UNAVAILABLE, format!("unhealthy: {}\n", error.health_label())).into_response()
        }
    }
}

/// 200 while this process can serve, though its database may not answer (a liveness probe:
/// restarting every replica heals no database outage); 503 when its SQLite writer has stopped.
async fn livez(State(state): State<Arc<AppState>>) -> Response {
    match state.store.alive() {
        true => "ok".into_response(),
        false => (StatusCode::SERVICE_UNAVAILABLE, "the database writer thread has stopped\n").into_response(),
    }
}

/// Prometheus text, for the bearer of `--metrics-token-file`'s token only: it names every
/// agent and counts the fleet's workspaces.
async fn metrics(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    let Some(wanted) = &state.metrics_token else {
        return Err(not_found("no metrics: start the control plane with --metrics-token-file"));
    };
    let given = bearer(&headers).ok_or_else(unauthorized)?;
    if !same_secret(wanted, &hash_token(given)) {
        return Err(unauthorized());
    }
    let text = state.metrics.encode(&state.store).await?;
    Ok(([(header::CONTENT_TYPE, crate::runtime::OPENMETRICS_CONTENT_TYPE)], text).into_response())
}

/// The token is checked before a byte of the body is read: an unauthenticated 64 MiB upload
/// costs the control plane nothing.
async fn reconcile(State(state): State<Arc<AppState>>, request: axum::extract::Request) -> Response {
    let started = std::time::Instant::now();
    let (agent, answer) = match authenticate_agent(&state, request.headers()).await {
        Ok(agent) => {
            // Off the reconcile's path: at most once a minute, and never worth its latency.
            if let Some(write) = state.store.agent_seen(&agent.id) {
                let id = agent.id.clone();
                tokio::spawn(async move {
                    if let Err(error) = write.await {
                        tracing::warn!(agent = %id, %error, "could not record when the agent was last seen");
                    }
                });
            }
            let answer = reconcile_for(&state, &agent, request).await;
            (Some(agent.id), answer)
        }
        Err(refused) => (None, Err(refused)),
    };
    let response = answer.unwrap_or_else(IntoResponse::into_response);
    state.metrics.reconciled(agent.as_deref(), response.status().as_u16(), started.elapsed());
    response
}

async fn reconcile_for(state: &AppState, agent: &Agent, request: axum::extract::Request) -> ApiResult {
    let body = axum::body::to_bytes(request.into_body(), MAX_RECONCILE_BODY_BYTES).await.map_err(|_| {
        ApiError(StatusCode::PAYLOAD_TOO_LARGE, format!("a reconcile body is at most {MAX_RECONCILE_BODY_BYTES} bytes"))
    })?;
    let request: ReconcileRequest = parse(&body)?;
    pipeline::validate(&request).map_err(bad_request)?;
    let (update_type, received) = (request.update_type, request.workspace_agent_infos.len());
    let started = std::time::Instant::now();
    let response = state.store.reconcile(agent, request, &state.pipeline).await;
    state.metrics.database(started.elapsed());
    let response = response?;
    tracing::debug!(agent = %agent.id, %update_type, received, returned = response.workspace_rails_infos.len(), "reconciled");
    Ok((StatusCode::CREATED, Json(response)).into_response())
}

async fn prerequisites(State(state): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    let agent = authenticate_agent(&state, &headers).await?;
    let config = state.store.agent_config(&agent.id).await?.unwrap_or_default();
    Ok(Json(Prerequisites { shared_namespace: config.shared_namespace }).into_response())
}
