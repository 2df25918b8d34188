//! Persistence with sqlx: embedded SQLite by default, PostgreSQL for a `postgres://` URL.
//! One schema serves both (migrations/), through sqlx's `Any` driver. On SQLite, reconciles
//! (the hot path) go to a writer thread of their own ([`sqlite_writer`]); on PostgreSQL they
//! run on the pool ([`postgres`]). Both run the pure pipeline inside one transaction.

mod agents_seen;
pub mod audit;
pub mod backup;
mod changes;
mod credentials;
mod error;
mod error_history;
mod orphans;
pub mod pending_sign_ins;
pub mod people;
mod postgres;
pub mod rows;
pub mod schema;
mod settings;
mod sqlite_writer;
mod statements;
pub mod tunnel_registry;
mod workspace_hosts;

use super::decisions::agent_config::AgentConfig;
use super::decisions::pipeline::PipelineConfig;
use super::model::{Agent, Clock, NewWorkspace, Workspace, workspace_namespace};
use crate::protocol::{ActualState, DesiredState, ImagePullSecret, ReconcileRequest, ReconcileResponse};
pub use error::{StoreError, StoreResult};
use rows::{AGENT_WORKSPACES, SELECT_COLUMNS, workspace_from_row};
use sha2::{Digest, Sha256};
use sqlite_writer::SqliteWriter;
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Row};
use statements::OwnedBy;

