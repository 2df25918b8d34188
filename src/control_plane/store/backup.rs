//! SQLite's backups and restores. A backup is `VACUUM INTO`: one read transaction, so it is
//! consistent while the control plane serves and is never restarted by the writes around it.
//! It is checked before it takes its name. A restore runs only while no control plane holds
//! the file, and keeps the database it replaces. PostgreSQL's are pg_dump's (README, "Backups").

use super::error::{StoreError, StoreResult};
use super::schema::known_version;
use rusqlite::{Connection, OpenFlags};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// What a backup holds, read back from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub schema_version: i64,
    pub agents: i64,
    pub workspaces: i64,
    pub bytes: u64,
}

/// What a restore did.
#[derive(Debug)]
pub struct Restored {
    pub summary: Summary,
    /// Where the database it replaced was kept, if there was one.
    pub kept: Option<PathBuf>,
}

/// The file a `sqlite://` URL names; a PostgreSQL URL is refused with the commands to use.
pub fn sqlite_file(url: &str) -> StoreResult<PathBuf> {
    if !url.starts_with("sqlite:") {
        return Err(failed(
            "this is not a SQLite database: back PostgreSQL up with pg_dump --format=custom, and restore it with \
             pg_restore --clean --if-exists --single-transaction (README, \"Backups\")",
        ));
    }
    Ok(sqlx::sqlite::SqliteConnectOptions::from_str(url)?.get_filename().to_path_buf())
}

/// Held by a control plane for as long as it serves a SQLite file, and by a restore: two
/// processes never write one file, and a restore never swaps a file under a running one.
/// An advisory lock on `<file>-lock`, beside SQLite's `-wal` and `-shm`; unwritable, it is
/// refused as the database would be.
pub struct ProcessLock(#[allow(dead_code)] File);

impl ProcessLock {
    /// The lock on the file a database URL names; none for PostgreSQL or SQLite in memory
    /// (the writer refuses that one, saying why).
    pub fn for_url(url: &str) -> StoreResult<Option<Self>> {
        if !url.starts_with("sqlite:") || super::sqlite_writer::in_memory(url) {
            return Ok(None);
        }
        Self::take(&sqlite_file(url)?).map(Some)
    }

    pub fn take(database: &Path) -> StoreResult<Self> {
        let path = beside(database, "-lock");
        let file = File::options().read(true).write(true).create(true).truncate(false).open(&path);
        // Made by another user (a restore run as root): a lock needs only to be read.
        let file = file.or_else(|_| File::open(&path));
        let file = file.map_err(|e| StoreError::Unwritable {
            path: database.display().to_string(),
            reason: format!("{}: {e}", path.display()),
        })?;
        match file.try_lock() {
            Ok(()) => Ok(Self(file)),
            Err(std::fs::TryLockError::WouldBlock) => Err(failed(format!(
                "another process, a control plane or a restore, holds {}: one process serves a SQLite database \
                 (for more, use PostgreSQL); stop it first",
                database.display()
            ))),
            Err(std::fs::TryLockError::Error(e)) => Err(failed(format!("locking {}: {e}", path.display()))),
        }
    }
}

/// Copy `database` to `to`, which must not exist, while it may be serving.
pub fn backup(database: &Path, to: &Path) -> StoreResult<Summary> {
    if to.exists() {
        return Err(failed(format!("{} exists: a backup never overwrites a file; name another", to.display())));
    }
    if !database.exists() {
        return Err(failed(format!("{}: no such database", database.display())));
    }
    let partial = beside(to, ".partial");
    remove_if_there(&partial)?;
    // Made empty and 0600 first, which VACUUM INTO writes into: a backup holds token hashes.
    {
        use std::os::unix::fs::OpenOptionsExt;
        let made = File::options().write(true).create_new(true).mode(0o600).open(&partial);
        made.map_err(|e| failed(format!("{}: {e}", partial.display())))?;
    }
    let copied = vacuum_into(database, &partial).and_then(|()| check(&partial));
    let summary = match copied {
        Ok(summary) => summary,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e);
        }
    };
    durable_rename(&partial, to)?;
    Ok(summary)
}

/// A backup into `dir`, named by `now` (UTC), and the oldest of the earlier ones removed so
/// that `keep` remain: what the chart's CronJob runs, with no shell in the image.
pub fn backup_into_dir(
    database: &Path,
    dir: &Path,
    keep: usize,
    now: jiff::Timestamp,
) -> StoreResult<(PathBuf, Summary, Vec<PathBuf>)> {
    let to = dir.join(format!("{BACKUP_PREFIX}{}.db", now.strftime("%Y%m%dT%H%M%SZ")));
    let summary = backup(database, &to)?;
    let mut earlier: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| failed(format!("{}: {e}", dir.display())))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path != database && path.file_name().and_then(|n| n.to_str()).is_some_and(is_timed_backup))
        .collect();
    // The names sort by time; the newest `keep` stay.
    earlier.sort();
    let surplus = earlier.len().saturating_sub(keep.max(1));
    let removed: Vec<PathBuf> = earlier.into_iter().take(surplus).collect();
    for path in &removed {
        std::fs::remove_file(path).map_err(|e| failed(format!("removing {}: {e}", path.display())))?;
    }
    Ok((to, summary, removed))
}

