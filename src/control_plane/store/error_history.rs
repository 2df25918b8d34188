//! A workspace's earlier errors (#21): each error the agent reports is recorded once, in the
//! reconcile's own transaction, and only the newest [`KEPT`] per workspace are kept, so that
//! an agent sending a new message every cycle cannot grow the table.

use super::Store;
use super::error::StoreResult;
use crate::control_plane::model::ErrorRecord;
use sqlx::Row;

/// How many errors a workspace's history keeps.
pub const KEPT: i64 = 5;

/// Record an error (agent, name, type, message, first seen), then drop the workspace's older
/// ones past [`KEPT`] (agent, name, [`KEPT`] - 1). SQLite's numbered parameters.
pub(super) const SQLITE_RECORD: &str = "INSERT INTO workspace_errors (agent_id, name, error_type, message, first_seen) \
     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (agent_id, name, first_seen) DO NOTHING";
pub(super) const SQLITE_TRIM: &str = "DELETE FROM workspace_errors WHERE agent_id = ?1 AND name = ?2 AND first_seen < \
     (SELECT first_seen FROM workspace_errors WHERE agent_id = ?1 AND name = ?2 ORDER BY first_seen DESC LIMIT 1 OFFSET ?3)";

/// The same for PostgreSQL.
pub(super) const POSTGRES_RECORD: &str = "INSERT INTO workspace_errors (agent_id, name, error_type, message, first_seen) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (agent_id, name, first_seen) DO NOTHING";
pub(super) const POSTGRES_TRIM: &str = "DELETE FROM workspace_errors WHERE agent_id = $1 AND name = $2 AND first_seen < \
     (SELECT first_seen FROM workspace_errors WHERE agent_id = $1 AND name = $2 ORDER BY first_seen DESC LIMIT 1 OFFSET $3)";

/// The trim's offset: the oldest error kept.
pub(super) const TRIM_OFFSET: i64 = KEPT - 1;

impl Store {
    /// The recorded errors of an agent's workspaces named from `first` to `last` (a page of
    /// them), newest first within each workspace.
    pub async fn error_history(&self, agent_id: &str, first: &str, last: &str) -> StoreResult<Vec<ErrorRecord>> {
        let rows = sqlx::query(
            "SELECT name, error_type, message, first_seen FROM workspace_errors \
             WHERE agent_id = $1 AND name >= $2 AND name <= $3 ORDER BY name, first_seen DESC",
        )
        .bind(agent_id)
        .bind(first)
        .bind(last)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ErrorRecord {
                    name: row.try_get("name")?,
                    error_type: row.try_get("error_type")?,
                    message: row.try_get("message")?,
                    first_seen: row.try_get("first_seen")?,
                })
            })
            .collect()
    }
}
