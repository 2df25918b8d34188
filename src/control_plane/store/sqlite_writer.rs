//! SQLite's writer: one thread owns the write connection and runs each reconcile's whole
//! transaction synchronously, and the reconciles that queued meanwhile share one commit.
//!
//! Through sqlx, a reconcile held SQLite's only connection across five round trips to its
//! worker thread (BENCHMARKS.md); here it is one message in and one out. Each reconcile runs
//! in a savepoint, so one that fails rolls back alone, and every answer is sent only after the
//! commit: an acknowledgement never reaches an agent before it is durable.

use super::error::{StoreError, StoreResult};
use super::rows::{AGENT_WORKSPACES, SQLITE_SAVE, SavedRow, WorkspaceReader};
use crate::control_plane::decisions::pipeline::{self, PipelineConfig};
use crate::control_plane::model::{Agent, Clock};
use crate::protocol::{ReconcileRequest, ReconcileResponse};
use rusqlite::{Connection, TransactionBehavior};
use sqlx::sqlite::SqliteConnectOptions;
use std::str::FromStr;
use tokio::sync::{mpsc, oneshot};

/// Reconciles committed together at most, which bounds how long the first one waits.
const MAX_BATCH: usize = 64;
/// Reconciles waiting for the writer; beyond this, callers wait to enqueue.
const QUEUE: usize = 1024;

struct Job {
    agent: Agent,
    request: ReconcileRequest,
    config: PipelineConfig,
    clock: Clock,
    reply: oneshot::Sender<StoreResult<ReconcileResponse>>,
}

/// The handle to the writer thread; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub(super) struct SqliteWriter {
    jobs: mpsc::Sender<Job>,
}

impl SqliteWriter {
    /// Open a connection of its own to the database at `url`, which sqlx has created and
    /// migrated, and start the thread.
    pub fn open(url: &str) -> StoreResult<Self> {
        refuse_in_memory(url)?;
        let options = SqliteConnectOptions::from_str(url)?;
        let connection = Connection::open(options.get_filename())?;
        // The same settings as the pool's (store/mod.rs). rusqlite waits 5 s for a busy database.
        connection.pragma_update(None, "foreign_keys", "ON")?;
        connection.pragma_update(None, "synchronous", "NORMAL")?;
        let (jobs, queue) = mpsc::channel(QUEUE);
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || run(connection, queue))
            .map_err(|e| StoreError::Writer(format!("starting the writer thread: {e}")))?;
        Ok(Self { jobs })
    }

    /// Refuse at once, naming the file, a database that cannot be written (a read-only file
    /// or filesystem): sqlx's pool would retry "unable to open database file" until its
    /// timeout, and a control plane that can only read would fail every reconcile.
    pub fn check_writable(url: &str) -> StoreResult<()> {
        // Before any file is opened: rusqlite would open sqlx's in-memory name as a file.
        refuse_in_memory(url)?;
        let options = SqliteConnectOptions::from_str(url)?;
        let path = options.get_filename();
        let unwritable =
            |e: rusqlite::Error| StoreError::Unwritable { path: path.display().to_string(), reason: e.to_string() };
        let connection = Connection::open(path).map_err(unwritable)?;
        connection.execute_batch("PRAGMA journal_mode = WAL; BEGIN IMMEDIATE; ROLLBACK;").map_err(unwritable)?;
        // SQLite opens a file it may not write read-only, without an error.
        match connection.is_readonly(rusqlite::MAIN_DB) {
            Ok(false) => Ok(()),
            Ok(true) => Err(StoreError::Unwritable {
                path: path.display().to_string(),
                reason: "SQLite could open it read-only only".into(),
            }),
            Err(e) => Err(unwritable(e)),
        }
    }

    /// Whether the writer thread still runs (it ends only when it panics or its queue closes).
    pub fn alive(&self) -> bool {
        !self.jobs.is_closed()
    }

    pub async fn reconcile(
        &self,
        agent: Agent,
        request: ReconcileRequest,
        config: PipelineConfig,
        clock: Clock,
    ) -> StoreResult<ReconcileResponse> {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Writer("the writer thread has stopped".into());
        self.jobs.send(Job { agent, request, config, clock, reply }).await.map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The writer needs a connection of its own to the pool's database: one in memory is the
/// pool's alone.
fn refuse_in_memory(url: &str) -> StoreResult<()> {
    if in_memory(url) {
        return Err(StoreError::Writer(format!("{url}: SQLite in memory is not supported; give a file")));
    }
    Ok(())
}

/// Whether a SQLite URL names a database in memory, which has no file.
pub(super) fn in_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

fn run(mut connection: Connection, mut queue: mpsc::Receiver<Job>) {
    while let Some(first) = queue.blocking_recv() {
        if crate::runtime::failpoint::armed("sqlite-writer-dies") {
            panic!("failpoint sqlite-writer-dies");
        }
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        match commit(&mut connection, &batch) {
            Ok(answers) => {
                for (job, answer) in batch.into_iter().zip(answers) {
                    // The caller may have gone (its request was cancelled); the commit stands.
                    let _ = job.reply.send(answer);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, reconciles = batch.len(), "committing reconciles failed; none was saved");
                for job in batch {
                    let _ = job.reply.send(Err(StoreError::Writer(format!("committing: {e}"))));
                }
            }
        }
    }
}

/// Run a batch in one transaction; the outer error means nothing of it was committed.
fn commit(connection: &mut Connection, batch: &[Job]) -> rusqlite::Result<Vec<StoreResult<ReconcileResponse>>> {
    let mut tx = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut answers = Vec::with_capacity(batch.len());
    for job in batch {
        let savepoint = tx.savepoint()?;
        let answer = reconcile(&savepoint, job);
        if answer.is_ok() {
            savepoint.commit()?;
        } // Dropped uncommitted, a savepoint rolls back.
        answers.push(answer);
    }
    tx.commit()?;
    Ok(answers)
}

fn reconcile(connection: &Connection, job: &Job) -> StoreResult<ReconcileResponse> {
    let now = job.clock.now();
    let mut load = connection.prepare_cached(&AGENT_WORKSPACES)?;
    let mut reader = WorkspaceReader::default();
    let mut workspaces =
        load.query_and_then([&job.agent.id], |row| reader.read(row))?.collect::<StoreResult<Vec<_>>>()?;
    let decision =
        pipeline::decide(&mut workspaces, &job.agent, &job.request, &job.config, now).map_err(StoreError::Corrupt)?;
    let mut save = connection.prepare_cached(&SQLITE_SAVE)?;
    for &i in &decision.touched {
        save.execute(rusqlite::params_from_iter(SavedRow::of(&workspaces[i]).sqlite_parameters()))?;
    }
    let mut record = connection.prepare_cached(super::statements::SQLITE_RECORD_ORPHAN)?;
    for orphan in &decision.orphans {
        let version = orphan.deployment_resource_version.as_deref();
        let actual = orphan.actual_state.as_str();
        record.execute(rusqlite::params![
            job.agent.id,
            orphan.namespace,
            orphan.name,
            version,
            orphan.last_seen,
            actual
        ])?;
    }
    let mut record = connection.prepare_cached(super::statements::SQLITE_RECORD_ERROR)?;
    let mut trim = connection.prepare_cached(super::statements::SQLITE_TRIM_ERRORS)?;
    for error in &decision.new_errors {
        record.execute(rusqlite::params![
            job.agent.id,
            error.name,
            error.error_type,
            error.message,
            error.first_seen
        ])?;
        trim.execute(rusqlite::params![job.agent.id, error.name, super::statements::TRIM_OFFSET])?;
    }
    Ok(decision.response)
}
