//! What can go wrong in the store.

#[derive(thiserror::Error, Debug)]
pub enum StoreError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("migrating the database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("{0}")]
    Conflict(String),
    /// A workspace name an agent already has, whoever's workspace it is.
    #[error("workspace {0:?} already exists")]
    NameTaken(String),
    #[error("corrupt row: {0}")]
    Corrupt(String),
    #[error("database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error(
        "{path} cannot be written ({reason}): the control plane writes the database file and, beside it, \
         its -wal, -shm and -lock files; is the file or its filesystem read-only?"
    )]
    Unwritable { path: String, reason: String },
    /// A backup or restore that could not be made, and why.
    #[error("{0}")]
    Backup(String),
    /// The database was migrated by a newer wsync: this one would misread it.
    #[error(
        "the database's schema is at version {database}, newer than this wsync knows ({known}): a newer \
         control plane has migrated it. Run that version (a rollout in progress finishes by replacing this \
         one), or restore a backup taken before the upgrade"
    )]
    SchemaNewer { database: i64, known: i64 },
    /// The SQLite writer could not commit a batch, or has stopped.
    #[error("database writer: {0}")]
    Writer(String),
}

impl StoreError {
    /// What `/healthz` tells anyone who asks: which part failed, never the driver's words,
    /// which may name the database's host, user or file.
    pub fn health_label(&self) -> &'static str {
        match self {
            Self::Writer(_) => "the database writer thread has stopped",
            Self::Unwritable { .. } => "the database file cannot be written",
            _ => "the database does not answer",
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
