//! Which control-plane process holds each agent's tunnel (#39): a process without it forwards
//! a stream through the one that has it. A row is the newest holder's; a process that loses
//! its tunnel removes its own row only, so a newer holder's stays.

use super::Store;
use super::error::StoreResult;
use sqlx::Row;

/// Where a peer process holds an agent's tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelHolder {
    pub process_id: String,
    pub advertise_url: String,
    pub forward_token: String,
}

impl Store {
    /// This process holds the agent's tunnel now.
    pub async fn hold_tunnel(&self, agent_id: &str, holder: &TunnelHolder) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM agent_tunnels WHERE agent_id = $1").bind(agent_id).execute(&mut *tx).await?;
        sqlx::query(
            "INSERT INTO agent_tunnels (agent_id, process_id, advertise_url, forward_token, opened_at) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(agent_id)
        .bind(&holder.process_id)
        .bind(&holder.advertise_url)
        .bind(&holder.forward_token)
        .bind(self.clock.now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// This process no longer holds the agent's tunnel (a newer holder's row stays).
    pub async fn release_tunnel(&self, agent_id: &str, process_id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM agent_tunnels WHERE agent_id = $1 AND process_id = $2")
            .bind(agent_id)
            .bind(process_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Who holds the agent's tunnel, as last recorded.
    pub async fn tunnel_holder(&self, agent_id: &str) -> StoreResult<Option<TunnelHolder>> {
        let row = sqlx::query("SELECT process_id, advertise_url, forward_token FROM agent_tunnels WHERE agent_id = $1")
            .bind(agent_id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(TunnelHolder {
            process_id: row.try_get("process_id")?,
            advertise_url: row.try_get("advertise_url")?,
            forward_token: row.try_get("forward_token")?,
        }))
    }
}
