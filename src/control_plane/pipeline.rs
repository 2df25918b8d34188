//! One reconcile request, as Rails handles it (DESIGN §3): validate → persist actual state and
//! acknowledged versions → lifecycle rules → find workspaces to return → build the response →
//! stamp `responded_to_agent_at` and clear `force_include_all_resources`. All of it in one
//! transaction, so an acknowledgement reaches the agent only after its commit.

use super::config_builder::{self, WorkspaceSpec};
use super::rules::{self, Lifecycle, Selection};
use super::store::{Agent, Store, StoreResult, WORKSPACE_COLUMNS, Workspace, now_ms, state_text, workspace_from_row};
use crate::protocol::{ReconcileRequest, ReconcileResponse, Settings, WorkspaceAgentInfo, WorkspaceRailsInfo};
use std::collections::{HashMap, HashSet};

#[derive(Debug, Clone)]
pub struct PipelineConfig {
    pub settings: Settings,
    pub lifecycle: Lifecycle,
    pub label_key: String,
}

/// Reject what Rails' validation would: every info names its workspace and namespace.
pub fn validate(request: &ReconcileRequest) -> Result<(), String> {
    for (index, info) in request.workspace_agent_infos.iter().enumerate() {
        if info.name.is_empty() {
            return Err(format!("workspace_agent_infos[{index}]: name is required"));
        }
        if info.namespace.is_empty() {
            return Err(format!("workspace_agent_infos[{index}] ({}): namespace is required", info.name));
        }
    }
    Ok(())
}

/// What one report changes on a workspace row.
fn apply_report(workspace: &mut Workspace, info: &WorkspaceAgentInfo, now: i64) {
    let actual = rules::actual_state(info);
    if actual != workspace.actual_state {
        workspace.actual_state = actual;
        workspace.actual_state_updated_at = now;
    }
    if let Some(rv) = info.latest_k8s_deployment_info.as_ref().and_then(|d| d["metadata"]["resourceVersion"].as_str()) {
        workspace.deployment_resource_version = Some(rv.to_string());
    }
    workspace.last_reported_at = Some(now);
    match &info.error_details {
        Some(details) => {
            let error_type = state_text(&details.error_type);
            let same = workspace
                .error
                .as_ref()
                .is_some_and(|e| e.error_type == error_type && e.message == details.error_message);
            let first_seen = if same { workspace.error.as_ref().map_or(now, |e| e.first_seen) } else { now };
            workspace.error = Some(super::store::WorkspaceError {
                error_type,
                message: details.error_message.clone(),
                first_seen,
                last_seen: now,
                desired_state: workspace.desired_state,
            });
        }
        // Reported without an error: the apply that failed has since succeeded.
        None => workspace.error = None,
    }
}

impl Store {
    pub async fn reconcile(
        &self,
        agent: &Agent,
        request: &ReconcileRequest,
        config: &PipelineConfig,
    ) -> StoreResult<ReconcileResponse> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        let sql = format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE agent_id = $1 ORDER BY name");
        let rows = sqlx::query(&sql).bind(&agent.id).fetch_all(&mut *tx).await?;
        let mut workspaces: Vec<Workspace> = rows.iter().map(workspace_from_row).collect::<StoreResult<_>>()?;
        let index: HashMap<(String, String), usize> =
            workspaces.iter().enumerate().map(|(i, w)| ((w.namespace.clone(), w.name.clone()), i)).collect();

        let mut reported = HashSet::new();
        let mut changed = HashSet::new();
        for info in &request.workspace_agent_infos {
            // Infos for workspaces this agent does not own are ignored, never returned.
            let Some(&i) = index.get(&(info.namespace.clone(), info.name.clone())) else { continue };
            apply_report(&mut workspaces[i], info, now);
            reported.insert(i);
            changed.insert(i);
        }
        for (i, workspace) in workspaces.iter_mut().enumerate() {
            let next = rules::next_desired(
                workspace.desired_state,
                workspace.actual_state,
                workspace.desired_state_updated_at,
                now,
                &config.lifecycle,
            );
            if let Some(desired) = next {
                tracing::info!(agent = %agent.id, workspace = %workspace.name, from = ?workspace.desired_state, to = ?desired, "desired state changed by the lifecycle rules");
                workspace.desired_state = desired;
                workspace.desired_state_updated_at = now;
                changed.insert(i);
            }
        }

