//! `wsync control-plane backup|restore`: the SQLite database's upkeep, run beside (backup) or
//! instead of (restore) a serving control plane. PostgreSQL's are pg_dump and pg_restore.

use super::store::StoreError;
use super::store::backup::{self, Summary};
use std::path::PathBuf;

const DEFAULT_DATABASE_URL: &str = "sqlite://wsync-control-plane.db";

#[derive(clap::Subcommand, Debug)]
pub enum Maintenance {
    /// Write a consistent copy of the SQLite database, while the control plane serves.
    Backup {
        /// The backup to write; never overwritten.
        #[arg(required_unless_present = "into_dir", conflicts_with = "into_dir")]
        file: Option<PathBuf>,
        /// Write it into this directory, named by the time (UTC), and keep the newest --keep.
        #[arg(long)]
        into_dir: Option<PathBuf>,
        /// Backups --into-dir keeps, this one included.
        #[arg(long, default_value_t = 7, requires = "into_dir", value_parser = clap::value_parser!(u16).range(1..))]
        keep: u16,
        #[arg(long, env = "WSYNC_DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
        database_url: String,
    },
    /// Put a backup in place of the SQLite database. The control plane must be stopped; the
    /// database replaced is kept beside it.
    Restore {
        /// A backup `backup` wrote.
        file: PathBuf,
        #[arg(long, env = "WSYNC_DATABASE_URL", default_value = DEFAULT_DATABASE_URL)]
        database_url: String,
    },
}

/// Run it, saying on stdout what was done.
pub fn run(maintenance: Maintenance) -> Result<(), StoreError> {
    let now = jiff::Timestamp::now();
    match maintenance {
        Maintenance::Backup { file, into_dir, keep, database_url } => {
            let database = backup::sqlite_file(&database_url)?;
            let (to, summary, removed) = match (file, into_dir) {
                (Some(file), _) => {
                    let summary = backup::backup(&database, &file)?;
                    (file, summary, Vec::new())
                }
                (None, Some(dir)) => backup::backup_into_dir(&database, &dir, usize::from(keep), now)?,
                (None, None) => return Err(StoreError::Backup("give a FILE or --into-dir".into())),
            };
            println!("backed up {} to {}: {}", database.display(), to.display(), described(&summary));
            for path in removed {
                println!("removed the older backup {}", path.display());
            }
        }
        Maintenance::Restore { file, database_url } => {
            let database = backup::sqlite_file(&database_url)?;
            let restored = backup::restore(&file, &database, now)?;
            println!("restored {} into {}: {}", file.display(), database.display(), described(&restored.summary));
            if let Some(kept) = restored.kept {
                println!("the database it replaced is kept at {}", kept.display());
            }
            println!(
                "Start the control plane; then make each agent resync in full, which repairs every workspace's \
                 state and lists those the backup lacks as orphans:\n  kubectl -n <agent namespace> annotate wss \
                 <agent id> wsync.dev/resync-requested=$(date +%s) --overwrite"
            );
        }
    }
    Ok(())
}

fn described(summary: &Summary) -> String {
    format!(
        "schema version {}, {} agents, {} workspaces, {} bytes",
        summary.schema_version, summary.agents, summary.workspaces, summary.bytes
    )
}
