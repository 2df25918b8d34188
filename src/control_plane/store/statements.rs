//! What several of the store's files share, below them all: the reconcile's statements that
//! record orphans and error history (both backends' writers run them), and the reads a
//! transaction makes before it writes an agent's settings or a workspace.

use super::error::{StoreError, StoreResult};
use crate::control_plane::decisions::agent_config::AgentConfig;
use crate::protocol::{DesiredState, ImagePullSecret};
use sqlx::Row;

/// Record a report of an orphan; the first sighting is kept. SQLite's numbered parameters.
pub(super) const SQLITE_RECORD_ORPHAN: &str = "INSERT INTO orphans (agent_id, namespace, name, deployment_resource_version, \
     actual_state, first_seen, last_seen) VALUES (?1, ?2, ?3, ?4, ?6, ?5, ?5) ON CONFLICT (agent_id, namespace, name) \
     DO UPDATE SET deployment_resource_version = excluded.deployment_resource_version, \
     actual_state = excluded.actual_state, last_seen = excluded.last_seen";

/// The same for PostgreSQL.
pub(super) const POSTGRES_RECORD_ORPHAN: &str = "INSERT INTO orphans (agent_id, namespace, name, deployment_resource_version, \
     actual_state, first_seen, last_seen) VALUES ($1, $2, $3, $4, $6, $5, $5) ON CONFLICT (agent_id, namespace, name) \
     DO UPDATE SET deployment_resource_version = excluded.deployment_resource_version, \
     actual_state = excluded.actual_state, last_seen = excluded.last_seen";

/// How many errors a workspace's history keeps.
pub const KEPT: i64 = 5;

/// Record an error (agent, name, type, message, first seen), then drop the workspace's older
/// ones past [`KEPT`] (agent, name, [`KEPT`] - 1). SQLite's numbered parameters.
pub(super) const SQLITE_RECORD_ERROR: &str = "INSERT INTO workspace_errors (agent_id, name, error_type, message, first_seen) \
     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (agent_id, name, first_seen) DO NOTHING";
pub(super) const SQLITE_TRIM_ERRORS: &str = "DELETE FROM workspace_errors WHERE agent_id = ?1 AND name = ?2 AND first_seen < \
     (SELECT first_seen FROM workspace_errors WHERE agent_id = ?1 AND name = ?2 ORDER BY first_seen DESC LIMIT 1 OFFSET ?3)";

/// The same for PostgreSQL.
pub(super) const POSTGRES_RECORD_ERROR: &str = "INSERT INTO workspace_errors (agent_id, name, error_type, message, first_seen) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (agent_id, name, first_seen) DO NOTHING";
pub(super) const POSTGRES_TRIM_ERRORS: &str = "DELETE FROM workspace_errors WHERE agent_id = $1 AND name = $2 AND first_seen < \
     (SELECT first_seen FROM workspace_errors WHERE agent_id = $1 AND name = $2 ORDER BY first_seen DESC LIMIT 1 OFFSET $3)";

/// The trim's offset: the oldest error kept.
pub(super) const TRIM_OFFSET: i64 = KEPT - 1;

pub type Tx<'a> = sqlx::Transaction<'a, sqlx::Any>;

/// An agent's settings and pull secrets as the transaction sees them; None without the agent.
pub async fn read_settings(tx: &mut Tx<'_>, id: &str) -> StoreResult<Option<(AgentConfig, Vec<ImagePullSecret>)>> {
    let row = sqlx::query("SELECT workspaces_config, image_pull_secrets FROM agents WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut **tx)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let config: AgentConfig = serde_json::from_str(&row.try_get::<String, _>("workspaces_config")?)
        .map_err(|e| StoreError::Corrupt(format!("workspaces_config: {e}")))?;
    let secrets: Vec<ImagePullSecret> = serde_json::from_str(&row.try_get::<String, _>("image_pull_secrets")?)
        .map_err(|e| StoreError::Corrupt(format!("image_pull_secrets: {e}")))?;
    Ok(Some((config, secrets)))
}

/// In a shared namespace a name is unique across agents: two workspaces of one name would be
/// one Deployment.
pub async fn check_name_free_in(tx: &mut Tx<'_>, namespace: &str, name: &str) -> StoreResult<()> {
    let taken =
        sqlx::query("SELECT agent_id FROM workspaces WHERE namespace = $1 AND name = $2 AND desired_state <> $3")
            .bind(namespace)
            .bind(name)
            .bind(DesiredState::Terminated.as_str())
            .fetch_optional(&mut **tx)
            .await?;
    match taken {
        Some(_) => Err(StoreError::NameTaken(name.to_string())),
        None => Ok(()),
    }
}

/// Whose workspaces a quota counts: a user's, or those created for a name that matched none.
#[derive(Debug, Clone, Copy)]
pub(super) enum OwnedBy<'a> {
    User(&'a str),
    Name(&'a str),
}
