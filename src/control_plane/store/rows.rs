//! The `workspaces` table as the store reads and writes it. Every column is named once, in
//! [`COLUMNS`]; the SELECT list and both backends' reconcile UPDATEs are built from it, and
//! [`SavedRow`]'s fields are checked against it.

use super::error::{StoreError, StoreResult};
use crate::control_plane::decisions::agent_config::AgentConfig;
use crate::control_plane::model::{Workspace, WorkspaceError};
use sqlx::Row;
use sqlx::any::AnyRow;
use std::sync::{Arc, LazyLock};

/// How a reconcile treats a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Set when the workspace is created, never by a reconcile.
    AtCreation,
    /// Rewritten by every reconcile that touches the workspace.
    ByReconcile,
    /// Finds the row: (agent_id, name).
    Key,
    /// Written by the workspace's use (its hosts, the CLI's streams), never by a reconcile.
    ByUse,
}

/// Every column of `workspaces` (migrations/), with its SQL type.
pub const COLUMNS: [(&str, &str, Written); 26] = [
    ("agent_id", "TEXT", Written::Key),
    ("name", "TEXT", Written::Key),
    ("namespace", "TEXT", Written::AtCreation),
    ("image", "TEXT", Written::AtCreation),
    ("cpu", "TEXT", Written::AtCreation),
    ("memory", "TEXT", Written::AtCreation),
    ("env", "TEXT", Written::AtCreation),
    ("desired_state", "TEXT", Written::ByReconcile),
    ("actual_state", "TEXT", Written::ByReconcile),
    ("desired_state_updated_at", "BIGINT", Written::ByReconcile),
    ("actual_state_updated_at", "BIGINT", Written::ByReconcile),
    ("deployment_resource_version", "TEXT", Written::ByReconcile),
    ("responded_to_agent_at", "BIGINT", Written::ByReconcile),
    ("force_include_all_resources", "BIGINT", Written::ByReconcile),
    ("last_reported_at", "BIGINT", Written::ByReconcile),
    ("error_type", "TEXT", Written::ByReconcile),
    ("error_message", "TEXT", Written::ByReconcile),
    ("error_first_seen", "BIGINT", Written::ByReconcile),
    ("error_last_seen", "BIGINT", Written::ByReconcile),
    ("error_desired_state", "TEXT", Written::ByReconcile),
    ("created_at", "BIGINT", Written::AtCreation),
    ("agent_config", "TEXT", Written::AtCreation),
    ("owner", "TEXT", Written::AtCreation),
    ("owner_id", "TEXT", Written::AtCreation),
    ("last_activity_at", "BIGINT", Written::ByUse),
    ("processed_devfile", "TEXT", Written::AtCreation),
];

fn names(written: Written) -> impl Iterator<Item = &'static str> {
    COLUMNS.iter().filter(move |c| c.2 == written).map(|c| c.0)
}

/// The columns that find a row: (agent_id, name).
pub fn key_columns() -> impl Iterator<Item = &'static str> {
    names(Written::Key)
}

/// The columns a reconcile may rewrite.
pub fn rewritten_columns() -> impl Iterator<Item = &'static str> {
    names(Written::ByReconcile)
}

/// A reconcile's columns in the order its SQLite parameters go: the rewritten ones, then the key.
pub fn saved_order() -> impl Iterator<Item = &'static str> {
    rewritten_columns().chain(key_columns())
}

pub static SELECT_COLUMNS: LazyLock<String> =
    LazyLock::new(|| COLUMNS.iter().map(|c| c.0).collect::<Vec<_>>().join(", "));

/// Every workspace of one agent (`$1`), in creation order (Rails orders by id): what a
/// reconcile loads, and so the order its answer returns them in.
pub static AGENT_WORKSPACES: LazyLock<String> = LazyLock::new(|| {
    format!("SELECT {} FROM workspaces WHERE agent_id = $1 ORDER BY created_at, name", *SELECT_COLUMNS)
});

