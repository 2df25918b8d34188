//! An agent's settings: its pull secrets and GitLab's workspace settings, each changed under
//! the agent's lock and checked against the other and against the agent's workspaces.

use super::Store;
use super::error::{StoreError, StoreResult};
use crate::control_plane::decisions::agent_config::AgentConfig;
use crate::protocol::{DesiredState, ImagePullSecret};

use super::statements::{OwnedBy, Tx, read_settings};

impl Store {
    /// An agent's workspace settings; None when there is no such agent.
    pub async fn agent_config(&self, id: &str) -> StoreResult<Option<AgentConfig>> {
        let mut tx = self.pool.begin().await?;
        let settings = read_settings(&mut tx, id).await?;
        tx.commit().await?;
        Ok(settings.map(|(config, _)| config))
    }

    /// Replace an agent's workspace settings: workspaces created from now on get them; those
    /// that exist keep theirs (GitLab freezes a workspace's config at creation). Its
    /// `shared_namespace` changes only while no workspace is alive, since each keeps the
    /// namespace it was created in. False when there is no such agent.
    pub async fn set_agent_config(&self, id: &str, config: &AgentConfig) -> StoreResult<bool> {
        let json = serde_json::to_string(config).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut tx = self.begin_write().await?;
        self.lock_agent(&mut tx, id).await?;
        let Some((current, secrets)) = read_settings(&mut tx, id).await? else { return Ok(false) };
        config.check_pull_secrets(&secrets).map_err(StoreError::Conflict)?;
        if current.shared_namespace != config.shared_namespace {
            let alive = self.alive_workspaces(&mut tx, id, None).await?;
            if alive > 0 {
                return Err(StoreError::Conflict(format!(
                    "shared_namespace cannot change while agent {id:?} has {alive} workspaces that are not \
                     terminated: each keeps the namespace it was created in"
                )));
            }
        }
        sqlx::query("UPDATE agents SET workspaces_config = $1 WHERE id = $2")
            .bind(json)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Replace an agent's image pull secrets; every workspace then gets its config again.
    /// Returns false when there is no such agent.
    pub async fn set_image_pull_secrets(&self, id: &str, image_pull_secrets: &[ImagePullSecret]) -> StoreResult<bool> {
        let secrets = serde_json::to_string(image_pull_secrets).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut tx = self.begin_write().await?;
        self.lock_agent(&mut tx, id).await?;
        let Some((config, _)) = read_settings(&mut tx, id).await? else { return Ok(false) };
        config.check_pull_secrets(image_pull_secrets).map_err(StoreError::Conflict)?;
        sqlx::query("UPDATE agents SET image_pull_secrets = $1 WHERE id = $2")
            .bind(secrets)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE workspaces SET force_include_all_resources = 1 WHERE agent_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// How many of an agent's workspaces are not terminated; `owner`'s alone when given.
    pub(super) async fn alive_workspaces(
        &self,
        tx: &mut Tx<'_>,
        id: &str,
        owner: Option<OwnedBy<'_>>,
    ) -> StoreResult<i64> {
        let sql = match owner {
            Some(OwnedBy::User(_)) => {
                "SELECT COUNT(*) FROM workspaces WHERE agent_id = $1 AND desired_state <> $2 AND owner_id = $3"
            }
            Some(OwnedBy::Name(_)) => {
                "SELECT COUNT(*) FROM workspaces WHERE agent_id = $1 AND desired_state <> $2 AND owner = $3 \
                 AND owner_id IS NULL"
            }
            None => "SELECT COUNT(*) FROM workspaces WHERE agent_id = $1 AND desired_state <> $2",
        };
        let mut query = sqlx::query_as(sql).bind(id).bind(DesiredState::Terminated.as_str());
        if let Some(OwnedBy::User(owner) | OwnedBy::Name(owner)) = owner {
            query = query.bind(owner);
        }
        let (alive,): (i64,) = query.fetch_one(&mut **tx).await?;
        Ok(alive)
    }
}
