//! The fault suite's control-plane rows: the real agent and the real control plane (SQLite
//! or PostgreSQL) with a fault proxy between them, or the control plane stopped. Each row
//! issues a Stop and starts an apply that fails as the fault begins; after the fault the Stop
//! lands within two partial intervals and the error reaches the control plane.

use crate::fault_suite::{orphans, record};
use crate::support::fault_proxy::Fault;
use crate::support::system::System;
use crate::support::*;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(90);

/// Commit, then the answer is lost: the control plane has stamped the Stop as delivered.
async fn answer_lost_after_commit(database: Option<String>, name: &str) {
    let fault = Disruption::Proxy(Fault::DelayAnswer(Duration::from_secs(4)), 1);
    control_plane_fault(database, fault, name, Some(true)).await;
}

/// What happens to the control plane.
enum Disruption {
    /// A fault on the next reconciles, through the proxy.
    Proxy(Fault, usize),
    /// The process is stopped for this long: connections are refused.
    Down(Duration),
    /// SQLite's writer thread dies (a failpoint) until the process is restarted.
    WriterDies,
}

/// Whether `name`'s error reached the control plane: 0 when it did, 1 when it was lost.
async fn error_lost(system: &System, name: &str) -> usize {
    let deadline = Instant::now() + LONG;
    while Instant::now() < deadline {
        if !system.workspace(name)["error"].is_null() {
            return 0;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    1
}

/// A Stop issued, then the control plane disrupted: the Stop still lands within two partial
/// intervals after the disruption ends, and an apply error the agent recorded as it began
/// still reaches the control plane. `full`: whether the agent must count the answer as lost.
async fn control_plane_fault(database: Option<String>, disruption: Disruption, name: &str, full: Option<bool>) {
    let env = env();
    let (mut system, proxy) = System::start_behind_proxy("fc", database).await;
    system.cli(&["create", "carol", "--image", "registry.example.com/ide:1"]);
    let running = system.wait_actual("carol", "Running").await;
    let ns = running["namespace"].as_str().expect("namespace").to_string();
    // A quantity only the apiserver checks: dave's apply fails as the disruption begins.
    system.cli(&["create", "dave", "--image", "registry.example.com/ide:1", "--cpu", "100q"]);
    if let Disruption::Proxy(fault, times) = &disruption {
        proxy.arm(Some("POST"), "/reconcile", fault.clone(), *times);
    }
    system.cli(&["stop", "carol"]);
    match disruption {
        Disruption::Proxy(..) => eventually("the faults to fire", LONG, || proxy.spent().then_some(())).await,
        Disruption::Down(down) => system.control_plane.restart_after(|| std::thread::sleep(down)),
        Disruption::WriterDies => writer_dies(&mut system).await,
    }
    let cleared = Instant::now();
    eventually("the Stop applied", LONG, || {
        (get_field(env, &ns, "deployment/carol", "{.spec.replicas}").as_deref() == Some("0")).then_some(())
    })
    .await;
    let converged = cleared.elapsed();
    // Two partial intervals (1 s each here) and the full cycle the lost answer forces; without
    // it the Stop would wait for the periodic full cycle (60 s here, an hour by default).
    assert!(converged < Duration::from_secs(15), "the Stop took {converged:?}");
    let logs = system.agent.logs();
    if let Some(full) = full {
        assert_eq!(logs.contains("the next cycle is full"), full, "{logs}");
    }
    let lost = error_lost(&system, "dave").await;
    record(name, converged, lost, orphans(env, &ns));
}

/// What an operator and the agent see while the writer is dead, until a restart (what the
/// chart's liveness probe on /livez does) brings it back.
async fn writer_dies(system: &mut System) {
    system.control_plane.restart_with(&["--failpoint", "sqlite-writer-dies"]);
    let (_, body) = eventually("/healthz to turn 503", LONG, || {
        let health = system.control_plane.health();
        (health.0 == 503).then_some(health)
    })
    .await;
    assert!(body.contains("writer thread has stopped"), "{body}");
    let live = std::process::Command::new("curl")
        .args(["-s", "-w", " %{http_code}", &format!("{}/livez", system.control_plane.url)])
        .output()
        .expect("curl");
    let live = String::from_utf8_lossy(&live.stdout).to_string();
    assert!(live.ends_with(" 503") && live.contains("writer thread has stopped"), "not alive: {live}");
    let id = system.id.clone();
    let synced = eventually("the agent's Synced=False", LONG, || {
        let wss = wss_json(env(), &id)?;
        let synced = condition(&wss, "Synced")?.clone();
        (synced["status"] == "False").then_some(synced)
    })
    .await;
    assert!(synced["message"].as_str().is_some_and(|m| m.contains("503")), "{synced}");
    system.control_plane.restart_without("--failpoint");
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_sqlite_writer_dies() {
    control_plane_fault(None, Disruption::WriterDies, "control plane's SQLite writer dies", None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_500_three_times() {
    let fault = Disruption::Proxy(Fault::Status(500), 3);
    control_plane_fault(None, fault, "control plane 500 ×3", Some(false)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_answer_cut_mid_body() {
    let fault = Disruption::Proxy(Fault::ResetMidBody, 2);
    control_plane_fault(None, fault, "control plane answer truncated ×2", Some(true)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_garbage() {
    let fault = Disruption::Proxy(Fault::Garbage, 2);
    control_plane_fault(None, fault, "control plane answers garbage ×2", Some(true)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_hangs() {
    // Past the agent's --request-timeout (2 s here), never reaching the control plane.
    let fault = Disruption::Proxy(Fault::Hang(Duration::from_secs(5)), 1);
    control_plane_fault(None, fault, "control plane hangs past the timeout", Some(true)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_down() {
    control_plane_fault(None, Disruption::Down(Duration::from_secs(4)), "control plane down 4 s", None).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_answer_lost_after_commit_sqlite() {
    answer_lost_after_commit(None, "control plane answer lost after commit (SQLite)").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_answer_lost_after_commit_postgres() {
    let _exclusive = crate::support::postgres::EXCLUSIVE.lock().await;
    let database = crate::support::postgres::fresh_database("fault_suite").await;
    answer_lost_after_commit(Some(database), "control plane answer lost after commit (PostgreSQL)").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgresql_restart_loses_no_stop() {
    let _exclusive = crate::support::postgres::EXCLUSIVE.lock().await;
    let env = env();
    let database = crate::support::postgres::fresh_database("fault_restart").await;
    let (system, _proxy) = System::start_behind_proxy("fr", Some(database)).await;
    system.cli(&["create", "frank", "--image", "registry.example.com/ide:1"]);
    let running = system.wait_actual("frank", "Running").await;
    let ns = running["namespace"].as_str().expect("namespace").to_string();
    crate::support::postgres::restart();
    let back = Instant::now();
    // The control plane's pool reconnects; the first call after the restart may fail once.
    eventually("the Stop accepted", LONG, || {
        let out = system.control_plane.try_cli(&["workspaces", "--agent", &system.id, "stop", "frank"]);
        out.status.success().then_some(())
    })
    .await;
    eventually("the Stop applied", LONG, || {
        (get_field(env, &ns, "deployment/frank", "{.spec.replicas}").as_deref() == Some("0")).then_some(())
    })
    .await;
    record("PostgreSQL restarted", back.elapsed(), 0, orphans(env, &ns));
}
