//! The fault suite (issue #18): the real agent behind a fault-injecting proxy in front of the
//! real apiserver, or in front of the real control plane. After each fault clears it measures
//! how long the workspace took to converge, how many errors the agent recorded that never
//! reached the control plane (must be 0), and how many objects are outside their inventory
//! (must be 0). The last scenario to finish prints the table:
//! `fault | converged in | pending errors lost | orphaned objects`.

use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::stub::{Script, StubControlPlane};
use crate::support::system::System;
use crate::support::*;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wsync::protocol::inventory::{INVENTORY_ID_LABEL, OWNING_INVENTORY_ANNOTATION};

const LONG: Duration = Duration::from_secs(90);
const SCENARIOS: usize = 25;
static ROWS: Mutex<Vec<(String, Duration, usize, usize)>> = Mutex::new(Vec::new());

/// Record a scenario's row; the last one prints the table past the harness's capture.
pub fn record(fault: &str, converged: Duration, lost: usize, orphans: usize) {
    assert_eq!(lost, 0, "{fault}: pending errors lost");
    assert_eq!(orphans, 0, "{fault}: orphaned objects");
    let mut rows = ROWS.lock().unwrap();
    rows.push((fault.to_string(), converged, lost, orphans));
    if rows.len() == SCENARIOS {
        let mut table =
            String::from("\nfault | converged in | pending errors lost | orphaned objects\n--- | --- | --- | ---\n");
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        for (fault, converged, lost, orphans) in rows.iter() {
            table += &format!("{fault} | {:.1} s | {lost} | {orphans}\n", converged.as_secs_f64());
        }
        let _ = std::io::stderr().write_all(table.as_bytes());
    }
}

/// Objects in `namespace` annotated as an inventory's member but missing from every labelled
/// inventory's data, by their exact member key (`namespace_name_group_Kind`).
pub fn orphans(env: &TestEnv, namespace: &str) -> usize {
    let inventories = kubectl_ok(
        env,
        &["-n", namespace, "get", "configmaps", "-l", INVENTORY_ID_LABEL, "-o", "jsonpath={.items[*].data}"],
    );
    let annotation = OWNING_INVENTORY_ANNOTATION.replace('.', "\\.").replace('/', "\\/");
    let jsonpath = format!(
        "jsonpath={{range .items[*]}}{{.kind}} {{.metadata.name}} {{.metadata.annotations.{annotation}}}{{\"\\n\"}}{{end}}"
    );
    let kinds = "configmaps,deployments,services,pvc,serviceaccounts,secrets";
    let members = kubectl_ok(env, &["-n", namespace, "get", kinds, "-o", &jsonpath]);
    members
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            Some((fields.next()?, fields.next()?, fields.next().unwrap_or_default()))
        })
        .filter(|(_, _, owner)| !owner.trim().is_empty())
        .filter(|(kind, name, _)| {
            let group = if *kind == "Deployment" { "apps" } else { "" };
            !inventories.contains(&format!("{namespace}_{name}_{group}_{kind}"))
        })
        .count()
}

