//! The agents' tunnels (#39): an agent asks for `Upgrade: wsync-tunnel` on its own token, and
//! the connection becomes HTTP/2 with the control plane as the client (`tunnel::transport`).
//! One tunnel per agent in this process (`tunnels`): a newer one closes the older, so an agent
//! holds one connection here however often it asks. A token that stops signing for its
//! agent (revoked, or rotated past its grace) closes the tunnel within a recheck interval.

use super::state::{AppState, authenticate_agent, bearer};
use crate::tunnel::UPGRADE_PROTOCOL;
use crate::tunnel::transport::Opener;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use std::sync::Arc;

/// `GET` with `Upgrade: wsync-tunnel` and the agent's token: 101, then the tunnel.
pub async fn tunnel(State(state): State<Arc<AppState>>, request: axum::extract::Request) -> Response {
    let agent = match authenticate_agent(&state, request.headers()).await {
        Ok(agent) => agent,
        Err(refused) => return refused.into_response(),
    };
    if let Some(refused) = super::upgrades::refused_unless(request.headers(), UPGRADE_PROTOCOL, "the tunnel") {
        return refused;
    }
    let token = bearer(request.headers()).unwrap_or_default().to_string();
    let upgraded = hyper::upgrade::on(request);
    tokio::spawn(hold(state.clone(), agent.id, token, upgraded));
    super::upgrades::switching_to(UPGRADE_PROTOCOL)
}

/// Hold one tunnel until it closes, or until its token no longer signs for its agent.
async fn hold(state: Arc<AppState>, agent: String, token: String, upgraded: hyper::upgrade::OnUpgrade) {
    let upgraded = match upgraded.await {
        Ok(upgraded) => upgraded,
        Err(error) => return tracing::debug!(%error, %agent, "a tunnel's upgrade failed"),
    };
    let (opener, mut driver) = match Opener::handshake(TokioIo::new(upgraded)).await {
        Ok(started) => started,
        Err(error) => return tracing::info!(%error, %agent, "a tunnel's HTTP/2 handshake failed"),
    };
    let generation = state.tunnels.insert(&agent, opener, driver.abort_handle());
    tracing::info!(%agent, "an agent's tunnel opened");
    // Where the other processes find it, written again at every recheck: a lost write heals.
    let holder = state.broker.holder(generation);
    let record = |holder: &Option<crate::control_plane::store::tunnel_registry::TunnelHolder>| {
        let (state, agent, holder) = (state.clone(), agent.clone(), holder.clone());
        async move {
            let Some(holder) = holder else { return };
            if let Err(error) = state.store.hold_tunnel(&agent, &holder).await {
                tracing::warn!(%error, %agent, "could not record this process as the holder of an agent's tunnel");
            }
        }
    };
    record(&holder).await;
    let mut recheck = tokio::time::interval(state.tunnel_recheck);
    recheck.tick().await;
    // The token must be confirmed again within three rechecks: a database that stops
    // answering closes the tunnel, instead of keeping a revoked one open for the outage.
    let mut confirmed = tokio::time::Instant::now();
    let unconfirmed_for = state.tunnel_recheck.saturating_mul(3);
    loop {
        tokio::select! {
            _ = &mut driver => {
                tracing::info!(%agent, "an agent's tunnel closed");
                break;
            }
            _ = recheck.tick() => match tokio::time::timeout(state.tunnel_recheck, state.store.agent_by_token(&token)).await {
                Ok(Ok(Some(signed))) if signed.id == agent => {
                    confirmed = tokio::time::Instant::now();
                    record(&holder).await;
                }
                Ok(Ok(_)) => {
                    tracing::info!(%agent, "the token that opened a tunnel no longer signs for its agent; closing it");
                    driver.abort();
                    break;
                }
                Ok(Err(_)) | Err(_) if confirmed.elapsed() > unconfirmed_for => {
                    tracing::warn!(%agent, "a tunnel's token could not be confirmed for three rechecks; closing it");
                    driver.abort();
                    break;
                }
                Ok(Err(error)) => tracing::warn!(%error, %agent, "a tunnel's token could not be checked"),
                Err(_) => tracing::warn!(%agent, "a tunnel's token check took longer than the recheck interval"),
            },
        }
    }
    state.tunnels.remove(&agent, generation);
    if let Some(holder) = &holder
        && let Err(error) = state.store.release_tunnel(&agent, &holder.tunnel_id).await
    {
        tracing::warn!(%error, %agent, "could not record that this process no longer holds an agent's tunnel");
    }
}
