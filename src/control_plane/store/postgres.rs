//! A reconcile on PostgreSQL: one transaction on the pool, under the agent's row lock.

use super::Store;
use super::error::{StoreError, StoreResult};
use super::rows::{AGENT_WORKSPACES, POSTGRES_SAVE, SavedRow, workspace_from_row};
use crate::control_plane::model::{Agent, Workspace, state_text};
use crate::control_plane::pipeline::{self, PipelineConfig};
use crate::protocol::{ReconcileRequest, ReconcileResponse};

impl Store {
    pub(super) async fn reconcile_postgres(
        &self,
        agent: &Agent,
        request: &ReconcileRequest,
        config: &PipelineConfig,
    ) -> StoreResult<ReconcileResponse> {
        let mut tx = self.pool.begin().await?;
        // Concurrent reconciles of one agent (two replicas overlapping) run one after the
        // other instead of deadlocking on the workspace rows they both update; so do the
        // operator's writes to its workspaces.
        self.lock_agent(&mut tx, &agent.id).await?;
        let now = self.clock.now();
        let rows = sqlx::query(&AGENT_WORKSPACES).bind(&agent.id).fetch_all(&mut *tx).await?;
        let mut workspaces: Vec<Workspace> = rows.iter().map(workspace_from_row).collect::<StoreResult<_>>()?;
        let decision = pipeline::decide(&mut workspaces, agent, request, config, now).map_err(StoreError::Corrupt)?;
        if !decision.touched.is_empty() {
            let saved: Vec<SavedRow> = decision.touched.iter().map(|&i| SavedRow::of(&workspaces[i])).collect();
            let json = serde_json::to_string(&saved).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            sqlx::query(&POSTGRES_SAVE).bind(json).execute(&mut *tx).await?;
        }
        for orphan in &decision.orphans {
            sqlx::query(super::orphans::POSTGRES_RECORD)
                .bind(&agent.id)
                .bind(&orphan.namespace)
                .bind(&orphan.name)
                .bind(orphan.deployment_resource_version.clone())
                .bind(orphan.last_seen)
                .bind(state_text(&orphan.actual_state))
                .execute(&mut *tx)
                .await?;
        }
        for error in &decision.new_errors {
            sqlx::query(super::error_history::POSTGRES_RECORD)
                .bind(&agent.id)
                .bind(&error.name)
                .bind(&error.error_type)
                .bind(&error.message)
                .bind(error.first_seen)
                .execute(&mut *tx)
                .await?;
            sqlx::query(super::error_history::POSTGRES_TRIM)
                .bind(&agent.id)
                .bind(&error.name)
                .bind(super::error_history::TRIM_OFFSET)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(decision.response)
    }
}