        let mut infos = Vec::new();
        let mut returned = Vec::new();
        for (i, workspace) in workspaces.iter().enumerate() {
            let selection = Selection {
                desired: workspace.desired_state,
                actual: workspace.actual_state,
                desired_updated_at: workspace.desired_state_updated_at,
                actual_updated_at: workspace.actual_state_updated_at,
                responded_to_agent_at: workspace.responded_to_agent_at,
                force_include_all_resources: workspace.force_include_all_resources,
            };
            if !selection.returned(request.update_type, reported.contains(&i)) {
                continue;
            }
            let config_to_apply = if selection.include_config(request.update_type) {
                config_builder::build(&spec(workspace, agent, &config.label_key), workspace.desired_state)
                    .map_err(|e| super::store::StoreError::Corrupt(format!("building config: {e}")))?
            } else {
                String::new()
            };
            infos.push(WorkspaceRailsInfo {
                name: workspace.name.clone(),
                namespace: workspace.namespace.clone(),
                desired_state: workspace.desired_state,
                actual_state: workspace.actual_state,
                deployment_resource_version: workspace.deployment_resource_version.clone(),
                config_to_apply,
                image_pull_secrets: agent.image_pull_secrets.clone(),
            });
            returned.push(i);
        }

        for &i in &returned {
            workspaces[i].responded_to_agent_at = Some(now);
            workspaces[i].force_include_all_resources = false;
        }
        // In row order (by name): concurrent reconciles of one agent then lock rows in the same
        // order and wait for each other instead of deadlocking on PostgreSQL.
        let touched: std::collections::BTreeSet<usize> = changed.into_iter().chain(returned).collect();
        for i in touched {
            save(&mut tx, &workspaces[i]).await?;
        }
        tx.commit().await?;
        Ok(ReconcileResponse { workspace_rails_infos: infos, settings: Some(config.settings) })
    }
}

fn spec(workspace: &Workspace, agent: &Agent, label_key: &str) -> WorkspaceSpec {
    WorkspaceSpec {
        name: workspace.name.clone(),
        namespace: workspace.namespace.clone(),
        image: workspace.image.clone(),
        cpu: workspace.cpu.clone(),
        memory: workspace.memory.clone(),
        env: workspace.env.clone(),
        agent_id: agent.id.clone(),
        label_key: label_key.to_string(),
        image_pull_secrets: agent.image_pull_secrets.iter().map(|s| s.name.clone()).collect(),
    }
}

async fn save(tx: &mut sqlx::Transaction<'_, sqlx::Any>, w: &Workspace) -> StoreResult<()> {
    let error = w.error.as_ref();
    sqlx::query(
        "UPDATE workspaces SET desired_state = $1, actual_state = $2, desired_state_updated_at = $3, \
         actual_state_updated_at = $4, deployment_resource_version = $5, responded_to_agent_at = $6, \
         force_include_all_resources = $7, last_reported_at = $8, error_type = $9, error_message = $10, \
         error_first_seen = $11, error_last_seen = $12, error_desired_state = $13 \
         WHERE agent_id = $14 AND name = $15",
    )
    .bind(state_text(&w.desired_state))
    .bind(state_text(&w.actual_state))
    .bind(w.desired_state_updated_at)
    .bind(w.actual_state_updated_at)
    .bind(w.deployment_resource_version.clone())
    .bind(w.responded_to_agent_at)
    .bind(i64::from(w.force_include_all_resources))
    .bind(w.last_reported_at)
    .bind(error.map(|e| e.error_type.clone()))
    .bind(error.map(|e| e.message.clone()))
    .bind(error.map(|e| e.first_seen))
    .bind(error.map(|e| e.last_seen))
    .bind(error.map(|e| state_text(&e.desired_state)))
    .bind(&w.agent_id)
    .bind(&w.name)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
