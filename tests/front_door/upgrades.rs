//! #41's upgrades, on one PostgreSQL: the previous release (built from its commit by
//! `hack/previous-release.sh`) serves; two replicas of this one start together and migrate
//! the schema once, under the migration lock; the previous release keeps serving on the
//! migrated schema, and refuses in words when it starts again. A database migrated past what
//! this release knows is refused in words too.

use crate::support::ControlPlaneProcess;
use crate::*;
use std::path::PathBuf;
use std::process::Command;

fn previous_release() -> PathBuf {
    let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/previous-release.sh"))
        .output()
        .expect("hack/previous-release.sh");
    assert!(out.status.success(), "building the previous release: {}", String::from_utf8_lossy(&out.stderr));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// An agent's empty partial reconcile, answered 201.
async fn reconcile(control_plane: &ControlPlaneProcess, token: &str) {
    let answer = http()
        .post(format!("{}{}", control_plane.url, wsync::protocol::RECONCILE_PATH))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(r#"{"update_type":"partial","workspace_agent_infos":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201, "{}", answer.text().await.unwrap_or_default());
}

/// `wsync control-plane` started and expected to refuse: what it said.
fn refused(program: &std::path::Path, database: &str) -> String {
    let out = Command::new(program)
        .args(["control-plane", "--listen", "127.0.0.1:0", "--database-url", database])
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!out.status.success(), "it started");
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn names(list: &str) -> Vec<String> {
    let listed: Value = serde_json::from_str(list).unwrap();
    listed.as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_migrates_once_and_the_previous_release_serves_on_or_refuses_in_words() {
    let old = previous_release();
    let database = crate::support::postgres::fresh_database("upgrades").await;
    let dir = tempfile::tempdir().unwrap();
    let previous = ControlPlaneProcess::start_release(&old, &database, dir.path().join("old.log"), &[]);
    let registered: Value = serde_json::from_str(&previous.cli(&["agents", "register", "a1", "-o", "json"])).unwrap();
    let token = registered["token"].as_str().unwrap().to_string();
    previous.cli(&["workspaces", "--agent", "a1", "create", "before", "--image", "img:1"]);

    // Two replicas of this release start at once.
    let logs = [dir.path().join("new-1.log"), dir.path().join("new-2.log")];
    let [first, second] = std::thread::scope(|scope| {
        logs.clone()
            .map(|log| {
                let database = database.clone();
                scope.spawn(move || ControlPlaneProcess::start(&database, log, &[]))
            })
            .map(|started| started.join().unwrap())
    });
    let said = [first.logs(), second.logs()];
    let migrated = said.iter().filter(|log| log.contains("migrated the schema")).count();
    let up_to_date = said.iter().filter(|log| log.contains("the schema is up to date")).count();
    assert_eq!((migrated, up_to_date), (1, 1), "one migrates, the other finds it done:\n{}\n{}", said[0], said[1]);
    let pool = sqlx::AnyPool::connect(&database).await.unwrap();
    let versions: Vec<(i64,)> =
        sqlx::query_as("SELECT version FROM _sqlx_migrations ORDER BY version").fetch_all(&pool).await.unwrap();
    let newest = versions.iter().map(|v| v.0).max();
    assert_eq!((versions.len(), newest), (11, Some(11)), "each migration once: {versions:?}");

    // The previous release serves on: reads, writes, an agent's reconcile.
    previous.cli(&["workspaces", "--agent", "a1", "create", "during", "--image", "img:1"]);
    previous.cli(&["agents", "register", "a2"]);
    reconcile(&previous, &token).await;
    let seen: (Option<i64>,) =
        sqlx::query_as("SELECT last_seen_at FROM agents WHERE id = 'a1'").fetch_one(&pool).await.unwrap();
    assert_eq!(seen.0, None, "the previous release knows no last_seen_at");
    // This release sees what either wrote, and records the agent's visit.
    assert_eq!(names(&first.cli(&["workspaces", "--agent", "a1", "list", "-o", "json"])), ["before", "during"]);
    reconcile(&second, &token).await;
    let mut seen = None;
    for _ in 0..100 {
        let row: (Option<i64>,) =
            sqlx::query_as("SELECT last_seen_at FROM agents WHERE id = 'a1'").fetch_one(&pool).await.unwrap();
        seen = row.0;
        if seen.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(seen.is_some(), "this release records when the agent was last seen");
    assert_eq!(names(&previous.cli(&["workspaces", "--agent", "a1", "list", "-o", "json"])), ["before", "during"]);

    // Started again, the previous release refuses the schema it does not know.
    drop(previous);
    let said = refused(&old, &database);
    assert!(said.contains("migration 11 was previously applied but is missing"), "{said}");

    // And this release refuses one migrated past it, in words, changing nothing.
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'a future release', TRUE, '\\x00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    let said = refused(std::path::Path::new(env!("CARGO_BIN_EXE_wsync")), &database);
    assert!(said.contains("schema is at version 9999, newer than this wsync knows (11)"), "{said}");
    assert!(first.healthy() && second.healthy(), "the replicas already serving serve on");
}
