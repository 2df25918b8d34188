//! The database behind the door: a control plane that cannot write its SQLite database
//! refuses to start, at once and naming the file, rather than retrying in its logs; one whose
//! database goes away says so on `/healthz`, in words that name no database, host or user.

use std::process::Command;
use std::time::{Duration, Instant};

/// A small tmpfs of the test's own, unmounted when dropped. Root ignores file modes, so a
/// read-only filesystem is how a database becomes unwritable for it.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=16m", "tmpfs"]).arg(dir.path()).status();
        assert!(mounted.is_ok_and(|s| s.success()), "mounting a tmpfs needs root (the test tier runs as root)");
        Self(dir)
    }

    fn remount_read_only(&self) {
        let remounted = Command::new("mount").args(["-o", "remount,ro"]).arg(self.0.path()).status();
        assert!(remounted.is_ok_and(|s| s.success()), "remount read-only");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

#[test]
fn a_read_only_database_is_refused_at_start_naming_the_file() {
    let disk = Tmpfs::mount();
    let path = disk.0.path().join("control-plane.db");
    let database = format!("sqlite://{}", path.display());
    let log = disk.0.path().join("first-start.log");
    // A database that was written once (migrated, an agent registered), then its filesystem
    // turned read-only, as a full or failing disk, or a volume mounted `ro`, does.
    let control_plane = crate::support::ControlPlaneProcess::start(&database, log, &[]);
    control_plane.cli(&["agents", "register", "a1"]);
    drop(control_plane);
    disk.remount_read_only();

    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(["control-plane", "--listen", "127.0.0.1:0", "--database-url", &database])
        .env("NO_COLOR", "1")
        .output()
        .expect("run wsync control-plane");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "refused: {stderr}");
    assert!(started.elapsed() < Duration::from_secs(10), "at once, not after a pool timeout: {stderr}");
    for words in [path.display().to_string().as_str(), "cannot be written", "read-only"] {
        assert!(stderr.contains(words), "names {words:?}: {stderr}");
    }
}

/// `/healthz` answers anyone, so what it says of a failed database is a fixed label; the
/// driver's words (here PostgreSQL's, which name the database) go to the log. `/livez` still
/// answers 200.
#[tokio::test(flavor = "multi_thread")]
async fn an_unhealthy_database_is_named_in_the_log_not_on_healthz() {
    let url = crate::support::postgres::fresh_database("healthz").await;
    let dir = tempfile::tempdir().unwrap();
    let control_plane = crate::support::ControlPlaneProcess::start(&url, dir.path().join("cp.log"), &[]);
    assert!(control_plane.healthy());
    let database = url.rsplit_once('/').map(|(_, name)| name.to_string()).unwrap();
    let admin = sqlx::AnyPool::connect(crate::support::postgres::admin_url()).await.expect("PostgreSQL");
    sqlx::query(&format!("DROP DATABASE {database} WITH (FORCE)")).execute(&admin).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let (status, body) = loop {
        let (status, body) = control_plane.health();
        if status == 503 || Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!((status, body.as_str()), (503, "unhealthy: the database does not answer\n"));
    // Not ready, but alive: a liveness probe on /livez restarts no replica for a database's
    // outage (charts/wsync-control-plane).
    let live = std::process::Command::new("curl")
        .args(["-s", "-w", "%{http_code}", &format!("{}/livez", control_plane.url)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&live.stdout), "ok200");
    let logs = control_plane.logs();
    assert!(logs.contains("unhealthy") && logs.contains(&database), "the detail is logged: {logs}");
}
