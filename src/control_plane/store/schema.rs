//! The schema's migrations, run at start under a lock (PostgreSQL's advisory lock; one SQLite
//! process holds its file), so that replicas starting together migrate once. Every migration
//! is additive, so a replica of the release before keeps serving on the migrated schema; a
//! database migrated past what this binary knows is refused in words, never half-used.

use super::error::{StoreError, StoreResult};
use sqlx::AnyPool;
use sqlx::migrate::{Migrate, MigrateError, Migrator};

/// The migrations this binary carries (migrations/).
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// The newest schema version this binary knows.
pub fn known_version() -> i64 {
    MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
}

/// What a start found and did.
#[derive(Debug, PartialEq, Eq)]
pub struct Migrated {
    pub from: Option<i64>,
    pub to: i64,
}

/// Migrate the database to [`known_version`], holding the migration lock throughout.
pub async fn migrate(pool: &AnyPool) -> StoreResult<Migrated> {
    let mut connection = pool.acquire().await?;
    // Closed when done, never pooled: however this ends (an error, a cancelled start), no
    // pooled session keeps PostgreSQL's session lock.
    connection.close_on_drop();
    connection.lock().await?;
    let migrated = migrate_locked(&mut connection).await;
    let _ = connection.unlock().await;
    let migrated = migrated?;
    match migrated.from {
        Some(from) if from == migrated.to => tracing::info!(version = migrated.to, "the schema is up to date"),
        from => tracing::info!(from = from.unwrap_or(0), to = migrated.to, "migrated the schema"),
    }
    Ok(migrated)
}

async fn migrate_locked(connection: &mut sqlx::AnyConnection) -> StoreResult<Migrated> {
    connection.ensure_migrations_table().await?;
    let from = newest_applied(connection).await?;
    let known = known_version();
    if let Some(database) = from.filter(|v| *v > known) {
        return Err(StoreError::SchemaNewer { database, known });
    }
    // The lock is already held, on this connection.
    let unlocked = Migrator {
        migrations: MIGRATOR.migrations.clone(),
        ignore_missing: false,
        locking: false,
        no_tx: MIGRATOR.no_tx,
    };
    unlocked.run_direct(connection).await.map_err(|e| match e {
        MigrateError::VersionMissing(database) if database > known => StoreError::SchemaNewer { database, known },
        other => other.into(),
    })?;
    Ok(Migrated { from, to: newest_applied(connection).await?.unwrap_or(0) })
}

async fn newest_applied(connection: &mut sqlx::AnyConnection) -> StoreResult<Option<i64>> {
    Ok(connection.list_applied_migrations().await?.iter().map(|m| m.version).max())
}
