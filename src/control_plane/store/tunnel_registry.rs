//! Which control-plane process holds each agent's tunnel (#39): a process without it forwards
//! a stream through the one that has it. The newest `hold_tunnel` wins; a tunnel that closes
//! removes its own row only (by its tunnel id), so a newer one's stays; the holder writes its
//! row again at every recheck, so a lost write heals.

use super::Store;
use super::error::StoreResult;
use sqlx::Row;

/// Where a process holds an agent's tunnel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelHolder {
    pub process_id: String,
    /// This one tunnel of that process.
    pub tunnel_id: String,
    pub advertise_url: String,
}

impl Store {
    /// This tunnel is the agent's now.
    pub async fn hold_tunnel(&self, agent_id: &str, holder: &TunnelHolder) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO agent_tunnels (agent_id, process_id, tunnel_id, advertise_url, held_at) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (agent_id) DO UPDATE SET process_id = excluded.process_id, \
             tunnel_id = excluded.tunnel_id, advertise_url = excluded.advertise_url, held_at = excluded.held_at",
        )
        .bind(agent_id)
        .bind(&holder.process_id)
        .bind(&holder.tunnel_id)
        .bind(&holder.advertise_url)
        .bind(self.clock.now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// This tunnel closed (a newer one's row stays).
    pub async fn release_tunnel(&self, agent_id: &str, tunnel_id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM agent_tunnels WHERE agent_id = $1 AND tunnel_id = $2")
            .bind(agent_id)
            .bind(tunnel_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Who holds the agent's tunnel, as last recorded.
    pub async fn tunnel_holder(&self, agent_id: &str) -> StoreResult<Option<TunnelHolder>> {
        let row = sqlx::query("SELECT process_id, tunnel_id, advertise_url FROM agent_tunnels WHERE agent_id = $1")
            .bind(agent_id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(TunnelHolder {
            process_id: row.try_get("process_id")?,
            tunnel_id: row.try_get("tunnel_id")?,
            advertise_url: row.try_get("advertise_url")?,
        }))
    }
}
