//! The agent's figures at one N: full resync against its floor, the idle partial cycle,
//! memory, latencies, and the WorkspaceSyncStatus size.
//!
//! Longer than 400 lines: one measurement procedure (BENCHMARKS.md, "What it does"), read top
//! to bottom; its parts share the agent under test, the workload and the floor.

use crate::support::stub::{Reply, STUB_TOKEN, StubControlPlane};
use crate::support::{self, AGENT_NAMESPACE, AgentProcess, LABEL_KEY};
use crate::workload::{self, CONCURRENCY};
use crate::{Options, Table, percentile};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wsync::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;
use wsync::agent::policy::plan::with_members;
use wsync::agent::policy::plan::{ApplyPolicy, plan};
use wsync::protocol::{
    ActualState, DeploymentInfo, DesiredState, ReconcileRequest, ReconcileResponse, Settings, UpdateType,
    WorkspaceAgentInfo, WorkspaceRailsInfo,
};

const PARTIAL_SECONDS: u64 = 1;

pub struct Row {
    pub n: usize,
    pub full_ms: f64,
    pub full_uncached_ms: f64,
    pub floor_ms: f64,
    /// The agent's PATCHes to workspace objects in its cached full resyncs (the most in one).
    pub full_patches: usize,
    /// Objects edited by hand before one more full resync, and that resync's PATCHes.
    pub drifted: usize,
    pub drift_patches: usize,
    /// Writes by the agent in the idle window, Lease renewals and the heartbeat apart.
    pub idle_writes: usize,
    /// Writes of the `lastPartialSyncTime` heartbeat alone (DESIGN §2: at most once a minute).
    pub idle_heartbeats: usize,
    pub idle_max_infos: usize,
    pub idle_max_body: usize,
    pub idle_cpu_ms_per_cycle: f64,
    pub rss_bytes_per_workspace: f64,
    /// The same for the heap in use after the last trim, where the agent logs it (glibc).
    pub heap_bytes_per_workspace: Option<f64>,
    pub report_p50: f64,
    pub report_p99: f64,
    pub apply_p50: f64,
    pub apply_p99: f64,
    pub wss_bytes: usize,
}

/// A control plane that answers every reported workspace with its config, and also returns
/// the workspaces whose desired state the benchmark just changed, as the real one would.
#[derive(Clone, Default)]
struct Desired {
    configs: Arc<Mutex<HashMap<(String, String), String>>>,
    changed: Arc<Mutex<HashSet<(String, String)>>>,
}

impl Desired {
    fn respond(&self, request: &ReconcileRequest) -> ReconcileResponse {
        let configs = self.configs.lock().expect("configs");
        let mut returned: Vec<(String, String, Option<String>)> = request
            .workspace_agent_infos
            .iter()
            .map(|i| {
                let rv = i.latest_k8s_deployment_info.as_ref().and_then(|d| d.resource_version());
                (i.namespace.clone(), i.name.clone(), rv)
            })
            .collect();
        for (ns, name) in self.changed.lock().expect("changed").drain() {
            returned.push((ns, name, None));
        }
        let infos = returned
            .into_iter()
            .map(|(namespace, name, rv)| WorkspaceRailsInfo {
                config_to_apply: configs.get(&(namespace.clone(), name.clone())).cloned().unwrap_or_default(),
                name,
                namespace,
                desired_state: DesiredState::Running,
                actual_state: ActualState::Running,
                deployment_resource_version: rv,
                image_pull_secrets: vec![],
            })
            .collect();
        let settings = Settings {
            full_reconciliation_interval_seconds: 3600,
            partial_reconciliation_interval_seconds: PARTIAL_SECONDS,
        };
        ReconcileResponse { workspace_rails_infos: infos, settings: Some(settings) }
    }
}

fn proc_field(pid: u32, file: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/{file}")).unwrap_or_default()
}

pub fn rss_bytes(pid: u32) -> u64 {
    let status = proc_field(pid, "status");
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|k| k.parse::<u64>().ok()).unwrap_or(0) * 1024
}

/// User + system CPU time of a process.
fn cpu_time(pid: u32) -> Duration {
    let stat = proc_field(pid, "stat");
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks: u64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<u64>().ok()).sum();
    Duration::from_millis(ticks * 10) // USER_HZ is 100 on Linux
}

