//! A reconcile on PostgreSQL, in two round trips: one statement reads the agent's revision with
//! its workspaces, one statement writes everything the pipeline decided, but only while the
//! revision is unchanged, and bumps it. Every other writer of an agent's workspaces bumps the
//! revision under the agent's row lock (`lock_agent`), so a management write or a reconcile
//! through another control plane in between makes the write a no-op, and the reconcile starts
//! again from a fresh read. After a few such conflicts it takes the lock, as every write once
//! did, which always makes progress. A reconcile that records new errors (rare) also takes it.

use super::Store;
use super::changes::changes;
use super::error::{StoreError, StoreResult};
use super::rows::{AGENT_WORKSPACES, AGENT_WORKSPACES_AND_REVISION, WorkspaceReader, postgres_save};
use crate::control_plane::decisions::pipeline::{self, Decision, PipelineConfig};
use crate::control_plane::model::{Agent, Workspace};
use crate::protocol::{ReconcileRequest, ReconcileResponse};
use sqlx::Row;

/// Optimistic attempts before a reconcile takes the agent's lock.
const OPTIMISTIC_ATTEMPTS: usize = 3;

/// The write of an optimistic reconcile: `$1` agent, `$2` the revision read, `$3` the changed
/// rows with their changed `columns` (none: no row changed), `$4` the orphans, as JSON.
/// Answers `won` = 1 when it wrote, 0 when the revision moved.
fn guarded_write(columns: &[&str]) -> String {
    let saved = if columns.is_empty() {
        String::new()
    } else {
        format!("saved AS ({} RETURNING 1), ", postgres_save(3, Some("guard"), columns))
    };
    format!(
        "WITH guard AS (UPDATE agents SET revision = revision + 1 WHERE id = $1 AND revision = $2 RETURNING id), \
         {saved}orphans_seen AS (INSERT INTO orphans (agent_id, namespace, name, deployment_resource_version, \
         actual_state, first_seen, last_seen) SELECT guard.id, o.namespace, o.name, o.deployment_resource_version, \
         o.actual_state, o.last_seen, o.last_seen FROM jsonb_to_recordset(CAST($4 AS jsonb)) AS o(namespace TEXT, \
         name TEXT, deployment_resource_version TEXT, actual_state TEXT, last_seen BIGINT), guard WHERE true \
         ON CONFLICT (agent_id, namespace, name) DO UPDATE SET deployment_resource_version = \
         excluded.deployment_resource_version, actual_state = excluded.actual_state, last_seen = excluded.last_seen \
         RETURNING 1) \
         SELECT count(*) AS won FROM guard"
    )
}

impl Store {
    pub(super) async fn reconcile_postgres(
        &self,
        agent: &Agent,
        request: &ReconcileRequest,
        config: &PipelineConfig,
    ) -> StoreResult<ReconcileResponse> {
        for _ in 0..OPTIMISTIC_ATTEMPTS {
            if let Some(response) = self.reconcile_optimistic(agent, request, config).await? {
                return Ok(response);
            }
        }
        tracing::debug!(agent = %agent.id, "reconcile conflicts went on; taking the agent's lock");
        self.reconcile_locked(agent, request, config).await
    }

