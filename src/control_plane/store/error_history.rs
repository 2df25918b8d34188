//! A workspace's earlier errors (#21): each error the agent reports is recorded once, in the
//! reconcile's own transaction, and only the newest `statements::KEPT` per workspace are kept, so that
//! an agent sending a new message every cycle cannot grow the table.

use super::Store;
use super::error::StoreResult;
use crate::control_plane::model::ErrorRecord;
use sqlx::Row;

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