/// Errors the agent logged for a workspace that the control plane never heard of, unless a
/// later apply of it succeeded (then the error no longer holds). An error recorded just now
/// gets the few seconds its report or its retry takes (two partial intervals and a backoff).
pub async fn errors_lost(agent: &AgentProcess, stub: &StubControlPlane, namespace: &str) -> usize {
    let settled = || {
        let logs = agent.logs();
        let failed = logs.lines().any(|l| l.contains("apply failed") && l.contains(namespace));
        let reported = stub.requests().iter().any(|r| {
            r.request.workspace_agent_infos.iter().any(|i| i.namespace == namespace && i.error_details.is_some())
        });
        let recovered = logs.lines().any(|l| l.contains("retried a failed apply") && l.contains("success"));
        !failed || reported || recovered
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    while !settled() {
        if Instant::now() > deadline {
            return 1;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    0
}

/// A workspace synced by an agent that reaches the apiserver through a fault proxy.
pub struct Scenario {
    pub env: &'static TestEnv,
    pub id: String,
    pub ns: String,
    pub stub: StubControlPlane,
    pub proxy: FaultProxy,
    pub agent: AgentProcess,
    _dir: tempfile::TempDir,
}

pub fn script(ns: &str, members: &[&str]) -> Script {
    let mut script = Script::with_intervals(300, 1);
    let members: Vec<String> = members.iter().map(|m| config_map(ns, m)).collect();
    script.configs.insert((ns.to_string(), "ws".into()), inventory_config(ns, "inv", &members));
    script.always_return.push((ns.to_string(), "ws".into()));
    script
}

impl Scenario {
    async fn start(prefix: &str, arm_first: impl FnOnce(&FaultProxy)) -> Self {
        let scenario = Self::start_with(prefix, script, &[], arm_first).await;
        scenario.wait_for_config_maps(&["cfg"], &[]).await;
        scenario
    }

    /// Not waiting for anything: `flags` may arm a failpoint that stops the agent first.
    pub async fn start_with(
        prefix: &str,
        script: impl FnOnce(&str, &[&str]) -> Script,
        flags: &[&str],
        arm_first: impl FnOnce(&FaultProxy),
    ) -> Self {
        let env = env();
        let id = unique_id(prefix);
        let ns = format!("{id}-1");
        create_workspace(&admin_client(env).await, &ns, "ws", Some(&id)).await;
        let stub = StubControlPlane::start(script(&ns, &["cfg"])).await;
        let (upstream, ca) = apiserver_upstream(env);
        let proxy = FaultProxy::start(&upstream, Some(&ca)).await;
        arm_first(&proxy);
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = proxied_kubeconfig(env, &proxy.url, dir.path());
        let agent = AgentProcess::start_as(kubeconfig, &id, &stub.url, crate::support::stub::STUB_TOKEN, flags);
        Self { env, id, ns, stub, proxy, agent, _dir: dir }
    }

    pub async fn wait_for_config_maps(&self, present: &[&str], absent: &[&str]) {
        let env = self.env;
        let exists = |name: &str| kubectl(env, &["-n", &self.ns, "get", "configmap", name]).status.success();
        eventually("the config to converge", LONG, || {
            (present.iter().all(|n| exists(n)) && absent.iter().all(|n| !exists(n))).then_some(())
        })
        .await;
    }

    /// Wait until every armed fault fired; returns when they had.
    async fn faults_spent(&self) -> Instant {
        eventually("the faults to fire", LONG, || self.proxy.spent().then_some(())).await;
        Instant::now()
    }

    pub async fn finish(&self, fault: &str, cleared: Instant) {
        let converged = cleared.elapsed();
        let lost = errors_lost(&self.agent, &self.stub, &self.ns).await;
        record(fault, converged, lost, orphans(self.env, &self.ns));
    }
}

async fn faulty_apply(fault: Fault, name: &str) {
    let scenario = Scenario::start("fs", |_| {}).await;
    scenario.proxy.arm(Some("PATCH"), "/configmaps/cfg2", fault, 3);
    scenario.stub.set_script(script(&scenario.ns, &["cfg", "cfg2"]));
    let cleared = scenario.faults_spent().await;
    scenario.wait_for_config_maps(&["cfg", "cfg2"], &[]).await;
    scenario.finish(name, cleared).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_429_on_patch() {
    faulty_apply(Fault::Status(429), "apiserver 429 on PATCH ×3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_500_on_patch() {
    faulty_apply(Fault::Status(500), "apiserver 500 on PATCH ×3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_reset_on_patch() {
    faulty_apply(Fault::ResetMidBody, "apiserver reset on PATCH ×3").await;
}

/// `times` DELETEs of a pruned member fail. A reset comes after the apiserver deleted it, so
/// the retry finds it gone and sends no second DELETE.
async fn faulty_prune(fault: Fault, times: usize, name: &str) {
    let scenario = Scenario::start("fp", |_| {}).await;
    scenario.proxy.arm(Some("DELETE"), "/configmaps/cfg", fault, times);
    scenario.stub.set_script(script(&scenario.ns, &["cfg2"]));
    let cleared = scenario.faults_spent().await;
    scenario.wait_for_config_maps(&["cfg2"], &["cfg"]).await;
    scenario.finish(name, cleared).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_500_on_delete_during_prune() {
    faulty_prune(Fault::Status(500), 2, "apiserver 500 on DELETE (prune) ×2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_429_on_delete_during_prune() {
    faulty_prune(Fault::Status(429), 2, "apiserver 429 on DELETE (prune) ×2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_reset_on_delete_during_prune() {
    faulty_prune(Fault::ResetMidBody, 1, "apiserver reset on DELETE (prune) after the delete").await;
}

/// A requested full cycle whose paged LIST of Deployments fails first.
async fn faulty_list(fault: Fault, name: &str) {
    let scenario = Scenario::start("fl", |_| {}).await;
    scenario.proxy.arm(Some("GET"), "/deployments?", fault, 2);
    let env = scenario.env;
    kubectl_ok(
        env,
        &["-n", AGENT_NAMESPACE, "annotate", "wss", &scenario.id, "wsync.dev/resync-requested=after-list-fault"],
    );
    let cleared = scenario.faults_spent().await;
    eventually("the requested full cycle done", LONG, || {
        let wss = wss_json(env, &scenario.id)?;
        (wss["status"]["lastHandledResyncRequest"] == "after-list-fault").then_some(())
    })
    .await;
    scenario.finish(name, cleared).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_500_on_list_in_a_full_cycle() {
    faulty_list(Fault::Status(500), "apiserver 500 on LIST ×2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_429_on_list_in_a_full_cycle() {
    faulty_list(Fault::Status(429), "apiserver 429 on LIST ×2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_reset_on_list_in_a_full_cycle() {
    faulty_list(Fault::ResetMidBody, "apiserver reset on LIST ×2").await;
}

/// The agent's watches fail as they start; a change made after still reaches the control
/// plane promptly.
async fn faulty_watch(fault: Fault, name: &str) {
    let scenario = Scenario::start("fw", |proxy| proxy.arm(Some("GET"), "watch=true", fault, 3)).await;
    let cleared = scenario.faults_spent().await;
    // A change after the watches were cut still reaches the control plane promptly.
    let env = scenario.env;
    kubectl_ok(env, &["-n", &scenario.ns, "scale", "deployment", "ws", "--replicas=2"]);
    let rv: u64 = get_field(env, &scenario.ns, "deployment/ws", "{.metadata.resourceVersion}")
        .and_then(|v| v.parse().ok())
        .expect("rv");
    scenario
        .stub
        .wait_for("the change after the resets", 0, LONG, |r| {
            r.request.workspace_agent_infos.iter().any(|i| {
                i.namespace == scenario.ns
                    && i.latest_k8s_deployment_info
                        .as_ref()
                        .and_then(|d| d.resource_version()?.parse::<u64>().ok())
                        .is_some_and(|v| v >= rv)
            })
        })
        .await;
    scenario.finish(name, cleared).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_watch_reset_mid_body() {
    faulty_watch(Fault::ResetMidBody, "apiserver watch reset mid-body ×3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn apiserver_429_on_watch() {
    faulty_watch(Fault::Status(429), "apiserver 429 on WATCH ×3").await;
}

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