/// One `UPDATE … FROM` of the saved rows' `columns`: a single JSON parameter in `$parameter`,
/// unpacked by `jsonb_to_recordset` and matched on (agent_id, name); with `guard`, only for
/// rows whose agent that relation (a CTE with an `id` column) yields.
pub fn postgres_save(parameter: usize, guard: Option<&str>, columns: &[&str]) -> String {
    let assignments: Vec<String> = columns.iter().map(|c| format!("{c} = v.{c}")).collect();
    let types: Vec<String> = COLUMNS
        .iter()
        .filter(|c| c.2 == Written::Key || columns.contains(&c.0))
        .map(|(column, sql_type, _)| format!("{column} {sql_type}"))
        .collect();
    let (from, condition) = match guard {
        Some(guard) => (format!(", {guard}"), format!(" AND workspaces.agent_id = {guard}.id")),
        None => (String::new(), String::new()),
    };
    format!(
        "UPDATE workspaces SET {} FROM jsonb_to_recordset(CAST(${parameter} AS jsonb)) AS v({}){from} \
         WHERE workspaces.agent_id = v.agent_id AND workspaces.name = v.name{condition}",
        assignments.join(", "),
        types.join(", ")
    )
}

/// [`AGENT_WORKSPACES`] on PostgreSQL, with the agent's revision (`agent_revision`) in every
/// row: one row with no workspace columns when it has none.
pub static AGENT_WORKSPACES_AND_REVISION: LazyLock<String> = LazyLock::new(|| {
    let columns: Vec<String> = COLUMNS.iter().map(|c| format!("w.{}", c.0)).collect();
    format!(
        "SELECT a.revision AS agent_revision, {} FROM agents a LEFT JOIN workspaces w ON w.agent_id = a.id \
         WHERE a.id = $1 ORDER BY w.created_at, w.name",
        columns.join(", ")
    )
});

/// The same update for one row, with positional parameters in [`saved_order`].
pub static SQLITE_SAVE: LazyLock<String> = LazyLock::new(|| {
    let parameter = |column: &str| saved_order().position(|c| c == column).map_or(0, |i| i + 1);
    let assignments: Vec<String> = names(Written::ByReconcile).map(|c| format!("{c} = ?{}", parameter(c))).collect();
    let key: Vec<String> = names(Written::Key).map(|c| format!("{c} = ?{}", parameter(c))).collect();
    format!("UPDATE workspaces SET {} WHERE {}", assignments.join(", "), key.join(" AND "))
});

fn parse_enum<T: serde::de::DeserializeOwned>(text: &str) -> StoreResult<T> {
    serde_json::from_value(serde_json::Value::from(text))
        .map_err(|_| StoreError::Corrupt(format!("unknown state {text:?}")))
}

/// A result row read by column name: sqlx's and rusqlite's rows alike, so that one function
/// turns either into a [`Workspace`].
pub trait Columns {
    fn text(&self, column: &str) -> StoreResult<Option<String>>;
    fn integer(&self, column: &str) -> StoreResult<Option<i64>>;

    fn required_text(&self, column: &str) -> StoreResult<String> {
        self.text(column)?.ok_or_else(|| StoreError::Corrupt(format!("{column} is NULL")))
    }

    fn required_integer(&self, column: &str) -> StoreResult<i64> {
        self.integer(column)?.ok_or_else(|| StoreError::Corrupt(format!("{column} is NULL")))
    }
}

impl Columns for AnyRow {
    fn text(&self, column: &str) -> StoreResult<Option<String>> {
        Ok(self.try_get(column)?)
    }

    fn integer(&self, column: &str) -> StoreResult<Option<i64>> {
        Ok(self.try_get(column)?)
    }
}

impl Columns for rusqlite::Row<'_> {
    fn text(&self, column: &str) -> StoreResult<Option<String>> {
        Ok(self.get(column)?)
    }

    fn integer(&self, column: &str) -> StoreResult<Option<i64>> {
        Ok(self.get(column)?)
    }
}

/// A row selected with [`SELECT_COLUMNS`].
pub fn workspace_from_row(row: &impl Columns) -> StoreResult<Workspace> {
    WorkspaceReader::default().read(row)
}

/// Reads the rows of one load. An agent's workspaces nearly always hold the settings it had
/// when they were created, the same text row after row: a text equal to the last one read is
/// not parsed again, and the rows share it.
#[derive(Default)]
pub struct WorkspaceReader {
    last_settings: Option<(String, Arc<AgentConfig>)>,
}

