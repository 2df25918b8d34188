//! The `workspaces` table as the store reads and writes it. Every column is named once, in
//! [`COLUMNS`]; the SELECT list and both backends' reconcile UPDATEs are built from it, and
//! [`SavedRow`]'s fields are checked against it.

use super::error::{StoreError, StoreResult};
use crate::control_plane::agent_config::AgentConfig;
use crate::control_plane::model::{Workspace, WorkspaceError, state_text};
use sqlx::Row;
use sqlx::any::AnyRow;
use std::sync::LazyLock;

/// How a reconcile treats a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Set when the workspace is created, never by a reconcile.
    AtCreation,
    /// Rewritten by every reconcile that touches the workspace.
    ByReconcile,
    /// Finds the row: (agent_id, name).
    Key,
}

/// Every column of `workspaces` (migrations/), with its SQL type.
pub const COLUMNS: [(&str, &str, Written); 23] = [
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
        agent_config: match row.text("agent_config")? {
            Some(json) => serde_json::from_str(&json).map_err(|e| StoreError::Corrupt(format!("agent_config: {e}")))?,
            None => AgentConfig::before_settings(),
        },
        owner: row.text("owner")?,
    })
}

/// One saved row, serialized with exactly the names of the reconcile's columns.
#[derive(serde::Serialize)]
pub struct SavedRow<'a> {
    pub desired_state: String,
    pub actual_state: String,
    pub desired_state_updated_at: i64,
    pub actual_state_updated_at: i64,
    pub deployment_resource_version: Option<&'a str>,
    pub responded_to_agent_at: Option<i64>,
    pub force_include_all_resources: i64,
    pub last_reported_at: Option<i64>,
    pub error_type: Option<&'a str>,
    pub error_message: Option<&'a str>,
    pub error_first_seen: Option<i64>,
    pub error_last_seen: Option<i64>,
    pub error_desired_state: Option<String>,
    pub agent_id: &'a str,
    pub name: &'a str,
}

impl<'a> SavedRow<'a> {
    pub fn of(w: &'a Workspace) -> Self {
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

/// Where each of [`saved_order`]'s columns sits in [`SavedRow::fields`], worked out once:
/// reconciles save thousands of rows a second on SQLite's one writer thread.
static SQLITE_ORDER: std::sync::OnceLock<Result<Vec<usize>, String>> = std::sync::OnceLock::new();

impl SavedRow<'_> {
    /// Every value with its column's name in [`COLUMNS`]; a test checks they are exactly the
    /// saved columns.
    fn fields(&self) -> [(&'static str, &dyn rusqlite::ToSql); 15] {
        [
            ("desired_state", &self.desired_state),
            ("actual_state", &self.actual_state),
            ("desired_state_updated_at", &self.desired_state_updated_at),
            ("actual_state_updated_at", &self.actual_state_updated_at),
            ("deployment_resource_version", &self.deployment_resource_version),
            ("responded_to_agent_at", &self.responded_to_agent_at),
            ("force_include_all_resources", &self.force_include_all_resources),
            ("last_reported_at", &self.last_reported_at),
            ("error_type", &self.error_type),
            ("error_message", &self.error_message),
            ("error_first_seen", &self.error_first_seen),
            ("error_last_seen", &self.error_last_seen),
            ("error_desired_state", &self.error_desired_state),
            ("agent_id", &self.agent_id),
            ("name", &self.name),
        ]
    }

    /// The row as SQLite parameters, in [`saved_order`], borrowed: no copy per reconcile.
    pub fn sqlite_parameters(&self) -> StoreResult<Vec<&dyn rusqlite::ToSql>> {
        let fields = self.fields();
        let order = SQLITE_ORDER.get_or_init(|| {
            saved_order()
                .map(|column| {
                    fields.iter().position(|(name, _)| *name == column).ok_or(format!("no value for {column}"))
                })
                .collect()
        });
        let order = order.as_ref().map_err(|e| StoreError::Corrupt(e.clone()))?;
        Ok(order.iter().map(|&i| fields[i].1).collect())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub fn workspace(name: &str) -> Workspace {
        Workspace {
            agent_id: "a".into(),
            name: name.into(),
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
            agent_config: AgentConfig::before_settings(),
            owner: None,
        }
    }

    #[test]
    fn saved_rows_carry_exactly_the_saved_columns() {
        let workspace = workspace("w");
        let json = serde_json::to_value(SavedRow::of(&workspace)).unwrap();
        let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        let mut columns: Vec<&str> = saved_order().collect();
        keys.sort_unstable();
        columns.sort_unstable();
        assert_eq!(keys, columns);
        assert_eq!(json["force_include_all_resources"], 1);
    }

    #[test]
    fn sqlite_parameters_follow_the_statement() {
        let workspace = workspace("w");
        let row = SavedRow::of(&workspace);
        let parameters = row.sqlite_parameters().unwrap();
        assert_eq!(parameters.len(), 15);
        assert!(SQLITE_SAVE.contains("desired_state = ?1,") && SQLITE_SAVE.ends_with("agent_id = ?14 AND name = ?15"));
        let text = |i: usize| match parameters[i].to_sql().unwrap() {
            rusqlite::types::ToSqlOutput::Borrowed(rusqlite::types::ValueRef::Text(t)) => {
                String::from_utf8_lossy(t).to_string()
            }
            rusqlite::types::ToSqlOutput::Owned(rusqlite::types::Value::Text(t)) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(text(0), "Running");
        assert_eq!(text(13), "a");
        let mut fields: Vec<&str> = row.fields().iter().map(|(name, _)| *name).collect();
        let mut saved: Vec<&str> = saved_order().collect();
        fields.sort_unstable();
        saved.sort_unstable();
        assert_eq!(fields, saved, "one value per saved column, no more");
        let save = postgres_save(1, None, &["desired_state", "last_reported_at"]);
        assert!(
            save.starts_with("UPDATE workspaces SET desired_state = v.desired_state, last_reported_at ="),
            "{save}"
        );
        assert!(save.contains("v(agent_id TEXT, name TEXT, desired_state TEXT, last_reported_at BIGINT)"), "{save}");
    }
}
