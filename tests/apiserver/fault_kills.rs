//! The fault suite's process faults: `kill -9` at chosen points (failpoints, in debug builds:
//! `--failpoint`, see `runtime::failpoint`), the control plane's SQLite locked by another
//! process (its restore from a backup is `backup_restore`). Rows of the same table as
//! `fault_suite`.

use crate::fault_suite::{Scenario, errors_lost, orphans, record, script};
use crate::support::stub::Script;
use crate::support::system::System;
use crate::support::*;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(90);

/// Start with the failpoint armed, wait until it stops the agent, restart without it.
async fn killed_at(failpoint: &str, script: impl FnOnce(&str, &[&str]) -> Script) -> Scenario {
    let mut scenario = Scenario::start_with("fk", script, &["--failpoint", failpoint], |_| {}).await;
    eventually("the failpoint to stop the agent", LONG, || (!scenario.agent.is_running()).then_some(())).await;
    assert!(scenario.agent.logs().contains("failpoint hit"), "{}", scenario.agent.logs());
    scenario.agent.restart_without("--failpoint");
    scenario
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_between_the_inventory_write_and_the_member_applies() {
    let scenario = killed_at("after-inventory-write", script).await;
    let cleared = Instant::now();
    scenario.wait_for_config_maps(&["cfg"], &[]).await;
    scenario.finish("kill -9 between the inventory write and the members", cleared).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_between_the_answer_and_the_status_write() {
    let scenario = killed_at("after-answer", script).await;
    let cleared = Instant::now();
    scenario.wait_for_config_maps(&["cfg"], &[]).await;
    scenario.finish("kill -9 between the answer and the status write", cleared).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_killed_mid_cycle_is_replaced_by_its_standby() {
    let mut scenario = Scenario::start_with("fh", script, &["--failpoint", "after-inventory-write"], |_| {}).await;
    eventually("the first to lead", LONG, || scenario.agent.logs().contains("became the leader").then_some(())).await;
    // A standby with the same id, reaching the apiserver directly; it leads once the Lease lapses.
    let standby = AgentProcess::start(scenario.env, &scenario.id, &scenario.stub.url, &[]).keep_cluster_state();
    eventually("the leader to die mid-cycle", LONG, || (!scenario.agent.is_running()).then_some(())).await;
    let cleared = Instant::now();
    scenario.wait_for_config_maps(&["cfg"], &[]).await;
    assert!(standby.logs().contains("became the leader"), "{}", standby.logs());
    scenario.finish("leader killed mid-cycle; the standby takes over", cleared).await;
}

/// A broken config next to the good one: its error is being written when the agent dies.
fn with_broken(ns: &str, members: &[&str]) -> Script {
    let mut script = script(ns, members);
    let broken = format!("{ns}-broken");
    script.configs.insert((broken.clone(), "ws".into()), "kind: [broken".into());
    script.always_return.push((broken, "ws".into()));
    script
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_a_status_write() {
    let scenario = killed_at("before-status-write", with_broken).await;
    let cleared = Instant::now();
    scenario.wait_for_config_maps(&["cfg"], &[]).await;
    let broken = format!("{}-broken", scenario.ns);
    scenario
        .stub
        .wait_for("the broken config's error, after the restart", 0, LONG, |r| {
            r.request.workspace_agent_infos.iter().any(|i| i.namespace == broken && i.error_details.is_some())
        })
        .await;
    let lost = errors_lost(&scenario.agent, &scenario.stub, &broken).await;
    record("kill -9 during a status write", cleared.elapsed(), lost, orphans(scenario.env, &scenario.ns));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_control_plane_database_locked_by_another_process() {
    let env = env();
    let (system, _proxy) = System::start_behind_proxy("fq", None).await;
    system.cli(&["create", "dave", "--image", "registry.example.com/ide:1"]);
    system.wait_actual("dave", "Running").await;
    // A Stop, then another process holds SQLite's write lock for longer than the writer waits
    // (5 s): the reconcile that would deliver the Stop cannot commit until it is released.
    system.cli(&["stop", "dave"]);
    let path = system.database.strip_prefix("sqlite://").expect("a SQLite URL").to_string();
    let locker = std::process::Command::new("python3")
        .args(["-c", "import sqlite3,sys,time; c=sqlite3.connect(sys.argv[1], isolation_level=None); c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(8); c.execute('COMMIT')", &path])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let output = locker.wait_with_output().expect("the locker ends");
    assert!(String::from_utf8_lossy(&output.stdout).contains("locked"));
    let cleared = Instant::now();
    let stopped = system.wait_actual("dave", "Stopped").await;
    let ns = stopped["namespace"].as_str().expect("namespace").to_string();
    let id = system.id.clone();
    eventually("Synced=True", LONG, || (condition(&wss_json(env, &id)?, "Synced")?["status"] == "True").then_some(()))
        .await;
    record("control plane's SQLite locked 8 s", cleared.elapsed(), 0, orphans(env, &ns));
}