impl WorkspaceReader {
    pub fn read(&mut self, row: &impl Columns) -> StoreResult<Workspace> {
        let env = row.required_text("env")?;
        let error = match row.text("error_type")? {
            Some(error_type) => Some(WorkspaceError {
                error_type,
                message: row.text("error_message")?.unwrap_or_default(),
                first_seen: row.integer("error_first_seen")?.unwrap_or_default(),
                last_seen: row.integer("error_last_seen")?.unwrap_or_default(),
                desired_state: parse_enum(&row.text("error_desired_state")?.unwrap_or_default())?,
            }),
            None => None,
        };
        Ok(Workspace {
            agent_id: row.required_text("agent_id")?,
            name: row.required_text("name")?,
            namespace: row.required_text("namespace")?,
            image: row.required_text("image")?,
            cpu: row.text("cpu")?,
            memory: row.text("memory")?,
            env: serde_json::from_str(&env).map_err(|e| StoreError::Corrupt(format!("env: {e}")))?,
            desired_state: parse_enum(&row.required_text("desired_state")?)?,
            actual_state: parse_enum(&row.required_text("actual_state")?)?,
            desired_state_updated_at: row.required_integer("desired_state_updated_at")?,
            actual_state_updated_at: row.required_integer("actual_state_updated_at")?,
            deployment_resource_version: row.text("deployment_resource_version")?,
            responded_to_agent_at: row.integer("responded_to_agent_at")?,
            force_include_all_resources: row.required_integer("force_include_all_resources")? != 0,
            last_reported_at: row.integer("last_reported_at")?,
            error,
            created_at: row.required_integer("created_at")?,
            agent_config: self.settings(row.text("agent_config")?)?,
            owner: row.text("owner")?,
            owner_id: row.text("owner_id")?,
            last_activity_at: row.integer("last_activity_at")?,
            endpoints: Vec::new(),
            devfile: match row.text("processed_devfile")? {
                Some(text) => Some(Arc::new(
                    serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("processed_devfile: {e}")))?,
                )),
                None => None,
            },
            components: Vec::new(),
        })
    }

    fn settings(&mut self, text: Option<String>) -> StoreResult<Arc<AgentConfig>> {
        let Some(text) = text else {
            return Ok(AgentConfig::before_settings().into());
        };
        if let Some((last, settings)) = &self.last_settings
            && *last == text
        {
            return Ok(settings.clone());
        }
        let settings: Arc<AgentConfig> = serde_json::from_str::<AgentConfig>(&text)
            .map_err(|e| StoreError::Corrupt(format!("agent_config: {e}")))?
            .into();
        self.last_settings = Some((text, settings.clone()));
        Ok(settings)
    }
}

/// One saved value, as both backends take it: SQLite binds it, PostgreSQL reads it from JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum Cell<'a> {
    Text(Option<&'a str>),
    Integer(Option<i64>),
}

impl rusqlite::ToSql for Cell<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        match self {
            Cell::Text(text) => text.to_sql(),
            Cell::Integer(integer) => integer.to_sql(),
        }
    }
}

/// The values a reconcile saves of one workspace, borrowed from it.
pub struct SavedRow<'a>(&'a Workspace);

impl<'a> SavedRow<'a> {
    pub fn of(workspace: &'a Workspace) -> Self {
        Self(workspace)
    }

    /// Every saved value with its column's name, in [`saved_order`]: the rewritten columns,
    /// then the key (a test checks the names).
    pub fn cells(&self) -> [(&'static str, Cell<'a>); 15] {
        let w = self.0;
        let error = w.error.as_ref();
        let (text, integer) = (Cell::Text, Cell::Integer);
        [
            ("desired_state", text(Some(w.desired_state.as_str()))),
            ("actual_state", text(Some(w.actual_state.as_str()))),
            ("desired_state_updated_at", integer(Some(w.desired_state_updated_at))),
            ("actual_state_updated_at", integer(Some(w.actual_state_updated_at))),
            ("deployment_resource_version", text(w.deployment_resource_version.as_deref())),
            ("responded_to_agent_at", integer(w.responded_to_agent_at)),
            ("force_include_all_resources", integer(Some(i64::from(w.force_include_all_resources)))),
            ("last_reported_at", integer(w.last_reported_at)),
            ("error_type", text(error.map(|e| e.error_type.as_str()))),
            ("error_message", text(error.map(|e| e.message.as_str()))),
            ("error_first_seen", integer(error.map(|e| e.first_seen))),
            ("error_last_seen", integer(error.map(|e| e.last_seen))),
            ("error_desired_state", text(error.map(|e| e.desired_state.as_str()))),
            ("agent_id", text(Some(&w.agent_id))),
            ("name", text(Some(&w.name))),
        ]
    }

    /// The row as SQLite parameters of [`SQLITE_SAVE`], borrowed: no copy per reconcile.
    pub fn sqlite_parameters(&self) -> [Cell<'a>; 15] {
        self.cells().map(|(_, cell)| cell)
    }
}

#[cfg(test)]
pub(super) mod tests;