/// Tokens are stored as their SHA-256: a leaked database leaks no agent's credentials.
pub fn hash_token(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Bytes as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Two hex digests compared in constant time: how much of a guess matches must not show.
pub fn same_secret(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

pub fn new_token() -> StoreResult<String> {
    let mut bytes = [0u8; 24];
    getrandom::fill(&mut bytes).map_err(|e| StoreError::Conflict(format!("no randomness for a token: {e}")))?;
    Ok(hex(&bytes))
}

/// Where reconciles are written.
#[derive(Clone)]
enum Backend {
    /// One writer thread owns the write connection and commits concurrent reconciles together.
    Sqlite(SqliteWriter),
    /// Reconciles run on the pool, optimistic against the agent's revision (`postgres`).
    Postgres,
}

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    backend: Backend,
    clock: Clock,
    /// When this process last wrote each agent's `last_seen_at` (`agents_seen`).
    seen_written: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, i64>>>,
}

/// Workspaces per page of the agent page and the list API, at most.
pub const MAX_PAGE: usize = 500;

/// How the store connects; the bench's floor connects the same way. SQLite: one connection
/// (one writer: no "database is locked" under load). PostgreSQL: eight, and a connection idle
/// for a second or more is pinged before it is handed out, not every one: a reconcile takes one
/// or two a request, and a ping is a round trip. A connection that breaks within a second of
/// its last use fails its request once, and the agent retries.
pub fn pool_options(sqlite: bool) -> AnyPoolOptions {
    AnyPoolOptions::new()
        .max_connections(if sqlite { 1 } else { 8 })
        .test_before_acquire(false)
        .before_acquire(move |connection, meta| {
            Box::pin(async move {
                if !sqlite && meta.idle_for >= std::time::Duration::from_secs(1) {
                    sqlx::Connection::ping(connection).await?;
                }
                Ok(true)
            })
        })
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
        let sqlite = url.starts_with("sqlite:");
        if sqlite {
            SqliteWriter::check_writable(&url)?;
        }
        let pool = pool_options(sqlite).connect(&url).await?;
        schema::migrate(&pool).await?;
        let backend = if sqlite { Backend::Sqlite(SqliteWriter::open(&url)?) } else { Backend::Postgres };
        Ok(Self { pool, backend, clock: Clock::system(), seen_written: Default::default() })
    }

    /// The same store with its timestamps from `clock` (tests set the time this way).
    pub fn with_clock(self, clock: Clock) -> Self {
        Self { clock, ..self }
    }

    /// Now, by the store's clock.
    pub fn now(&self) -> i64 {
        self.clock.now()
    }

    /// Whether the database answers and, on SQLite, the writer thread runs: what `/healthz`
    /// reports, so that a dead writer does not pass for a healthy control plane.
    pub async fn health(&self) -> StoreResult<()> {
        if let Backend::Sqlite(writer) = &self.backend
            && !writer.alive()
        {
            return Err(StoreError::Writer("the writer thread has stopped".into()));
        }
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Whether this process can serve at all, whatever the database says: on SQLite, its
    /// writer thread runs. What `/livez` reports: a database outage is no reason to restart.
    pub fn alive(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(writer) => writer.alive(),
            Backend::Postgres => true,
        }
    }

    /// Workspaces by actual state, every agent's: what `/metrics` counts.
    pub async fn workspace_counts(&self) -> StoreResult<Vec<(String, i64)>> {
        let sql = "SELECT actual_state, COUNT(*) FROM workspaces GROUP BY actual_state ORDER BY actual_state";
        Ok(sqlx::query_as(sql).fetch_all(&self.pool).await?)
    }

    /// Register an agent; returns its token, which is shown once and stored hashed.
    pub async fn create_agent(&self, id: &str, image_pull_secrets: &[ImagePullSecret]) -> StoreResult<String> {
        self.create_agent_with(id, image_pull_secrets, &AgentConfig::default()).await
    }

    /// Register an agent with its workspace settings.
    pub async fn create_agent_with(
        &self,
        id: &str,
        image_pull_secrets: &[ImagePullSecret],
        config: &AgentConfig,
    ) -> StoreResult<String> {
        let token = new_token()?;
        let secrets = serde_json::to_string(image_pull_secrets).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let config = serde_json::to_string(config).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        sqlx::query(
            "INSERT INTO agents (id, token_hash, image_pull_secrets, created_at, workspaces_config) \
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(id)
        .bind(hash_token(&token))
        .bind(secrets)
        .bind(self.clock.now())
        .bind(config)
        .execute(&self.pool)
        .await
        .map_err(|e| conflict(e, format!("agent {id:?} already exists")))?;
        Ok(token)
    }

    pub async fn agent_ids(&self) -> StoreResult<Vec<String>> {
        let rows = sqlx::query("SELECT id FROM agents ORDER BY id").fetch_all(&self.pool).await?;
        rows.iter().map(|row| Ok(row.try_get("id")?)).collect()
    }

    pub async fn agent_exists(&self, id: &str) -> StoreResult<bool> {
        Ok(sqlx::query("SELECT id FROM agents WHERE id = $1").bind(id).fetch_optional(&self.pool).await?.is_some())
    }

    pub async fn create_workspace(&self, agent_id: &str, new: &NewWorkspace) -> StoreResult<Workspace> {
        let now = self.clock.now();
        let env = serde_json::to_string(&new.env).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let processed = match &new.devfile_accepted {
            Some(devfile) => Some(serde_json::to_string(&**devfile).map_err(|e| StoreError::Corrupt(e.to_string()))?),
            None => None,
        };
        // Under the agent's lock, so that two creations cannot both take the last place.
        let mut tx = self.begin_write().await?;
        self.lock_agent(&mut tx, agent_id).await?;
        let (config, _) = statements::read_settings(&mut tx, agent_id)
            .await?
            .ok_or_else(|| StoreError::Conflict(format!("no agent {agent_id:?}")))?;
        let existing = self.alive_workspaces(&mut tx, agent_id, None).await?;
        if !config.admits_another(existing) {
            return Err(StoreError::Conflict(format!(
                "agent {agent_id:?} has as many workspaces that are not terminated as its workspaces_quota allows"
            )));
        }
        // Counted by the user when there is one; a legacy owner name by the name.
        let owned = match (&new.owner_id, &new.owner) {
            (Some(id), _) => self.alive_workspaces(&mut tx, agent_id, Some(OwnedBy::User(id))).await?,
            (None, Some(owner)) => self.alive_workspaces(&mut tx, agent_id, Some(OwnedBy::Name(owner))).await?,
            (None, None) => 0,
        };
        config.admits_another_of(new.owner.as_deref(), owned).map_err(StoreError::Conflict)?;
        let namespace = match config.shared_namespace.as_str() {
            "" => workspace_namespace(agent_id, &new.name),
            shared => {
                statements::check_name_free_in(&mut tx, shared, &new.name).await?;
                shared.to_string()
            }
        };
        sqlx::query(
            "INSERT INTO workspaces (agent_id, name, namespace, image, cpu, memory, env, desired_state, actual_state, \
             desired_state_updated_at, actual_state_updated_at, created_at, force_include_all_resources, owner, owner_id, \
             agent_config, devfile, processed_devfile) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, 1, $13, \
             $14, (SELECT workspaces_config FROM agents WHERE id = $1), $15, $16)",
        )
        .bind(agent_id)
        .bind(&new.name)
        .bind(namespace)
        .bind(&new.image)
        .bind(new.cpu.clone())
        .bind(new.memory.clone())
        .bind(env)
        .bind(DesiredState::Running.as_str())
        .bind(ActualState::CreationRequested.as_str())
        .bind(now)
        .bind(now)
        .bind(now)
        .bind(new.owner.clone())
        .bind(new.owner_id.clone())
        .bind(new.devfile.clone().filter(|_| processed.is_some()))
        .bind(processed)
        .execute(&mut *tx)
        .await
        .map_err(|e| match conflict(e, String::new()) {
            StoreError::Conflict(_) => StoreError::NameTaken(new.name.clone()),
            other => other,
        })?;
        tx.commit().await?;
        self.workspace(agent_id, &new.name).await?.ok_or_else(|| StoreError::Corrupt("inserted row vanished".into()))
    }

    pub async fn workspace(&self, agent_id: &str, name: &str) -> StoreResult<Option<Workspace>> {
        let sql = format!("SELECT {} FROM workspaces WHERE agent_id = $1 AND name = $2", *SELECT_COLUMNS);
        let row = sqlx::query(&sql).bind(agent_id).bind(name).fetch_optional(&self.pool).await?;
        row.as_ref().map(workspace_from_row).transpose()
    }

    /// A workspace, and its devfile as its user wrote it (None when it was made from an
    /// image), read together: the devfile shown is the one of the workspace that was checked.
    pub async fn workspace_with_devfile(
        &self,
        agent_id: &str,
        name: &str,
    ) -> StoreResult<Option<(Workspace, Option<String>)>> {
        let sql = format!("SELECT {}, devfile FROM workspaces WHERE agent_id = $1 AND name = $2", *SELECT_COLUMNS);
        let row = sqlx::query(&sql).bind(agent_id).bind(name).fetch_optional(&self.pool).await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some((workspace_from_row(&row)?, row.try_get::<Option<String>, _>("devfile")?)))
    }

    pub async fn workspaces(&self, agent_id: &str) -> StoreResult<Vec<Workspace>> {
        let rows = sqlx::query(&AGENT_WORKSPACES).bind(agent_id).fetch_all(&self.pool).await?;
        rows.iter().map(workspace_from_row).collect()
    }

    /// One page of an agent's workspaces in name order: at most `limit` (capped at
    /// [`MAX_PAGE`]) after the name `after`; with `owner_id`, that user's alone.
    pub async fn workspaces_page(
        &self,
        agent_id: &str,
        after: &str,
        limit: usize,
        owner_id: Option<&str>,
    ) -> StoreResult<Vec<Workspace>> {
        let limit = i64::try_from(limit.clamp(1, MAX_PAGE)).unwrap_or(1);
        let sql = format!(
            "SELECT {} FROM workspaces WHERE agent_id = $1 AND name > $2 AND ($3 = '' OR owner_id = $3) \
             ORDER BY name LIMIT $4",
            *SELECT_COLUMNS
        );
        let rows = sqlx::query(&sql)
            .bind(agent_id)
            .bind(after)
            .bind(owner_id.unwrap_or_default())
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(workspace_from_row).collect()
    }

    /// A user's workspaces across every agent, in (agent, name) order: at most `limit` after
    /// `after` (`agent/name`).
    pub async fn workspaces_of(
        &self,
        owner_id: &str,
        after: (&str, &str),
        limit: usize,
    ) -> StoreResult<Vec<Workspace>> {
        let limit = i64::try_from(limit.clamp(1, MAX_PAGE)).unwrap_or(1);
        let sql = format!(
            "SELECT {} FROM workspaces WHERE owner_id = $1 AND (agent_id > $2 OR (agent_id = $2 AND name > $3)) \
             ORDER BY agent_id, name LIMIT $4",
            *SELECT_COLUMNS
        );
        let rows =
            sqlx::query(&sql).bind(owner_id).bind(after.0).bind(after.1).bind(limit).fetch_all(&self.pool).await?;
        rows.iter().map(workspace_from_row).collect()
    }

    /// Set the desired state. `Terminated` is final, in the UPDATE itself: a terminated
    /// workspace cannot be revived, however the calls interleave. On PostgreSQL it takes the
    /// agent's lock, so that a reconcile running meanwhile cannot write back a stale state.
    pub async fn set_desired(
        &self,
        agent_id: &str,
        name: &str,
        desired: DesiredState,
    ) -> StoreResult<Option<Workspace>> {
        let mut tx = self.begin_write().await?;
        self.lock_agent(&mut tx, agent_id).await?;
        let updated = sqlx::query(
            "UPDATE workspaces SET desired_state = $1, desired_state_updated_at = $2 \
             WHERE agent_id = $3 AND name = $4 AND desired_state <> $1 AND desired_state <> $5",
        )
        .bind(desired.as_str())
        .bind(self.clock.now())
        .bind(agent_id)
        .bind(name)
        .bind(DesiredState::Terminated.as_str())
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        let Some(current) = self.workspace(agent_id, name).await? else { return Ok(None) };
        if updated == 0 && current.desired_state == DesiredState::Terminated && desired != DesiredState::Terminated {
            return Err(StoreError::Conflict(format!("workspace {name:?} is terminated; that is final")));
        }
        Ok(Some(current))
    }

    /// One reconcile, in one transaction: on SQLite through the store's writer thread, which
    /// commits concurrent reconciles together; on PostgreSQL in two round trips, guarded by the
    /// agent's revision.
    pub async fn reconcile(
        &self,
        agent: &Agent,
        request: ReconcileRequest,
        config: &PipelineConfig,
    ) -> StoreResult<ReconcileResponse> {
        match &self.backend {
            Backend::Sqlite(writer) => {
                writer.reconcile(agent.clone(), request, config.clone(), self.clock.clone()).await
            }
            Backend::Postgres => self.reconcile_postgres(agent, &request, config).await,
        }
    }
}

pub(super) fn conflict(error: sqlx::Error, message: String) -> StoreError {
    match &error {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Conflict(message),
        _ => StoreError::Database(error),
    }
}
