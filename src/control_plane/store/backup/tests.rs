use super::*;
use crate::control_plane::model::NewWorkspace;
use crate::control_plane::store::Store;

fn at(text: &str) -> jiff::Timestamp {
    text.parse().expect("a timestamp")
}

/// A serving store with `workspaces` in it, its last writes still in the WAL.
async fn serving(dir: &Path, workspaces: &[&str]) -> (Store, PathBuf) {
    let file = dir.join("cp.db");
    let store = Store::connect(&format!("sqlite://{}", file.display())).await.expect("connect");
    store.create_agent("a1", &[]).await.expect("agent");
    for name in workspaces {
        store.create_workspace("a1", &NewWorkspace::new(*name, "img:1")).await.expect("workspace");
    }
    (store, file)
}

#[tokio::test]
async fn a_backup_of_a_serving_database_holds_its_last_writes_and_is_never_overwritten() {
    let dir = tempfile::tempdir().expect("dir");
    let (_store, file) = serving(dir.path(), &["one", "two"]).await;
    assert!(beside(&file, "-wal").exists(), "the writes are in the WAL, not yet in the file");
    let to = dir.path().join("b.db");
    let summary = backup(&file, &to).expect("backup");
    assert_eq!((summary.agents, summary.workspaces, summary.schema_version), (1, 2, known_version()));
    assert!(!beside(&to, ".partial").exists());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&to).expect("the backup").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a backup holds token hashes: its owner's alone");
    let again = backup(&file, &to).expect_err("a second backup to the same name");
    assert!(again.to_string().contains("never overwrites"), "{again}");
    assert_eq!(check(&to).expect("still whole"), summary);
}

#[tokio::test]
async fn a_restore_refuses_while_a_control_plane_holds_the_file_and_keeps_what_it_replaces() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, file) = serving(dir.path(), &["one"]).await;
    let to = dir.path().join("b.db");
    backup(&file, &to).expect("backup");
    store.create_workspace("a1", &NewWorkspace::new("later", "img:1")).await.expect("workspace");

    let serving = ProcessLock::take(&file).expect("the control plane's lock");
    let refused = restore(&to, &file, at("2026-12-07T03:00:00Z")).expect_err("refused while served");
    assert!(refused.to_string().contains("stop it first"), "{refused}");
    assert_eq!(check(&file).expect("untouched").workspaces, 2);
    drop((serving, store));

    let restored = restore(&to, &file, at("2026-12-07T03:00:00Z")).expect("restore");
    assert_eq!(restored.summary.workspaces, 1);
    assert_eq!(check(&file).expect("restored").workspaces, 1);
    let kept = restored.kept.expect("the replaced database is kept");
    assert!(kept.ends_with("cp.db.before-restore-20261207T030000Z"), "{}", kept.display());
    assert_eq!(check(&kept).expect("kept whole").workspaces, 2, "the replaced one, WAL and all");
    assert!(!beside(&file, "-wal").exists(), "no journal of the old database replayed into the restored one");
    let reopened = Store::connect(&format!("sqlite://{}", file.display())).await.expect("serves again");
    assert_eq!(reopened.workspace_counts().await.expect("counts").iter().map(|(_, n)| n).sum::<i64>(), 1);
}

#[tokio::test]
async fn a_backup_from_a_newer_wsync_or_not_a_database_is_refused_in_words() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, file) = serving(dir.path(), &[]).await;
    drop(store);
    let newer = dir.path().join("newer.db");
    backup(&file, &newer).expect("backup");
    let connection = Connection::open(&newer).expect("open");
    connection
        .execute(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (9999, 'future', TRUE, x'00', 0)",
            [],
        )
        .expect("a future migration");
    drop(connection);
    let refused = restore(&newer, &file, at("2026-12-07T03:00:00Z")).expect_err("newer");
    assert!(matches!(refused, StoreError::SchemaNewer { database: 9999, .. }), "{refused}");
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, b"not a database at all, just some bytes").expect("write");
    let refused = restore(&garbage, &file, at("2026-12-07T03:00:00Z")).expect_err("garbage");
    assert!(refused.to_string().contains("is not a control plane's database"), "{refused}");
    assert_eq!(check(&file).expect("untouched").agents, 1);
}

#[tokio::test]
async fn backups_into_a_directory_keep_the_newest() {
    let dir = tempfile::tempdir().expect("dir");
    let (_store, file) = serving(dir.path(), &["one"]).await;
    let backups = dir.path().join("backups");
    std::fs::create_dir(&backups).expect("dir");
    std::fs::write(backups.join("unrelated.db"), b"x").expect("write");
    std::fs::write(backups.join("wsync-control-plane-1.db"), b"a database of that name").expect("write");
    let mut made = Vec::new();
    for hour in ["01", "02", "03"] {
        let (path, _, _) =
            backup_into_dir(&file, &backups, 2, at(&format!("2026-12-07T{hour}:00:00Z"))).expect("backup");
        made.push(path);
    }
    assert!(made[2].ends_with("wsync-control-plane-20261207T030000Z.db"), "{}", made[2].display());
    let mut left: Vec<String> = std::fs::read_dir(&backups)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "unrelated.db",
            "wsync-control-plane-1.db",
            "wsync-control-plane-20261207T020000Z.db",
            "wsync-control-plane-20261207T030000Z.db"
        ],
        "only the backups it names are pruned"
    );
}

#[tokio::test]
async fn a_corrupt_database_is_replaced_and_kept_as_it_was() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, file) = serving(dir.path(), &["one"]).await;
    let to = dir.path().join("b.db");
    backup(&file, &to).expect("backup");
    drop(store);
    let _ = std::fs::remove_file(beside(&file, "-wal"));
    std::fs::write(&file, b"SQLite format 3\0 and then garbage where the pages were").expect("corrupt it");
    let restored = restore(&to, &file, at("2026-12-07T04:00:00Z")).expect("restored over a corrupt file");
    assert_eq!(check(&file).expect("restored").workspaces, 1);
    let kept = restored.kept.expect("kept");
    assert!(std::fs::read(&kept).expect("kept").ends_with(b"where the pages were"), "byte for byte");
    let again = restore(&to, &file, at("2026-12-07T04:00:00Z")).expect_err("the same second");
    assert!(again.to_string().contains("exists"), "{again}");
}

#[test]
fn postgresql_is_pointed_at_pg_dump() {
    let refused = sqlite_file("postgres://u@db/wsync").expect_err("not SQLite");
    assert!(refused.to_string().contains("pg_dump --format=custom"), "{refused}");
}
