//! End-to-end figures: the real `wsync control-plane` on SQLite in place of the stub, so that
//! its work (persisting every report, choosing what to return, building each config) is in
//! the figures, and the floor posts to it too.
//!
//! Its workspaces are created on the control plane and stopped before the agent starts, so
//! that the agent's first cycle creates them in the cluster (a namespace and five objects
//! each) with no Pods: the cluster is quiet while it is measured.

use crate::agent_figures::{self, APPLIED, Measured, Target, http, start_agent, version};
use crate::support::{self, ControlPlaneProcess, LABEL_KEY};
use crate::workload::{self, CONCURRENCY};
use crate::{Options, Table, percentile};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

pub struct Row {
    pub n: usize,
    pub full_ms: f64,
    pub floor_ms: f64,
    pub report_p50: f64,
    pub report_p99: f64,
    pub apply_p50: f64,
    pub apply_p99: f64,
    pub failure_p50: f64,
    pub failure_p99: f64,
}

/// The control plane's JSON API for one agent's workspaces.
struct Workspaces<'a> {
    url: &'a str,
    agent: &'a str,
    admin_token: &'a str,
}

impl Workspaces<'_> {
    async fn post(&self, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/api/v1/agents/{}/workspaces{path}", self.url, self.agent);
        let request = http().post(&url).bearer_auth(self.admin_token).json(&body.unwrap_or_else(|| json!({})));
        let response = request.send().await.expect("control plane");
        assert!(response.status().is_success(), "POST {url}: {}", response.status());
        response.json().await.expect("json")
    }

    async fn get(&self, name: &str) -> Value {
        let url = format!("{}/api/v1/agents/{}/workspaces/{name}", self.url, self.agent);
        http().get(&url).bearer_auth(self.admin_token).send().await.expect("control plane").json().await.expect("json")
    }

    /// N workspaces, created and stopped; returns each one's namespace and name.
    async fn create_stopped(&self, n: usize) -> Vec<(String, String)> {
        let names: Vec<String> = (0..n).map(|i| format!("ws-{i}")).collect();
        futures::stream::iter(&names)
            .map(|name| async move {
                let created = self.post("", Some(json!({ "name": name, "image": "busybox:1.36" }))).await;
                self.post(&format!("/{name}/stop"), None).await;
                (created["namespace"].as_str().expect("a namespace").to_string(), name.clone())
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await
    }
}

pub async fn measure(n: usize, options: &Options) -> Row {
    eprintln!("== end to end, N = {n}");
    let env = support::env();
    let admin = support::admin_client(env).await;
    let agent_client = agent_figures::agent_client().await;
    let id = support::unique_id("bench-e2e");
    let dir = tempfile::tempdir().expect("tempdir");
    let database = format!("sqlite://{}/control-plane.db", dir.path().display());
    let partial = ["--partial-reconciliation-interval-seconds", "1"];
    let full = ["--full-reconciliation-interval-seconds", "3600"];
    let control_plane =
        ControlPlaneProcess::start(&database, dir.path().join("control-plane.log"), &[&partial[..], &full].concat());
    let registered: Value =
        serde_json::from_str(&control_plane.cli(&["agents", "register", &id, "-o", "json"])).expect("json");
    let token = registered["token"].as_str().expect("a token").to_string();
    let workspaces = Workspaces { url: &control_plane.url, agent: &id, admin_token: &control_plane.admin_token };
    let started = Instant::now();
    let keys = workspaces.create_stopped(n).await;
    eprintln!("  {n} workspaces created and stopped on the control plane in {:.1?}", started.elapsed());

    let long = Duration::from_secs(120 + n as u64 / 5);
    let port = support::free_port();
    let agent = start_agent(&id, &control_plane.url, &token, port, true).await;
    let started = Instant::now();
    agent_figures::wait_for_metric(port, APPLIED, n as f64, long).await;
    let settled = workload::wait_until_observed(&admin, &id, n, long).await;
    assert!(settled, "the workspaces' Deployments never settled");
    eprintln!("  the agent created them in the cluster: {:.1?}", started.elapsed());

    // 1. Full resync, against a floor that posts to the same control plane.
    let target = Target { id: &id, n, url: &control_plane.url, token: &token };
    let mut floors = Vec::new();
    let measured = Measured { port, label: "end to end" };
    let fulls =
        agent_figures::full_resyncs(measured, &agent_client, &target, options.runs_at(n), &mut floors, &mut Vec::new())
            .await;

    // 2. A Deployment change reaching the control plane's database.
    let samples = (options.samples / 4).max(5);
    let mut reported = Vec::new();
    for sample in 0..samples {
        let (ns, name) = &keys[(sample * 7919) % n];
        let patch = json!({ "metadata": { "annotations": { "bench.wsync.dev/sample": sample.to_string() } } });
        let api = Api::<Deployment>::namespaced(admin.clone(), ns);
        let changed = api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
        let changed_at = Instant::now();
        let patched = version(changed.metadata.resource_version.as_deref());
        loop {
            let workspace = workspaces.get(name).await;
            if version(workspace["deployment_resource_version"].as_str()) >= patched {
                reported.push(changed_at.elapsed());
                break;
            }
            assert!(changed_at.elapsed() < long, "the change to {name} never reached the control plane");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // 3. A desired-state change on the control plane (start a stopped workspace) applied.
    let mut applied = Vec::new();
    for sample in 0..samples {
        let (ns, name) = &keys[(sample * 104_729 + 1) % n];
        let api = Api::<Deployment>::namespaced(admin.clone(), ns);
        let changed_at = Instant::now();
        workspaces.post(&format!("/{name}/start"), None).await;
        loop {
            let deployment = api.get(name).await.expect("get");
            if deployment.spec.and_then(|s| s.replicas) == Some(1) {
                applied.push(changed_at.elapsed());
                break;
            }
            assert!(changed_at.elapsed() < long, "starting {name} was never applied");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    // 4. The started workspaces' Pods fail (the status a kubelet writes when pulling backs
    // off) until the control plane's database holds the error.
    let mut failed = Vec::new();
    for sample in 0..samples {
        let (ns, name) = &keys[(sample * 104_729 + 1) % n];
        failed.push(pod_failure_reported(&admin, &workspaces, ns, name, long).await);
    }

    drop(agent);
    drop(control_plane);
    workload::delete_namespaces(&admin, &id, &format!("{LABEL_KEY}={id}")).await;
    let median = |samples: &[Duration]| percentile(samples, 50.0);
    Row {
        n,
        full_ms: median(&fulls),
        floor_ms: median(&floors),
        report_p50: percentile(&reported, 50.0),
        report_p99: percentile(&reported, 99.0),
        apply_p50: percentile(&applied, 50.0),
        apply_p99: percentile(&applied, 99.0),
        failure_p50: percentile(&failed, 50.0),
        failure_p99: percentile(&failed, 99.0),
    }
}

/// From the Pod's failing status written to the control plane's API showing the error.
async fn pod_failure_reported(
    admin: &kube::Client,
    workspaces: &Workspaces<'_>,
    ns: &str,
    name: &str,
    long: Duration,
) -> Duration {
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    let created = Instant::now();
    let pod = loop {
        let listed = pods
            .list(&kube::api::ListParams::default().labels(&format!("app.kubernetes.io/name={name}")))
            .await
            .expect("list");
        if let Some(pod) = listed.items.into_iter().next() {
            break pod;
        }
        assert!(created.elapsed() < long, "{name}'s Pod was never created");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let status = json!({ "status": support::kubelet::image_pull_back_off(&pod) });
    let pod_name = pod.metadata.name.as_deref().expect("a name");
    pods.patch_status(pod_name, &PatchParams::default(), &Patch::Merge(&status)).await.expect("patch the status");
    let failed_at = Instant::now();
    loop {
        if !workspaces.get(name).await["error"].is_null() {
            return failed_at.elapsed();
        }
        assert!(failed_at.elapsed() < long, "{name}'s failure never reached the control plane");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn print_table(rows: &[Row]) {
    let table = Table::start("end to end: the real control plane on SQLite", rows, |r| r.n);
    table.line("full resync, floor (ms)", "", |r: &Row| format!("{:.0}", r.floor_ms));
    table.line("full resync, agent (ms)", "", |r: &Row| format!("{:.0}", r.full_ms));
    table.line("full resync, agent ÷ floor", "≤ 1.25", |r: &Row| format!("**{:.2}**", r.full_ms / r.floor_ms));
    table
        .line("Deployment change → control plane's database, p50 (ms)", "", |r: &Row| format!("{:.0}", r.report_p50));
    table.line("Deployment change → control plane's database, p99 (ms)", "< 1000", |r: &Row| {
        format!("{:.0}", r.report_p99)
    });
    table.line("start on the control plane → applied, p50 (ms)", "", |r: &Row| format!("{:.0}", r.apply_p50));
    table.line("start on the control plane → applied, p99 (ms)", "≤ 2000", |r: &Row| format!("{:.0}", r.apply_p99));
    table.line("Pod failure → control plane's database, p50 (ms)", "", |r: &Row| format!("{:.0}", r.failure_p50));
    table.line("Pod failure → control plane's database, p99 (ms)", "< 2000", |r: &Row| {
        format!("{:.0}", r.failure_p99)
    });
    println!();
}
