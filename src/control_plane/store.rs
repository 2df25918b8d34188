//! Persistence with sqlx: embedded SQLite by default, PostgreSQL for a `postgres://` URL.
//! One schema serves both (migrations/), through sqlx's `Any` driver. On SQLite, reconciles
//! (the hot path) go to a writer thread of their own ([`super::sqlite_writer`]).

use super::sqlite_writer::SqliteWriter;
use crate::protocol::{ActualState, DesiredState, ImagePullSecret};
use sha2::{Digest, Sha256};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};
use std::collections::BTreeMap;

#[derive(thiserror::Error, Debug)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrating the database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Conflict(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The SQLite writer could not commit a batch, or has stopped.
    #[error("database writer: {0}")]
    Writer(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

#[derive(Debug, Clone, PartialEq)]
pub struct Agent {
    pub id: String,
    pub image_pull_secrets: Vec<ImagePullSecret>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Workspace {
    pub agent_id: String,
    pub name: String,
    pub namespace: String,
    pub image: String,
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub env: BTreeMap<String, String>,
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    pub desired_state_updated_at: i64,
    pub actual_state_updated_at: i64,
    pub deployment_resource_version: Option<String>,
    pub responded_to_agent_at: Option<i64>,
    pub force_include_all_resources: bool,
    pub last_reported_at: Option<i64>,
    pub error: Option<WorkspaceError>,
    pub created_at: i64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WorkspaceError {
    pub error_type: String,
    pub message: String,
    pub first_seen: i64,
    pub last_seen: i64,
    /// The desired state when the error arrived; if it differs now, the error predates the change.
    pub desired_state: DesiredState,
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct NewWorkspace {
    pub name: String,
    pub image: String,
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// Milliseconds since the epoch, strictly increasing within this process: "changed since the
/// agent last heard" compares these, and two writes in one millisecond must still be ordered.
pub fn now_ms() -> i64 {
    static LAST: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);
    let wall = jiff::Timestamp::now().as_millisecond();
    let previous = LAST
        .fetch_update(std::sync::atomic::Ordering::SeqCst, std::sync::atomic::Ordering::SeqCst, |last| {
            Some(wall.max(last + 1))
        })
        .unwrap_or(wall);
    wall.max(previous + 1)
}

/// Tokens are stored as their SHA-256: a leaked database leaks no agent's credentials.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn new_token() -> StoreResult<String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| StoreError::Conflict(format!("no randomness for a token: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// An enum as its wire spelling (`Running`, `applier`): how states are stored and shown.
pub(crate) fn state_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

fn parse_enum<T: serde::de::DeserializeOwned>(text: &str) -> StoreResult<T> {
    serde_json::from_value(serde_json::Value::from(text))
        .map_err(|_| StoreError::Corrupt(format!("unknown state {text:?}")))
}

/// Every workspace of one agent (`$1`), in name order: what a reconcile loads.
pub(crate) static AGENT_WORKSPACES: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE agent_id = $1 ORDER BY name")
});

pub(crate) const WORKSPACE_COLUMNS: &str = "agent_id, name, namespace, image, cpu, memory, env, desired_state, actual_state, \
     desired_state_updated_at, actual_state_updated_at, deployment_resource_version, responded_to_agent_at, \
     force_include_all_resources, last_reported_at, error_type, error_message, error_first_seen, error_last_seen, \
     error_desired_state, created_at";

/// A result row read by column name: sqlx's and rusqlite's rows alike, so that one function
/// turns either into a [`Workspace`].
pub(crate) trait Columns {
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

/// A row selected with [`WORKSPACE_COLUMNS`].
pub(crate) fn workspace_from_row(row: &impl Columns) -> StoreResult<Workspace> {
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
    })
}

/// Where reconciles are written.
#[derive(Clone)]
pub(crate) enum Backend {
    /// One writer thread owns the write connection and commits concurrent reconciles together.
    Sqlite(SqliteWriter),
    /// Reconciles run on the pool; each takes its agent's row lock first.
    Postgres,
}

#[derive(Clone)]
pub struct Store {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
}

impl Store {
    /// Open (and for SQLite, create) the database, and migrate it.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        sqlx::any::install_default_drivers();
        let url = if url.starts_with("sqlite:") && !url.contains("mode=") {
            format!("{url}{}mode=rwc", if url.contains('?') { "&" } else { "?" })
        } else {
            url.to_string()
        };
        // SQLite has one writer: one connection avoids "database is locked" under load.
        let sqlite = url.starts_with("sqlite:");
        let max = if sqlite { 1 } else { 8 };
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            // Per connection, so that a reconnected pool keeps them. With WAL, `synchronous =
            // NORMAL` never corrupts and survives a process crash; only a power loss may drop
            // the last commits. FULL would fsync on every reconcile.
            .after_connect(move |connection, _| {
                Box::pin(async move {
                    if sqlite {
                        for pragma in
                            ["PRAGMA foreign_keys = ON", "PRAGMA journal_mode = WAL", "PRAGMA synchronous = NORMAL"]
                        {
                            sqlx::query(pragma).execute(&mut *connection).await?;
                        }
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        let backend = if sqlite { Backend::Sqlite(SqliteWriter::open(&url)?) } else { Backend::Postgres };
        Ok(Self { pool, backend })
    }

    /// Register an agent; returns its token, which is shown once and stored hashed.
    pub async fn create_agent(&self, id: &str, image_pull_secrets: &[ImagePullSecret]) -> StoreResult<String> {
        let token = new_token()?;
        let secrets = serde_json::to_string(image_pull_secrets).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query("INSERT INTO agents (id, token_hash, image_pull_secrets, created_at) VALUES ($1, $2, $3, $4)")
            .bind(id)
            .bind(hash_token(&token))
            .bind(secrets)
            .bind(now_ms())
            .execute(&self.pool)
            .await
            .map_err(|e| conflict(e, format!("agent {id:?} already exists")))?;
        Ok(token)
    }

    /// Replace an agent's image pull secrets; every workspace then gets its config again.
    /// Returns false when there is no such agent.
    pub async fn set_image_pull_secrets(&self, id: &str, image_pull_secrets: &[ImagePullSecret]) -> StoreResult<bool> {
        let secrets = serde_json::to_string(image_pull_secrets).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let mut tx = self.pool.begin().await?;
        let updated = sqlx::query("UPDATE agents SET image_pull_secrets = $1 WHERE id = $2")
            .bind(secrets)
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("UPDATE workspaces SET force_include_all_resources = 1 WHERE agent_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(updated == 1)
    }

    pub async fn agent_by_token(&self, token: &str) -> StoreResult<Option<Agent>> {
        let row = sqlx::query("SELECT id, image_pull_secrets FROM agents WHERE token_hash = $1")
            .bind(hash_token(token))
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| {
            let secrets: String = row.try_get("image_pull_secrets")?;
            Ok(Agent {
                id: row.try_get("id")?,
                image_pull_secrets: serde_json::from_str(&secrets).map_err(|e| StoreError::Corrupt(e.to_string()))?,
            })
        })
        .transpose()
    }

    pub async fn agent_exists(&self, id: &str) -> StoreResult<bool> {
        Ok(sqlx::query("SELECT id FROM agents WHERE id = $1").bind(id).fetch_optional(&self.pool).await?.is_some())
    }

    pub async fn create_workspace(&self, agent_id: &str, new: &NewWorkspace) -> StoreResult<Workspace> {
        let now = now_ms();
        let env = serde_json::to_string(&new.env).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO workspaces (agent_id, name, namespace, image, cpu, memory, env, desired_state, actual_state, \
             desired_state_updated_at, actual_state_updated_at, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        )
        .bind(agent_id)
        .bind(&new.name)
        .bind(workspace_namespace(agent_id, &new.name))
        .bind(&new.image)
        .bind(new.cpu.clone())
        .bind(new.memory.clone())
        .bind(env)
        .bind(state_text(&DesiredState::Running))
        .bind(state_text(&ActualState::CreationRequested))
        .bind(now)
        .bind(now)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(|e| conflict(e, format!("workspace {:?} already exists", new.name)))?;
        self.workspace(agent_id, &new.name).await?.ok_or_else(|| StoreError::Corrupt("inserted row vanished".into()))
    }

    pub async fn workspace(&self, agent_id: &str, name: &str) -> StoreResult<Option<Workspace>> {
        let sql = format!("SELECT {WORKSPACE_COLUMNS} FROM workspaces WHERE agent_id = $1 AND name = $2");
        let row = sqlx::query(&sql).bind(agent_id).bind(name).fetch_optional(&self.pool).await?;
        row.as_ref().map(workspace_from_row).transpose()
    }

    pub async fn workspaces(&self, agent_id: &str) -> StoreResult<Vec<Workspace>> {
        let rows = sqlx::query(&AGENT_WORKSPACES).bind(agent_id).fetch_all(&self.pool).await?;
        rows.iter().map(workspace_from_row).collect()
    }

    /// Set the desired state. `Terminated` is final: a terminated workspace cannot be revived.
    pub async fn set_desired(
        &self,
        agent_id: &str,
        name: &str,
        desired: DesiredState,
    ) -> StoreResult<Option<Workspace>> {
        let Some(current) = self.workspace(agent_id, name).await? else { return Ok(None) };
        if current.desired_state == DesiredState::Terminated && desired != DesiredState::Terminated {
            return Err(StoreError::Conflict(format!("workspace {name:?} is terminated; that is final")));
        }
        if current.desired_state != desired {
            sqlx::query(
                "UPDATE workspaces SET desired_state = $1, desired_state_updated_at = $2 WHERE agent_id = $3 AND name = $4",
            )
            .bind(state_text(&desired))
            .bind(now_ms())
            .bind(agent_id)
            .bind(name)
            .execute(&self.pool)
            .await?;
        }
        self.workspace(agent_id, name).await
    }
}

/// A workspace's namespace: stable, and unique per agent and name.
pub fn workspace_namespace(agent_id: &str, name: &str) -> String {
    format!("wsync-{agent_id}-{name}")
}

fn conflict(error: sqlx::Error, message: String) -> StoreError {
    match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(message),
        _ => StoreError::Database(error),
    }
}
