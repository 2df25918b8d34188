//! When each agent last reconciled: what an alert on a silent agent reads. Written at most
//! once a minute per agent by each process, so that an idle fleet's partial syncs stay reads.

use super::Store;
use super::error::StoreResult;
use sqlx::Row;

/// How stale a process lets its last write of an agent's time grow.
const WRITE_EVERY_MS: i64 = 60_000;

impl Store {
    /// That `agent_id` reconciled now: the write to run, unless this process wrote it within
    /// the minute (then nothing is to be done, and nothing is spawned).
    pub fn agent_seen(&self, agent_id: &str) -> Option<impl Future<Output = StoreResult<()>> + Send + 'static> {
        let now = self.clock.now();
        {
            let mut written = self.seen_written.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if written.get(agent_id).is_some_and(|at| now.saturating_sub(*at) < WRITE_EVERY_MS) {
                return None;
            }
            written.insert(agent_id.to_string(), now);
        }
        let (pool, agent_id) = (self.pool.clone(), agent_id.to_string());
        Some(async move {
            sqlx::query(
                "UPDATE agents SET last_seen_at = $1 WHERE id = $2 AND (last_seen_at IS NULL OR last_seen_at < $1)",
            )
            .bind(now)
            .bind(&agent_id)
            .execute(&pool)
            .await?;
            Ok(())
        })
    }

    /// Every agent that has reconciled and is not revoked, with when it last did (ms since
    /// the epoch): a revoked agent is silent by design, not missing.
    pub async fn agents_last_seen(&self) -> StoreResult<Vec<(String, i64)>> {
        let sql =
            "SELECT id, last_seen_at FROM agents WHERE last_seen_at IS NOT NULL AND revoked_at IS NULL ORDER BY id";
        let rows = sqlx::query(sql).fetch_all(&self.pool).await?;
        rows.iter().map(|row| Ok((row.try_get("id")?, row.try_get("last_seen_at")?))).collect()
    }
}
