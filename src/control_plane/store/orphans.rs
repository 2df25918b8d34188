//! Orphans: workspaces an agent reports that this control plane does not know. Recorded in the
//! reconcile's own transaction; listed, adopted or terminated only by an operator.

use super::Store;
use super::error::{StoreError, StoreResult};
use crate::control_plane::model::{Orphan, OrphanFate, Workspace};
use crate::protocol::{ActualState, DesiredState};

fn parse_state(text: &str) -> StoreResult<ActualState> {
    serde_json::from_value(serde_json::Value::String(text.into())).map_err(|e| StoreError::Corrupt(e.to_string()))
}
use sqlx::Row;

impl Store {
    pub async fn orphans(&self, agent_id: &str) -> StoreResult<Vec<Orphan>> {
        let rows = sqlx::query(
            "SELECT namespace, name, deployment_resource_version, actual_state, first_seen, last_seen FROM orphans \
             WHERE agent_id = $1 ORDER BY namespace, name",
        )
        .bind(agent_id)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(Orphan {
                    namespace: row.try_get("namespace")?,
                    name: row.try_get("name")?,
                    deployment_resource_version: row.try_get("deployment_resource_version")?,
                    actual_state: parse_state(&row.try_get::<String, _>("actual_state")?)?,
                    first_seen: row.try_get("first_seen")?,
                    last_seen: row.try_get("last_seen")?,
                })
            })
            .collect()
    }

    /// Make an orphan a workspace, in its own namespace, as `fate` says; None when there is no
    /// such orphan. One transaction: it is never both, and never neither.
    pub async fn settle_orphan(
        &self,
        agent_id: &str,
        namespace: &str,
        name: &str,
        fate: OrphanFate,
    ) -> StoreResult<Option<Workspace>> {
        let mut tx = self.begin_write().await?;
        self.lock_agent(&mut tx, agent_id).await?;
        let found = sqlx::query(
            "DELETE FROM orphans WHERE agent_id = $1 AND namespace = $2 AND name = $3 \
             RETURNING deployment_resource_version, actual_state",
        )
        .bind(agent_id)
        .bind(namespace)
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(found) = found else { return Ok(None) };
        let version: Option<String> = found.try_get("deployment_resource_version")?;
        let actual: String = found.try_get("actual_state")?;
        let (image, desired) = match fate {
            OrphanFate::Adopt { image } => (image, DesiredState::Running),
            OrphanFate::Terminate => (String::new(), DesiredState::Terminated),
        };
        let now = self.clock.now();
        sqlx::query(
            "INSERT INTO workspaces (agent_id, name, namespace, image, env, desired_state, actual_state, \
             desired_state_updated_at, actual_state_updated_at, created_at, deployment_resource_version, agent_config) \
             VALUES ($1, $2, $3, $4, '{}', $5, $6, $7, $8, $9, $10, (SELECT workspaces_config FROM agents WHERE id = $1))",
        )
        .bind(agent_id)
        .bind(name)
        .bind(namespace)
        .bind(image)
        .bind(desired.as_str())
        .bind(actual)
        .bind(now)
        .bind(now)
        .bind(now)
        .bind(version)
        .execute(&mut *tx)
        .await
        .map_err(|e| super::conflict(e, format!("a workspace {name:?} already exists; the orphan stays")))?;
        tx.commit().await?;
        self.workspace(agent_id, name)
            .await?
            .ok_or_else(|| StoreError::Corrupt("adopted row vanished".into()))
            .map(Some)
    }
}
