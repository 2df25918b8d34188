//! #41: the seed's failure class "the control plane's database is restored from a backup",
//! end to end with the commands the README gives: `wsync control-plane backup` and `restore`
//! on SQLite, `pg_dump` and `pg_restore` on PostgreSQL. Backed up while serving; then a
//! workspace is created, one stopped and one terminated; the backup is restored and the
//! control plane restarted. After the agent's next full resync every workspace's state and
//! resource version match the cluster, and the one the backup lacks is an orphan, shown and
//! adopted.

use crate::fault_suite::{orphans, record};
use crate::support::system::System;
use crate::support::*;
use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(120);
const IMAGE: &str = "registry.example.com/ide:1";

fn run(program: &str, args: &[&str]) -> String {
    crate::monitoring::run(program, args, std::path::Path::new("."))
}

fn wsync(args: &[&str]) -> String {
    run(env!("CARGO_BIN_EXE_wsync"), args)
}

/// The README's backup, taken while the control plane serves.
fn back_up(database: &str, file: &Path) {
    let file = file.to_str().expect("UTF-8");
    if database.starts_with("sqlite:") {
        let said = wsync(&["control-plane", "backup", file, "--database-url", database]);
        assert!(said.contains("backed up") && said.contains("3 workspaces"), "{said}");
    } else {
        run("pg_dump", &["--format=custom", "--file", file, database]);
    }
}

/// The README's restore, with the control plane stopped.
fn restore(database: &str, file: &Path) {
    let file = file.to_str().expect("UTF-8");
    if database.starts_with("sqlite:") {
        let said = wsync(&["control-plane", "restore", file, "--database-url", database]);
        assert!(said.contains("restored") && said.contains("kept at"), "{said}");
    } else {
        run(
            "pg_restore",
            &["--clean", "--if-exists", "--single-transaction", "--no-owner", "--dbname", database, file],
        );
    }
}

fn workspaces(system: &System) -> Vec<Value> {
    let listed: Value = serde_json::from_str(&system.cli(&["list", "-o", "json"])).expect("json");
    listed.as_array().expect("a list").clone()
}

/// Every workspace the control plane has, that is not terminated, as the cluster has it: its
/// Deployment's resourceVersion, and Running exactly when it asks for a replica.
fn all_match_the_cluster(env: &TestEnv, system: &System) -> Option<Vec<String>> {
    let mut matched = Vec::new();
    for workspace in workspaces(system) {
        let (name, ns) = (workspace["name"].as_str()?, workspace["namespace"].as_str()?);
        let version = get_field(env, ns, &format!("deployment/{name}"), "{.metadata.resourceVersion}")?;
        let replicas = get_field(env, ns, &format!("deployment/{name}"), "{.spec.replicas}")?;
        let state = if replicas == "1" { "Running" } else { "Stopped" };
        if workspace["deployment_resource_version"] != version.as_str() || workspace["actual_state"] != state {
            return None;
        }
        matched.push(format!("{name} {state}"));
    }
    matched.sort();
    Some(matched)
}

async fn restored_from_a_backup(database: Option<String>, prefix: &str) {
    let env = env();
    let (mut system, _proxy) = System::start_behind_proxy(prefix, database).await;
    let database = system.database.clone();
    for name in ["kept", "paused", "gone"] {
        system.cli(&["create", name, "--image", IMAGE]);
    }
    for name in ["kept", "paused", "gone"] {
        system.wait_actual(name, "Running").await;
    }
    let dir = tempfile::tempdir().expect("dir");
    let backup = dir.path().join("backup");
    back_up(&database, &backup);

    // After the backup: one more, one stopped, one terminated.
    system.cli(&["create", "late", "--image", IMAGE]);
    let late = system.wait_actual("late", "Running").await;
    let late_ns = late["namespace"].as_str().expect("namespace").to_string();
    system.cli(&["stop", "paused"]);
    system.wait_actual("paused", "Stopped").await;
    let gone_ns = system.workspace("gone")["namespace"].as_str().expect("namespace").to_string();
    system.cli(&["terminate", "gone"]);
    system.wait_actual("gone", "Terminated").await;
    eventually("gone's namespace deleted", LONG, || {
        (!kubectl(env, &["get", "namespace", &gone_ns]).status.success()).then_some(())
    })
    .await;

    system.control_plane.restart_after(|| restore(&database, &backup));
    let restored = Instant::now();
    kubectl_ok(
        env,
        &["-n", AGENT_NAMESPACE, "annotate", "wss", &system.id, "wsync.dev/resync-requested=restored", "--overwrite"],
    );
    // The backup's word stands: paused runs again, and gone is made again.
    let matched = eventually("every workspace as the cluster has it", LONG, || {
        all_match_the_cluster(env, &system).filter(|m| m.len() == 3 && m.iter().all(|w| w.ends_with("Running")))
    })
    .await;
    assert_eq!(matched, ["gone Running", "kept Running", "paused Running"]);
    let converged = restored.elapsed();

    // late, which the backup lacks, runs on, shown as an orphan and not as a workspace.
    eventually("late listed as an orphan", LONG, || {
        let listed: Value = serde_json::from_str(&system.cli(&["list", "--orphans", "-o", "json"])).ok()?;
        listed.as_array()?.iter().any(|o| o["name"] == "late" && o["namespace"] == late_ns.as_str()).then_some(())
    })
    .await;
    assert!(workspaces(&system).iter().all(|w| w["name"] != "late"), "not a workspace until adopted");
    assert_eq!(get_field(env, &late_ns, "deployment/late", "{.spec.replicas}").as_deref(), Some("1"), "never deleted");
    system.cli(&["adopt", &format!("{late_ns}/late"), "--image", IMAGE]);
    let matched = eventually("late adopted and matching", LONG, || {
        all_match_the_cluster(env, &system).filter(|m| m.len() == 4 && m.iter().all(|w| w.ends_with("Running")))
    })
    .await;
    assert_eq!(matched, ["gone Running", "kept Running", "late Running", "paused Running"]);
    let which = if database.starts_with("sqlite:") { "SQLite" } else { "PostgreSQL" };
    record(&format!("control plane restored from a backup ({which})"), converged, 0, orphans(env, &late_ns));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sqlite_backup_restored_is_repaired_by_the_full_resync() {
    restored_from_a_backup(None, "br").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgresql_backup_restored_is_repaired_by_the_full_resync() {
    let database = crate::support::postgres::fresh_database("backup_restore").await;
    restored_from_a_backup(Some(database), "bp").await;
}