/// One HTTP client, and so one kept-alive connection, for the whole run. `reqwest::get` builds
/// a client and connects anew per call: polled every 5 ms while only the agent is timed, that
/// loaded the two cores the apiserver runs on, and the apiserver served the agent's PATCHes a
/// third slower than the floor's identical ones (BENCHMARKS.md, step 10).
pub fn http() -> &'static reqwest::Client {
    static CLIENT: std::sync::LazyLock<reqwest::Client> = std::sync::LazyLock::new(reqwest::Client::new);
    &CLIENT
}

pub async fn metric(port: u16, name: &str) -> f64 {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let Ok(response) = http().get(&url).send().await else { return 0.0 };
    let text = response.text().await.unwrap_or_default();
    text.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
}

pub async fn wait_for_metric(port: u16, name: &str, at_least: f64, timeout: Duration) -> Instant {
    let deadline = Instant::now() + timeout;
    loop {
        if metric(port, name).await >= at_least {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "timed out waiting for {name} ≥ {at_least}");
        // Short: the agent's clock stops at this poll, the floor's in-process.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub const APPLIED: &str = "wsync_applies_total{result=\"success\"}";

/// Whether the status changed in its `lastPartialSyncTime` heartbeat and nothing else: then
/// the one status write in the window was the heartbeat, which DESIGN §2 asks for at most once
/// a minute, and which a 10 s window catches now and then.
fn heartbeat_only(before: Option<&serde_json::Value>, after: Option<&serde_json::Value>) -> bool {
    const HEARTBEAT: &str = "lastPartialSyncTime";
    let (Some(before), Some(after)) = (before, after) else { return false };
    let without = |status: &serde_json::Value| {
        let mut status = status.clone();
        status.as_object_mut().map(|fields| fields.remove(HEARTBEAT));
        status
    };
    before[HEARTBEAT] != after[HEARTBEAT] && without(before) == without(after)
}

/// What an agent with no workspaces holds after its first cycles.
#[derive(Clone, Copy)]
pub struct Baseline {
    pub rss: u64,
    pub heap: Option<u64>,
}

/// The heap in use the agent last logged after trimming (`src/allocator.rs`).
fn heap_in_use(agent: &AgentProcess) -> Option<u64> {
    let logs = agent.logs();
    let line = logs.lines().rev().find(|l| l.contains("heap_in_use_bytes="))?;
    line.split("heap_in_use_bytes=").nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// An agent logging at info (and its memory at debug): the tests' debug level would cost CPU
/// the figures should not show.
pub async fn start_agent(id: &str, url: &str, token: &str, port: u16, apply_cache: bool) -> AgentProcess {
    let address = format!("127.0.0.1:{port}");
    let cache = format!("--apply-cache={apply_cache}");
    let args = ["--metrics-address", address.as_str(), "--request-timeout", "120s", cache.as_str()];
    let agent = AgentProcess::start_with_token(support::env(), id, url, token, &args).keep_cluster_state();
    let level = format!("http://127.0.0.1:{}/loglevel", agent.admin_port);
    let deadline = Instant::now() + Duration::from_secs(30);
    while http().put(&level).body("info,wsync::allocator=debug").send().await.map_or(true, |r| !r.status().is_success())
    {
        assert!(Instant::now() < deadline, "the agent's admin endpoint never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent
}

/// The RSS and heap of an agent with no workspaces, after its first cycles.
pub async fn baseline() -> Baseline {
    let stub = StubControlPlane::start(Default::default()).await;
    let id = support::unique_id("bench-base");
    let agent = start_agent(&id, &stub.url, STUB_TOKEN, support::free_port(), true).await;
    stub.wait_for("the first cycle", 0, Duration::from_secs(60), |_| true).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let baseline = Baseline { rss: rss_bytes(agent.pid().expect("pid")), heap: heap_in_use(&agent) };
    drop(agent);
    let _ = support::kubectl(support::env(), &["-n", AGENT_NAMESPACE, "delete", "wss", &id, "--ignore-not-found"]);
    baseline
}

fn annotate_resync(id: &str, value: &str) {
    let wss = format!("wss/{id}");
    let annotation = format!("wsync.dev/resync-requested={value}");
    support::kubectl_ok(support::env(), &["-n", AGENT_NAMESPACE, "annotate", &wss, &annotation, "--overwrite"]);
}

/// The workspaces a timed full resync covers, and the control plane they are reported to.
pub struct Target<'a> {
    /// The agent's id: its label's value on every workspace.
    pub id: &'a str,
    pub n: usize,
    pub url: &'a str,
    pub token: &'a str,
}

/// What the same client does with no agent logic: one LIST, one control-plane round trip,
/// and a server-side apply of every object of every config, with the agent's concurrency.
async fn floor(client: &Client, target: &Target<'_>) -> Duration {
    let started = Instant::now();
    let api: Api<Deployment> = Api::all(client.clone());
    let mut params = ListParams::default().labels(&format!("{LABEL_KEY}={}", target.id)).limit(500);
    let mut infos = Vec::new();
    loop {
        let page = api.list(&params).await.expect("list");
        for mut d in page.items {
            d.metadata.managed_fields = None;
            infos.push(WorkspaceAgentInfo {
                name: d.metadata.name.clone().unwrap_or_default(),
                namespace: d.metadata.namespace.clone().unwrap_or_default(),
                latest_k8s_deployment_info: Some(DeploymentInfo::of(&d).expect("json")),
                ..Default::default()
            });
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let request = ReconcileRequest { update_type: UpdateType::Full, workspace_agent_infos: infos };
    let response: ReconcileResponse = http()
        .post(format!("{}{}", target.url, wsync::protocol::RECONCILE_PATH))
        .bearer_auth(target.token)
        .json(&request)
        .send()
        .await
        .expect("post")
        .json()
        .await
        .expect("answer");
    let objects: Vec<serde_json::Value> = response
        .workspace_rails_infos
        .iter()
        .flat_map(|info| {
            as_applied(&info.namespace, wsync::yaml::parse_objects(&info.config_to_apply).expect("config"))
        })
        .collect();
    futures::stream::iter(&objects)
        .for_each_concurrent(CONCURRENCY, |object| async move {
            workload::apply(client, object).await.expect("apply");
        })
        .await;
    started.elapsed()
}

/// A config's objects as the agent writes them: grouped by the agent's own `plan`, each
/// inventory carrying one key per member (`applier::with_members`). The real control plane
/// sends inventories without them; applied as sent, with the agent's field manager, the
/// floor's apply would be a real write that empties the agent's inventory, and the agent's
/// next apply one that fills it.
fn as_applied(namespace: &str, objects: Vec<DynamicObject>) -> Vec<serde_json::Value> {
    let policy = ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), AGENT_NAMESPACE);
    let inventories = plan(objects, namespace, &policy, |_| true).expect("a config the agent accepts");
    inventories
        .into_iter()
        .flat_map(|inventory| {
            let written = with_members(&inventory.inventory, &inventory.member_refs());
            std::iter::once(written).chain(inventory.members.into_iter().map(|(_, object)| object))
        })
        .map(|object| serde_json::to_value(object).expect("json"))
        .collect()
}

/// When the latest full cycle began, from the agent's own gauge. The clock starts when the
/// cycle begins, not when the request for it was made, so the leading-edge gap between cycles
/// is not counted.
async fn full_cycle_start(port: u16) -> jiff::Timestamp {
    let seconds = metric(port, FULL_CYCLE_STARTED).await;
    jiff::Timestamp::from_millisecond((seconds * 1000.0) as i64).expect("a start time")
}

pub const FULL_CYCLE_STARTED: &str = "wsync_sync_cycle_last_start_timestamp_seconds{update_type=\"full\"}";

/// An agent under measurement: its metrics port, and a label for the progress lines.
pub struct Measured<'a> {
    pub port: u16,
    pub label: &'a str,
}

/// Wait for the agent's first full cycle, then time `runs` requested full resyncs, each
/// paired with a floor run (`floors`).
pub async fn full_resyncs(
    measured: Measured<'_>,
    client: &Client,
    target: &Target<'_>,
    runs: usize,
    floors: &mut Vec<Duration>,
    patches: &mut Vec<usize>,
) -> Vec<Duration> {
    let Measured { port, label } = measured;
    let n = target.n;
    let long = Duration::from_secs(60 + n as u64 / 10);
    let started = Instant::now();
    wait_for_metric(port, APPLIED, n as f64, long).await;
    eprintln!("  {label}: first full cycle after start: {:.1?}", started.elapsed());
    let mut fulls = Vec::new();
    for run in 0..runs {
        // Which side goes first alternates, and each waits a random 2–3 s first. In a fixed
        // order at fixed pauses one side was slower for a whole run, and which one changed
        // from run to run, for the same requests (BENCHMARKS.md, step 11).
        let floor_first = run % 2 == 0;
        if floor_first {
            floors.push(timed_floor(client, target).await);
        }
        pause().await;
        let (took, patched) = requested_full_resync(port, target, &format!("{label}-{run}")).await;
        patches.push(patched);
        fulls.push(took);
        if !floor_first {
            floors.push(timed_floor(client, target).await);
        }
        let floor = floors.last().copied().unwrap_or_default();
        let order = if floor_first { "floor first" } else { "agent first" };
        let sent = patches.last().copied().unwrap_or_default();
        eprintln!("  {label} full resync {run}: agent {took:.0?} ({sent} PATCHes), floor {floor:.0?} ({order})");
    }
    fulls
}

/// Ask for a full resync and wait until it has applied all N: how long it took from the
/// cycle's start, and how many PATCHes it sent to workspace objects (the audit log's count).
pub async fn requested_full_resync(port: u16, target: &Target<'_>, request: &str) -> (Duration, usize) {
    let long = Duration::from_secs(60 + target.n as u64 / 10);
    let before = metric(port, APPLIED).await;
    let mark = support::audit_mark(support::env());
    annotate_resync(target.id, request);
    wait_for_metric(port, APPLIED, before + target.n as f64, long).await;
    // The clock stops before the audit log is read: the log grows through a run, and reading
    // it inside the window made the agent's time grow with it.
    let done = jiff::Timestamp::now();
    // Its own status and Lease are not workspace objects; a Lease renewal lands in a window
    // now and then.
    let patched = support::agent_writes(support::env(), mark, |e| {
        let resource = &e["objectRef"]["resource"];
        e["verb"] == "patch" && resource != "workspacesyncstatuses" && resource != "leases"
    });
    let started = full_cycle_start(port).await;
    (Duration::try_from(done.duration_since(started)).unwrap_or_default(), patched.len())
}

async fn timed_floor(client: &Client, target: &Target<'_>) -> Duration {
    pause().await;
    floor(client, target).await
}

/// 2–3 s, so that the cluster is quiet and the next run starts at a random phase.
async fn pause() {
    let mut byte = [0u8; 1];
    getrandom::fill(&mut byte).expect("random");
    tokio::time::sleep(Duration::from_millis(2000 + u64::from(byte[0]) * 1000 / 255)).await;
}

/// A resourceVersion as a number. They are etcd revisions here, so they compare, and any
/// version from a patch on counts as that patch.
pub fn version(rv: Option<&str>) -> u64 {
    rv.and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// A client as the agent's: the agent's kubeconfig, so the floor runs as the same user.
pub async fn agent_client() -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&support::env().agent_kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("agent kubeconfig");
    Client::try_from(config).expect("client")
}

pub async fn measure(n: usize, options: &Options, baseline: Baseline) -> Row {
    eprintln!("== N = {n}");
    let env = support::env();
    let admin = support::admin_client(env).await;
    let agent_client = agent_client().await;
    let workload = match workload::create(&admin, n).await {
        Ok(workload) => workload,
        Err(error) => {
            eprintln!("error: the apiserver refused the benchmark's workspaces: {error}");
            std::process::exit(1);
        }
    };
    let desired = Desired { configs: Arc::new(Mutex::new(workload.configs.clone())), ..Default::default() };
    let stub = StubControlPlane::start(Default::default()).await;
    let responder = desired.clone();
    stub.set_responder(move |request| Reply::created(&responder.respond(request)));
    let long = Duration::from_secs(60 + n as u64 / 10);
    let runs = options.runs_at(n);
    let mut floors = Vec::new();
    let target = Target { id: &workload.id, n, url: &stub.url, token: STUB_TOKEN };

    // 1a. Full resync without the apply cache (one GET per namespace and inventory), then
    // with it; each run alternates with the floor.
    let port = support::free_port();
    let uncached = start_agent(&workload.id, &stub.url, STUB_TOKEN, port, false).await;
    let measured = Measured { port, label: "uncached" };
    let fulls_uncached = full_resyncs(measured, &agent_client, &target, runs, &mut floors, &mut Vec::new()).await;
    // SIGTERM releases the Lease, so the successor needs no expiry.
    let mut uncached = uncached;
    uncached.terminate();
    let port = support::free_port();
    let agent = start_agent(&workload.id, &stub.url, STUB_TOKEN, port, true).await;
    let pid = agent.pid().expect("pid");
    let measured = Measured { port, label: "cached" };
    let mut patches = Vec::new();
    let fulls = full_resyncs(measured, &agent_client, &target, runs, &mut floors, &mut patches).await;

    // 1b. A full resync with 1% of the workspaces drifted: each one's inventory edited by hand.
    let drifted = workload::drift_inventories(&admin, &workload, n.div_ceil(100)).await;
    pause().await;
    let (_, drift_patches) = requested_full_resync(port, &target, "drifted").await;
    eprintln!("  full resync with {drifted} drifted objects: {drift_patches} PATCHes");

    // 2. Idle partial cycles.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let status_before = support::wss_json(env, &workload.id).map(|w| w["status"].clone());
    let mark = support::audit_mark(env);
    let seen = stub.count();
    let cpu_before = cpu_time(pid);
    tokio::time::sleep(Duration::from_secs(options.idle_seconds)).await;
    let cpu = cpu_time(pid) - cpu_before;
    let idle: Vec<_> = stub.requests().into_iter().skip(seen).collect();
    let writes = support::agent_writes(env, mark, |e| e["objectRef"]["resource"] != "leases");
    let status_after = support::wss_json(env, &workload.id).map(|w| w["status"].clone());
    let idle_heartbeats = if heartbeat_only(status_before.as_ref(), status_after.as_ref()) {
        writes.iter().filter(|w| w.contains("workspacesyncstatuses")).count().min(1)
    } else {
        0
    };
    let max_body = idle.iter().map(|r| serde_json::to_vec(&r.request).map_or(0, |b| b.len())).max().unwrap_or(0);
    let max_infos = idle.iter().map(|r| r.request.workspace_agent_infos.len()).max().unwrap_or(0);
    let idle_cpu_ms_per_cycle = cpu.as_secs_f64() * 1000.0 / idle.len().max(1) as f64;

    // 3. Memory.
    let rss = rss_bytes(pid);
    let rss_bytes_per_workspace = rss.saturating_sub(baseline.rss) as f64 / n as f64;
    let heap_bytes_per_workspace =
        baseline.heap.zip(heap_in_use(&agent)).map(|(base, heap)| heap.saturating_sub(base) as f64 / n as f64);

    // 4a. A Deployment change reaching the control plane.
    let deployments = |ns: &str| Api::<Deployment>::namespaced(admin.clone(), ns);
    let mut reported = Vec::new();
    for sample in 0..options.samples {
        let (ns, name) = &workload.keys[(sample * 7919) % n];
        let patch =
            serde_json::json!({ "metadata": { "annotations": { "bench.wsync.dev/sample": sample.to_string() } } });
        let seen = stub.count();
        let changed = deployments(ns).patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
        let changed_at = Instant::now();
        // The deployment controller may write the object again right after; any version from
        // the patch on counts.
        let patched = version(changed.metadata.resource_version.as_deref());
        let (_, request) = stub
            .wait_for("the change reported", seen, long, |r| {
                r.request.workspace_agent_infos.iter().any(|i| {
                    &i.name == name
                        && &i.namespace == ns
                        && i.latest_k8s_deployment_info
                            .as_ref()
                            .is_some_and(|d| version(d.resource_version().as_deref()) >= patched)
                })
            })
            .await;
        reported.push(request.received.saturating_duration_since(changed_at));
    }

    // 4b. A desired-state change applied in the cluster.
    let mut applied = Vec::new();
    for sample in 0..options.samples {
        let key = workload.keys[(sample * 104_729 + 1) % n].clone();
        let marker = format!("s{sample}");
        let config = workload::config(&key.0, &key.1, &workload.id, &marker);
        let changed_at = Instant::now();
        desired.configs.lock().expect("configs").insert(key.clone(), config);
        desired.changed.lock().expect("changed").insert(key.clone());
        let api = deployments(&key.0);
        loop {
            let current = api.get(&key.1).await.expect("get");
            let annotations = current.metadata.annotations.unwrap_or_default();
            if annotations.get("bench.wsync.dev/desired") == Some(&marker) {
                applied.push(changed_at.elapsed());
                break;
            }
            assert!(changed_at.elapsed() < long, "desired change {marker} never applied");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // 5. The WorkspaceSyncStatus.
    let wss_bytes = support::wss_json(env, &workload.id).map_or(0, |w| serde_json::to_vec(&w).map_or(0, |b| b.len()));
    drop(agent);
    workload::delete(&admin, &workload).await;
    let median = |samples: &[Duration]| percentile(samples, 50.0);
    Row {
        n,
        full_ms: median(&fulls),
        full_uncached_ms: median(&fulls_uncached),
        floor_ms: median(&floors),
        full_patches: patches.iter().copied().max().unwrap_or_default(),
        drifted,
        drift_patches,
        idle_writes: writes.len() - idle_heartbeats,
        idle_heartbeats,
        idle_max_infos: max_infos,
        idle_max_body: max_body,
        idle_cpu_ms_per_cycle,
        rss_bytes_per_workspace,
        heap_bytes_per_workspace,
        report_p50: percentile(&reported, 50.0),
        report_p99: percentile(&reported, 99.0),
        apply_p50: percentile(&applied, 50.0),
        apply_p99: percentile(&applied, 99.0),
        wss_bytes,
    }
}

pub fn print_table(rows: &[Row]) {
    let table = Table::start("figure", rows, |r| r.n);
    table.line("full resync, floor (ms)", "", |r: &Row| format!("{:.0}", r.floor_ms));
    table.line("full resync, agent before: GET per apply (ms)", "", |r: &Row| format!("{:.0}", r.full_uncached_ms));
    table.line("full resync, agent before ÷ floor", "", |r: &Row| format!("{:.2}", r.full_uncached_ms / r.floor_ms));
    table.line("full resync, agent with apply cache, drift-aware (ms)", "", |r: &Row| format!("{:.0}", r.full_ms));
    table.line("full resync, agent (drift-aware) ÷ floor", "≤ 0.2", |r: &Row| {
        format!("**{:.2}**", r.full_ms / r.floor_ms)
    });
    table.line("full resync without drift: PATCHes to workspace objects", "0", |r: &Row| r.full_patches.to_string());
    table.line("full resync, 1% drifted: objects edited by hand", "", |r: &Row| r.drifted.to_string());
    table.line("… PATCHes to workspace objects", "= drifted", |r: &Row| r.drift_patches.to_string());
    table.line("idle partial: apiserver writes", "0", |r: &Row| r.idle_writes.to_string());
    table.line("… besides: the `lastPartialSyncTime` heartbeat", "≤ 1 a minute", |r: &Row| {
        r.idle_heartbeats.to_string()
    });
    table.line("idle partial: infos sent (max)", "0", |r: &Row| r.idle_max_infos.to_string());
    table.line("idle partial: request body (max bytes)", "`[]`", |r: &Row| r.idle_max_body.to_string());
    table.line("idle partial: agent CPU per cycle (ms)", "", |r: &Row| format!("{:.2}", r.idle_cpu_ms_per_cycle));
    table.line("agent RSS above baseline per workspace (bytes)", "≤ 2048", |r: &Row| {
        format!("{:.0}", r.rss_bytes_per_workspace)
    });
    table.line("… of which the agent's live heap (bytes)", "", |r: &Row| {
        r.heap_bytes_per_workspace.map_or("n/a".into(), |h| format!("{h:.0}"))
    });
    table.line("Deployment change → control plane, p50 (ms)", "", |r: &Row| format!("{:.0}", r.report_p50));
    table.line("Deployment change → control plane, p99 (ms)", "< 1000", |r: &Row| format!("{:.0}", r.report_p99));
    table.line("desired change → applied, p50 (ms)", "", |r: &Row| format!("{:.0}", r.apply_p50));
    let apply_target = format!("≤ {}", PARTIAL_SECONDS * 1000 + 1000);
    table.line("desired change → applied, p99 (ms)", &apply_target, |r: &Row| format!("{:.0}", r.apply_p99));
    table.line("WorkspaceSyncStatus size (bytes)", "< 1 MiB", |r: &Row| r.wss_bytes.to_string());
    println!();
}
