//! One reconcile request, as Rails handles it (DESIGN §3): validate → persist actual state and
//! acknowledged versions → lifecycle rules → find workspaces to return → build the response →
//! stamp `responded_to_agent_at` and clear `force_include_all_resources`. All of it in one
//! transaction, so an acknowledgement reaches the agent only after its commit.

use super::config_builder::{self, WorkspaceSpec};
use super::rules::{self, Lifecycle, Selection};
use super::store::{
    AGENT_WORKSPACES, Agent, Backend, Store, StoreError, StoreResult, Workspace, now_ms, state_text, workspace_from_row,
};
use crate::protocol::{ReconcileRequest, ReconcileResponse, Settings, WorkspaceAgentInfo, WorkspaceRailsInfo};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::LazyLock;

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
    let deployment = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.facts());
    let actual = rules::reported_state(info, deployment.as_ref());
    if actual != workspace.actual_state {
        workspace.actual_state = actual;
        workspace.actual_state_updated_at = now;
    }
    if let Some(rv) = deployment.and_then(|d| d.metadata?.resource_version) {
        workspace.deployment_resource_version = Some(rv);
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

/// What one reconcile decided: the answer, and the workspaces whose rows must be saved.
pub struct Decision {
    pub response: ReconcileResponse,
    /// Indices into the workspaces handed to [`decide`], ascending.
    pub touched: Vec<usize>,
}

/// The whole reconcile over an agent's workspaces as loaded, without I/O: persist the reports,
/// apply the lifecycle rules, select what to return and build its config. `workspaces` is
/// updated in place; the caller saves the touched ones in the transaction it loaded them in.
pub fn decide(
    workspaces: &mut [Workspace],
    agent: &Agent,
    request: &ReconcileRequest,
    config: &PipelineConfig,
    now: i64,
) -> StoreResult<Decision> {
    let index: HashMap<(String, String), usize> =
        workspaces.iter().enumerate().map(|(i, w)| ((w.namespace.clone(), w.name.clone()), i)).collect();
    let mut reported = HashSet::new();
    let mut touched = BTreeSet::new();
    for info in &request.workspace_agent_infos {
        // Infos for workspaces this agent does not own are ignored, never returned.
        let Some(&i) = index.get(&(info.namespace.clone(), info.name.clone())) else { continue };
        apply_report(&mut workspaces[i], info, now);
        reported.insert(i);
        touched.insert(i);
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
            touched.insert(i);
        }
    }

    let mut infos = Vec::new();
    for (i, workspace) in workspaces.iter_mut().enumerate() {
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
                .map_err(|e| StoreError::Corrupt(format!("building config: {e}")))?
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
        workspace.responded_to_agent_at = Some(now);
        workspace.force_include_all_resources = false;
        touched.insert(i);
    }
    Ok(Decision {
        response: ReconcileResponse { workspace_rails_infos: infos, settings: Some(config.settings) },
        touched: touched.into_iter().collect(),
    })
}

impl Store {
    /// One reconcile, in one transaction: on SQLite through the store's writer thread, which
    /// commits concurrent reconciles together; on PostgreSQL under the agent's row lock.
    pub async fn reconcile(
        &self,
        agent: &Agent,
        request: ReconcileRequest,
        config: &PipelineConfig,
    ) -> StoreResult<ReconcileResponse> {
        match &self.backend {
            Backend::Sqlite(writer) => writer.reconcile(agent.clone(), request, config.clone()).await,
            Backend::Postgres => self.reconcile_postgres(agent, &request, config).await,
        }
    }