const BACKUP_PREFIX: &str = "wsync-control-plane-";

/// Whether `name` is one `backup_into_dir` writes: the prefix, `YYYYmmddTHHMMSSZ`, `.db`.
fn is_timed_backup(name: &str) -> bool {
    let Some(stamp) = name.strip_prefix(BACKUP_PREFIX).and_then(|rest| rest.strip_suffix(".db")) else {
        return false;
    };
    let bytes = stamp.as_bytes();
    bytes.len() == 16
        && bytes.iter().enumerate().all(|(i, b)| match i {
            8 => *b == b'T',
            15 => *b == b'Z',
            _ => b.is_ascii_digit(),
        })
}

/// Put `backup` in place of `database`, which no process may hold. The database replaced is
/// renamed aside, with its journal, named by `now`: kept whole even when it is corrupt.
pub fn restore(backup: &Path, database: &Path, now: jiff::Timestamp) -> StoreResult<Restored> {
    let _lock = ProcessLock::take(database)?;
    let summary = check(backup)?;
    let known = known_version();
    if summary.schema_version > known {
        return Err(StoreError::SchemaNewer { database: summary.schema_version, known });
    }
    let restoring = beside(database, ".restoring");
    std::fs::copy(backup, &restoring).map_err(|e| failed(format!("copying to {}: {e}", restoring.display())))?;
    let replaced = std::fs::metadata(database).ok();
    if let Some(replaced) = &replaced {
        // The control plane's user must own what it will write; a backup is 0600.
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let owned = std::os::unix::fs::chown(&restoring, Some(replaced.uid()), Some(replaced.gid()));
        owned.map_err(|e| failed(format!("giving {} its owner: {e}", restoring.display())))?;
        let mode = std::fs::Permissions::from_mode(replaced.mode() & 0o7777);
        std::fs::set_permissions(&restoring, mode).map_err(|e| failed(format!("{}: {e}", restoring.display())))?;
    }
    sync(&restoring)?;
    let kept = match replaced {
        Some(_) => {
            let kept = beside(database, &format!(".before-restore-{}", now.strftime("%Y%m%dT%H%M%SZ")));
            if kept.exists() {
                return Err(failed(format!("{} exists: restore again in a second", kept.display())));
            }
            // Its WAL goes with it (SQLite reads it back beside the file); -shm is rebuilt.
            let wal = beside(database, "-wal");
            if wal.exists() {
                durable_rename(&wal, &beside(&kept, "-wal"))?;
            }
            remove_if_there(&beside(database, "-shm"))?;
            durable_rename(database, &kept)?;
            Some(kept)
        }
        None => None,
    };
    durable_rename(&restoring, database)?;
    Ok(Restored { summary, kept })
}

/// Open `path` read-only and read what it holds, after SQLite's own integrity check.
pub fn check(path: &Path) -> StoreResult<Summary> {
    let not_ours = |e: rusqlite::Error| failed(format!("{} is not a control plane's database: {e}", path.display()));
    let connection = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(not_ours)?;
    let integrity: String = connection.query_row("PRAGMA integrity_check", [], |row| row.get(0)).map_err(not_ours)?;
    if integrity != "ok" {
        return Err(failed(format!("{} fails SQLite's integrity check: {integrity}", path.display())));
    }
    let count = |sql: &str| connection.query_row(sql, [], |row| row.get::<_, i64>(0)).map_err(not_ours);
    let schema_version = count("SELECT COALESCE(MAX(version), 0) FROM _sqlx_migrations WHERE success")?;
    let agents = count("SELECT COUNT(*) FROM agents")?;
    let workspaces = count("SELECT COUNT(*) FROM workspaces")?;
    let bytes = std::fs::metadata(path).map_err(|e| failed(format!("{}: {e}", path.display())))?.len();
    Ok(Summary { schema_version, agents, workspaces, bytes })
}

fn vacuum_into(database: &Path, to: &Path) -> StoreResult<()> {
    let connection = Connection::open_with_flags(database, OpenFlags::SQLITE_OPEN_READ_WRITE)
        .map_err(|e| failed(format!("opening {}: {e}", database.display())))?;
    connection.busy_timeout(std::time::Duration::from_secs(30))?;
    let target = to.to_str().ok_or_else(|| failed(format!("{}: not UTF-8", to.display())))?;
    connection
        .execute("VACUUM INTO ?1", [target])
        .map_err(|e| failed(format!("copying {} to {}: {e}", database.display(), to.display())))?;
    Ok(())
}

fn beside(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn remove_if_there(path: &Path) -> StoreResult<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(failed(format!("removing {}: {e}", path.display()))),
        _ => Ok(()),
    }
}

fn sync(path: &Path) -> StoreResult<()> {
    File::open(path).and_then(|f| f.sync_all()).map_err(|e| failed(format!("syncing {}: {e}", path.display())))
}

/// Rename, then sync the directory: the new name survives a crash.
fn durable_rename(from: &Path, to: &Path) -> StoreResult<()> {
    std::fs::rename(from, to).map_err(|e| failed(format!("renaming {} to {}: {e}", from.display(), to.display())))?;
    let dir = to.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    sync(dir)
}

fn failed(message: impl Into<String>) -> StoreError {
    StoreError::Backup(message.into())
}

#[cfg(test)]
mod tests;