    /// None when the revision moved under it. A decision that records new errors is made
    /// again under the lock.
    async fn reconcile_optimistic(
        &self,
        agent: &Agent,
        request: &ReconcileRequest,
        config: &PipelineConfig,
    ) -> StoreResult<Option<ReconcileResponse>> {
        // One connection for the read and the write: one trip to the pool, and one check of it
        // if it sat idle.
        let mut connection = self.pool.acquire().await?;
        let now = self.clock.now();
        let rows = sqlx::query(&AGENT_WORKSPACES_AND_REVISION).bind(&agent.id).fetch_all(&mut *connection).await?;
        let Some(first) = rows.first() else {
            return Err(StoreError::Conflict(format!("no agent {:?}", agent.id)));
        };
        let revision: i64 = first.try_get("agent_revision")?;
        let (mut reader, mut workspaces) = (WorkspaceReader::default(), Vec::with_capacity(rows.len()));
        for row in &rows {
            if row.try_get::<Option<String>, _>("name")?.is_some() {
                workspaces.push(reader.read(row)?);
            }
        }
        let loaded = workspaces.clone();
        let decision = pipeline::decide(&mut workspaces, agent, request, config, now).map_err(StoreError::Corrupt)?;
        if !decision.new_errors.is_empty() {
            // Its own connection: holding two per request could exhaust the pool.
            drop(connection);
            return self.reconcile_locked(agent, request, config).await.map(Some);
        }
        let changes = changes(&loaded, &workspaces, &decision.touched)?;
        if changes.is_none() && decision.orphans.is_empty() {
            return Ok(Some(decision.response));
        }
        let (columns, rows) = changes.map_or((Vec::new(), "[]".to_string()), |c| (c.columns, c.rows));
        let row = sqlx::query(&guarded_write(&columns))
            .bind(&agent.id)
            .bind(revision)
            .bind(rows)
            .bind(orphans_seen(&decision)?)
            .fetch_one(&mut *connection)
            .await?;
        let won: i64 = row.try_get("won")?;
        Ok((won == 1).then_some(decision.response))
    }

    /// One transaction under the agent's row lock.
    async fn reconcile_locked(
        &self,
        agent: &Agent,
        request: &ReconcileRequest,
        config: &PipelineConfig,
    ) -> StoreResult<ReconcileResponse> {
        let mut tx = self.pool.begin().await?;
        self.lock_agent(&mut tx, &agent.id).await?;
        let now = self.clock.now();
        let rows = sqlx::query(&AGENT_WORKSPACES).bind(&agent.id).fetch_all(&mut *tx).await?;
        let mut reader = WorkspaceReader::default();
        let mut workspaces: Vec<Workspace> = rows.iter().map(|row| reader.read(row)).collect::<StoreResult<_>>()?;
        let loaded = workspaces.clone();
        let decision = pipeline::decide(&mut workspaces, agent, request, config, now).map_err(StoreError::Corrupt)?;
        if let Some(changes) = changes(&loaded, &workspaces, &decision.touched)? {
            let save = postgres_save(1, None, &changes.columns);
            sqlx::query(&save).bind(changes.rows).execute(&mut *tx).await?;
        }
        for orphan in &decision.orphans {
            sqlx::query(super::statements::POSTGRES_RECORD_ORPHAN)
                .bind(&agent.id)
                .bind(&orphan.namespace)
                .bind(&orphan.name)
                .bind(orphan.deployment_resource_version.clone())
                .bind(orphan.last_seen)
                .bind(orphan.actual_state.as_str())
                .execute(&mut *tx)
                .await?;
        }
        for error in &decision.new_errors {
            sqlx::query(super::statements::POSTGRES_RECORD_ERROR)
                .bind(&agent.id)
                .bind(&error.name)
                .bind(&error.error_type)
                .bind(&error.message)
                .bind(error.first_seen)
                .execute(&mut *tx)
                .await?;
            sqlx::query(super::statements::POSTGRES_TRIM_ERRORS)
                .bind(&agent.id)
                .bind(&error.name)
                .bind(super::statements::TRIM_OFFSET)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(decision.response)
    }
}

fn corrupt(error: serde_json::Error) -> StoreError {
    StoreError::Corrupt(error.to_string())
}

/// The orphans seen, as the JSON the guarded write unpacks. One reported twice in a request
/// is written once, as last reported.
fn orphans_seen(decision: &Decision) -> StoreResult<String> {
    let mut orphans = std::collections::BTreeMap::new();
    for orphan in &decision.orphans {
        let row = serde_json::json!({
            "namespace": orphan.namespace, "name": orphan.name,
            "deployment_resource_version": orphan.deployment_resource_version,
            "actual_state": orphan.actual_state.as_str(), "last_seen": orphan.last_seen,
        });
        orphans.insert((orphan.namespace.as_str(), orphan.name.as_str()), row);
    }
    let orphans: Vec<&serde_json::Value> = orphans.values().collect();
    serde_json::to_string(&orphans).map_err(corrupt)
}