    async fn reconcile_postgres(
        &self,
        agent: &Agent,
        request: &ReconcileRequest,
        config: &PipelineConfig,
    ) -> StoreResult<ReconcileResponse> {
        let now = now_ms();
        let mut tx = self.pool.begin().await?;
        // Concurrent reconciles of one agent (two replicas overlapping) run one after the
        // other instead of deadlocking on the workspace rows they both update.
        sqlx::query("SELECT id FROM agents WHERE id = $1 FOR UPDATE").bind(&agent.id).execute(&mut *tx).await?;
        let rows = sqlx::query(&AGENT_WORKSPACES).bind(&agent.id).fetch_all(&mut *tx).await?;
        let mut workspaces: Vec<Workspace> = rows.iter().map(workspace_from_row).collect::<StoreResult<_>>()?;
        let decision = decide(&mut workspaces, agent, request, config, now)?;
        if !decision.touched.is_empty() {
            let saved: Vec<SavedRow> = decision.touched.iter().map(|&i| SavedRow::of(&workspaces[i])).collect();
            let json = serde_json::to_string(&saved).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            sqlx::query(&POSTGRES_SAVE).bind(json).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(decision.response)
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

/// The columns a reconcile writes, with their SQL types; rows are matched on the last two.
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

/// One saved row, serialized with exactly the names of [`SAVED_COLUMNS`].
#[derive(serde::Serialize)]
pub(crate) struct SavedRow<'a> {
    pub(crate) desired_state: String,
    pub(crate) actual_state: String,
    pub(crate) desired_state_updated_at: i64,
    pub(crate) actual_state_updated_at: i64,
    pub(crate) deployment_resource_version: Option<&'a str>,
    pub(crate) responded_to_agent_at: Option<i64>,
    pub(crate) force_include_all_resources: i64,
    pub(crate) last_reported_at: Option<i64>,
    pub(crate) error_type: Option<&'a str>,
    pub(crate) error_message: Option<&'a str>,
    pub(crate) error_first_seen: Option<i64>,
    pub(crate) error_last_seen: Option<i64>,
    pub(crate) error_desired_state: Option<String>,
    pub(crate) agent_id: &'a str,
    pub(crate) name: &'a str,
}

impl<'a> SavedRow<'a> {
    pub(crate) fn of(w: &'a Workspace) -> Self {
        let error = w.error.as_ref();
        Self {
            desired_state: state_text(&w.desired_state),
            actual_state: state_text(&w.actual_state),
            desired_state_updated_at: w.desired_state_updated_at,
            actual_state_updated_at: w.actual_state_updated_at,
            deployment_resource_version: w.deployment_resource_version.as_deref(),
            responded_to_agent_at: w.responded_to_agent_at,
            force_include_all_resources: i64::from(w.force_include_all_resources),
            last_reported_at: w.last_reported_at,
            error_type: error.map(|e| e.error_type.as_str()),
            error_message: error.map(|e| e.message.as_str()),
            error_first_seen: error.map(|e| e.first_seen),
            error_last_seen: error.map(|e| e.last_seen),
            error_desired_state: error.map(|e| state_text(&e.desired_state)),
            agent_id: &w.agent_id,
            name: &w.name,
        }
    }
}

/// One `UPDATE … FROM` for all saved rows: a single JSON parameter unpacked by
/// `jsonb_to_recordset`, matched on (agent_id, name).
static POSTGRES_SAVE: LazyLock<String> = LazyLock::new(|| {
    let assignments: Vec<String> =
        SAVED_COLUMNS[..13].iter().map(|(column, _)| format!("{column} = v.{column}")).collect();
    let columns: Vec<String> = SAVED_COLUMNS.iter().map(|(column, sql_type)| format!("{column} {sql_type}")).collect();
    format!(
        "UPDATE workspaces SET {} FROM jsonb_to_recordset(CAST($1 AS jsonb)) AS v({}) \
         WHERE workspaces.agent_id = v.agent_id AND workspaces.name = v.name",
        assignments.join(", "),
        columns.join(", ")
    )
});

/// The same update for one row, with positional parameters in the order of [`SAVED_COLUMNS`].
pub(crate) static SQLITE_SAVE: LazyLock<String> = LazyLock::new(|| {
    let assignments: Vec<String> =
        SAVED_COLUMNS[..13].iter().enumerate().map(|(i, (column, _))| format!("{column} = ?{}", i + 1)).collect();
    format!("UPDATE workspaces SET {} WHERE agent_id = ?14 AND name = ?15", assignments.join(", "))
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_rows_carry_exactly_the_saved_columns() {
        let workspace = Workspace {
            agent_id: "a".into(),
            name: "w".into(),
            namespace: "n".into(),
            image: "i".into(),
            cpu: None,
            memory: None,
            env: Default::default(),
            desired_state: crate::protocol::DesiredState::Running,
            actual_state: crate::protocol::ActualState::Running,
            desired_state_updated_at: 1,
            actual_state_updated_at: 2,
            deployment_resource_version: Some("7".into()),
            responded_to_agent_at: None,
            force_include_all_resources: true,
            last_reported_at: Some(3),
            error: None,
            created_at: 0,
        };
        let json = serde_json::to_value(SavedRow::of(&workspace)).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        let mut columns: Vec<&str> = SAVED_COLUMNS.iter().map(|(c, _)| *c).collect();
        columns.sort_unstable();
        assert_eq!(keys, columns);
        assert_eq!(json["force_include_all_resources"], 1);
    }
}
