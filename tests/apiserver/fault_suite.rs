//! The fault suite (issue #18): the real agent behind a fault-injecting proxy in front of the
//! real apiserver, or in front of the real control plane. After each fault clears it measures
//! how long the workspace took to converge, how many errors the agent recorded that never
//! reached the control plane (must be 0), and how many objects are outside their inventory
//! (must be 0). The last scenario to finish prints the table:
//! `fault | converged in | pending errors lost | orphaned objects`.

use crate::support::fault_proxy::{Fault, FaultProxy};
use crate::support::stub::{Script, StubControlPlane};
use crate::support::*;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wsync::protocol::inventory::{INVENTORY_ID_LABEL, OWNING_INVENTORY_ANNOTATION};

const LONG: Duration = Duration::from_secs(90);
const SCENARIOS: usize = 26;
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
