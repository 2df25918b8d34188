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
        if self.lock_agent_rows {
            // Concurrent reconciles of one agent (two replicas overlapping) run one after the
            // other instead of deadlocking on the workspace rows they both update.
            sqlx::query("SELECT id FROM agents WHERE id = $1 FOR UPDATE").bind(&agent.id).execute(&mut *tx).await?;
        }
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
        let touched: std::collections::BTreeSet<usize> = changed.into_iter().chain(returned).collect();
        let rows: Vec<&Workspace> = touched.into_iter().map(|i| &workspaces[i]).collect();
        for chunk in rows.chunks(SAVE_CHUNK) {
            save(&mut tx, chunk).await?;
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

/// Rows per UPDATE: 15 parameters each stays far below SQLite's and PostgreSQL's limits.
const SAVE_CHUNK: usize = 200;

/// The columns a reconcile writes, with the SQL type of each parameter. The rows are matched
/// on (agent_id, name), the last two.
const SAVED_COLUMNS: [(&str, &str); 15] = [
    ("desired_state", "TEXT"),
    ("actual_state", "TEXT"),
    ("desired_state_updated_at", "BIGINT"),
    ("actual_state_updated_at", "BIGINT"),
    ("deployment_resource_version", "TEXT"),
    ("responded_to_agent_at", "BIGINT"),
    ("force_include_all_resources", "BIGINT"),
    ("last_reported_at", "BIGINT"),
    ("error_type", "TEXT"),
    ("error_message", "TEXT"),
    ("error_first_seen", "BIGINT"),
    ("error_last_seen", "BIGINT"),
    ("error_desired_state", "TEXT"),
    ("agent_id", "TEXT"),
    ("name", "TEXT"),
];

/// `UPDATE … FROM (VALUES …)` for `rows` rows: one statement instead of one per workspace,
/// portable between SQLite (≥ 3.33) and PostgreSQL, which both name VALUES columns `columnN`.
fn save_statement(rows: usize) -> String {
    let assignments: Vec<String> = SAVED_COLUMNS[..13]
        .iter()
        .enumerate()
        .map(|(i, (column, _))| format!("{column} = v.column{}", i + 1))
        .collect();
    let values: Vec<String> = (0..rows)
        .map(|row| {
            let casts: Vec<String> = SAVED_COLUMNS
                .iter()
                .enumerate()
                .map(|(i, (_, sql_type))| format!("CAST(${} AS {sql_type})", row * SAVED_COLUMNS.len() + i + 1))
                .collect();
            format!("({})", casts.join(", "))
        })
        .collect();
    format!(
        "UPDATE workspaces SET {} FROM (VALUES {}) AS v WHERE workspaces.agent_id = v.column14 AND workspaces.name = v.column15",
        assignments.join(", "),
        values.join(", ")
    )
}

async fn save(tx: &mut sqlx::Transaction<'_, sqlx::Any>, rows: &[&Workspace]) -> StoreResult<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let statement = save_statement(rows.len());
    let mut query = sqlx::query(&statement);
    for w in rows {
        let error = w.error.as_ref();
        query = query
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
            .bind(w.agent_id.clone())
            .bind(w.name.clone());
    }
    query.execute(&mut **tx).await?;
    Ok(())
}
