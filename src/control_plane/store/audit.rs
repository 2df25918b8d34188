//! The audit trail: one row per write, and per sign-in that failed. Read newest first, a page
//! at a time, by user, agent or workspace; pruned after its retention.

use super::error::StoreResult;
use super::{Store, new_token};
use crate::control_plane::model::AuditEvent;
use sqlx::Row;

/// What one page of the trail shows: the filters, and where the last page ended.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct AuditQuery {
    /// Only this actor (a username, or `admin-token`).
    pub user: Option<String>,
    /// Only this user's entries, by id: what a user who is not an admin is limited to.
    #[serde(skip)]
    pub actor_id: Option<String>,
    pub agent: Option<String>,
    pub workspace: Option<String>,
    /// Older than this entry (`at:id`), the previous page's last.
    pub before: Option<String>,
    pub limit: Option<usize>,
}

/// Entries per page, at most.
pub const MAX_AUDIT_PAGE: usize = 200;

/// The longest detail kept: a reason, never a body.
const MAX_DETAIL: usize = 512;

impl Store {
    /// Record one event; its id and time are the store's.
    pub async fn record(&self, mut event: AuditEvent) -> StoreResult<()> {
        if event.detail.len() > MAX_DETAIL {
            let mut end = MAX_DETAIL;
            while !event.detail.is_char_boundary(end) {
                end = end.saturating_sub(1);
            }
            event.detail.truncate(end);
        }
        event.id = new_token()?;
        event.at = self.clock.now();
        sqlx::query(
            "INSERT INTO audit_events (id, at, actor_id, actor, action, outcome, agent_id, workspace, client, detail) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(event.id)
        .bind(event.at)
        .bind(event.actor_id)
        .bind(event.actor)
        .bind(event.action)
        .bind(event.outcome)
        .bind(event.agent_id)
        .bind(event.workspace)
        .bind(event.client)
        .bind(event.detail)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// One page of the trail, newest first.
    pub async fn audit(&self, query: &AuditQuery) -> StoreResult<Vec<AuditEvent>> {
        let limit = i64::try_from(query.limit.unwrap_or(50).clamp(1, MAX_AUDIT_PAGE)).unwrap_or(50);
        let (before_at, before_id) = query
            .before
            .as_deref()
            .and_then(|b| b.split_once(':'))
            .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_string())))
            .unwrap_or((i64::MAX, String::new()));
        // Each filter is `($n IS NULL OR column = $n)`: one statement, bound the same way on both databases.
        let rows = sqlx::query(
            "SELECT id, at, actor_id, actor, action, outcome, agent_id, workspace, client, detail FROM audit_events \
             WHERE (at < $1 OR (at = $1 AND id < $2)) \
             AND ($3 = '' OR actor = $3) AND ($4 = '' OR actor_id = $4) \
             AND ($5 = '' OR agent_id = $5) AND ($6 = '' OR workspace = $6) \
             ORDER BY at DESC, id DESC LIMIT $7",
        )
        .bind(before_at)
        .bind(before_id)
        .bind(query.user.clone().unwrap_or_default())
        .bind(query.actor_id.clone().unwrap_or_default())
        .bind(query.agent.clone().unwrap_or_default())
        .bind(query.workspace.clone().unwrap_or_default())
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(AuditEvent {
                    id: row.try_get("id")?,
                    at: row.try_get("at")?,
                    actor_id: row.try_get("actor_id")?,
                    actor: row.try_get("actor")?,
                    action: row.try_get("action")?,
                    outcome: row.try_get("outcome")?,
                    agent_id: row.try_get("agent_id")?,
                    workspace: row.try_get("workspace")?,
                    client: row.try_get("client")?,
                    detail: row.try_get("detail")?,
                })
            })
            .collect()
    }

    /// Drop entries older than `retention_ms`, and sign-ins that were started and never
    /// finished; returns how many entries went.
    pub async fn prune(&self, retention_ms: i64) -> StoreResult<u64> {
        let now = self.clock.now();
        sqlx::query("DELETE FROM oidc_sign_ins WHERE expires_at <= $1").bind(now).execute(&self.pool).await?;
        let cutoff = now.saturating_sub(retention_ms);
        Ok(sqlx::query("DELETE FROM audit_events WHERE at < $1")
            .bind(cutoff)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }
}

impl Store {
    /// Every hour, the audit entries past their retention go (every replica does it; it is
    /// idempotent).
    pub async fn prune_every_hour(self, retention_ms: i64) {
        let mut every = tokio::time::interval(std::time::Duration::from_secs(3600));
        loop {
            every.tick().await;
            match self.prune(retention_ms).await {
                Ok(0) => {}
                Ok(pruned) => tracing::info!(pruned, "audit entries past their retention were pruned"),
                Err(error) => tracing::warn!(%error, "pruning the audit trail failed; the next hour tries again"),
            }
        }
    }
}
