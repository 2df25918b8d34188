//! PostgreSQL for tests, from `hack/local-postgres.sh`; a missing one fails, never skips.

use std::process::Command;
use std::sync::OnceLock;

/// Held by a test that restarts PostgreSQL, and by those that must not see it restart.
pub static EXCLUSIVE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The server's admin URL.
pub fn admin_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/local-postgres.sh");
        let up = Command::new(script).arg("up").status().expect("run hack/local-postgres.sh");
        assert!(up.success(), "PostgreSQL did not come up (hack/local-postgres.sh up)");
        let out = Command::new(script).arg("env").output().expect("run hack/local-postgres.sh env");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .strip_prefix("export WSYNC_TEST_POSTGRES_URL=")
            .expect("a URL")
            .to_string()
    })
}

/// A fresh, empty database named `<prefix>_<pid>`; returns its URL.
pub async fn fresh_database(prefix: &str) -> String {
    sqlx::any::install_default_drivers();
    let admin = admin_url();
    let database = format!("{prefix}_{}", std::process::id());
    let pool = sqlx::AnyPool::connect(admin).await.expect("PostgreSQL is reachable");
    sqlx::query(&format!("DROP DATABASE IF EXISTS {database}")).execute(&pool).await.expect("drop");
    sqlx::query(&format!("CREATE DATABASE {database}")).execute(&pool).await.expect("create");
    admin.rsplit_once('/').map(|(base, _)| format!("{base}/{database}")).expect("a database URL")
}

/// Stop PostgreSQL and start it again, keeping its data.
pub fn restart() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/hack/local-postgres.sh");
    let restarted = Command::new(script).arg("restart").status().expect("run hack/local-postgres.sh restart");
    assert!(restarted.success(), "PostgreSQL did not restart");
}
