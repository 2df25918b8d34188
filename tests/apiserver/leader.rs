//! Leader election on the real apiserver: two agent processes, exactly one syncs, and the
//! other takes over when the leader dies (within the lease) or shuts down (at once).

use crate::support::stub::{Recorded, Reply, Script, StubControlPlane, is_full, summary};
use crate::support::*;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn exactly_one_replica_syncs_and_the_other_takes_over() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("le");
    create_workspace(&client, &format!("{id}-1"), "ws", Some(&id)).await;
    // A workspace whose config fails to apply, and whose error the stubs never acknowledge.
    let broken = (format!("{id}-2"), "broken".to_string());
    create_workspace(&client, &broken.0, &broken.1, Some(&id)).await;
    let mut script = Script::with_intervals(300, 1);
    script.configs.insert(broken.clone(), config_map(&broken.0, "no-inventory"));
    // Each replica talks to its own stub, so the stubs tell who syncs.
    let stubs = [StubControlPlane::start(script.clone()).await, StubControlPlane::start(script.clone()).await];
    for stub in &stubs {
        let script = script.clone();
        stub.set_responder(move |request| Reply::created(&script.respond_unacknowledged(request)));
    }
    let lease = ["--lease-duration", "8s", "--lease-grace", "3s"];
    let mut agents =
        [AgentProcess::start(env, &id, &stubs[0].url, &lease), AgentProcess::start(env, &id, &stubs[1].url, &lease)];
    let leader = eventually("a leader", LONG, || (0..2).find(|&i| stubs[i].count() > 0)).await;
    let follower = 1 - leader;
    stubs[leader].wait_for("the applier error reported", 0, LONG, |r| carries_error(r, &broken)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(stubs[leader].count() >= 3, "the leader syncs");
    assert_eq!(stubs[follower].count(), 0, "the follower never syncs");

    // kill -9: the Lease is not released; the follower takes over once it expires.
    let killed_at = Instant::now();
    agents[leader].kill9();
    let (_, first) = stubs[follower].wait_for("the new leader's first cycle", 0, LONG, |_| true).await;
    let takeover = first.received.duration_since(killed_at);
    assert!(takeover < Duration::from_secs(20), "took over after {takeover:?}; the lease is 8s");
    assert!(is_full(&first), "a new leader starts with a full cycle");
    assert_eq!(first.request.workspace_agent_infos.len(), 2, "every workspace: {}", summary(&first));
    assert!(carries_error(&first, &broken), "and every unacknowledged error: {}", summary(&first));

    // SIGTERM: the leader releases the Lease, so the successor needs no expiry.
    agents[leader].restart();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = stubs[leader].count();
    let terminated_at = Instant::now();
    assert!(agents[follower].terminate(), "SIGTERM exits 0");
    let (_, first) = stubs[leader].wait_for("the successor's first cycle", before, LONG, |_| true).await;
    let handover = first.received.duration_since(terminated_at);
    assert!(handover < Duration::from_secs(6), "handed over after {handover:?}, sooner than the 8s lease");
    assert!(is_full(&first));
}

fn carries_error(recorded: &Recorded, (namespace, name): &(String, String)) -> bool {
    recorded.request.workspace_agent_infos.iter().any(|i| {
        &i.namespace == namespace
            && &i.name == name
            && i.error_details.as_ref().is_some_and(|e| e.error_message.contains("owning-inventory"))
    })
}

async fn get(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(response) => (response.status().as_u16(), response.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

fn sample(metrics: &str, name_and_labels: &str) -> Option<f64> {
    metrics.lines().find(|l| l.starts_with(name_and_labels))?.rsplit(' ').next()?.parse().ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_readiness_and_json_logs_follow_a_scripted_run() {
    wsync::runtime::install_crypto_provider();
    let env = env();
    let id = unique_id("me");
    let ns = format!("{id}-1");
    let stub = StubControlPlane::start(Script::default()).await;
    stub.set_responder(|_| crate::support::stub::Reply::status(500, "down"));
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let base = format!("http://{address}");
    let agent = AgentProcess::start(env, &id, &stub.url, &["--metrics-address", &address, "--log-format", "json"]);

    eventually("/healthz", LONG, || http_ok(&format!("{base}/healthz")).then_some(())).await;
    stub.wait_for("a failing cycle", 0, LONG, |_| true).await;
    let (status, _) = get(&format!("{base}/readyz")).await;
    assert_eq!(status, 503, "a leader without a completed cycle is not ready");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, metrics) = get(&format!("{base}/metrics")).await;
    assert_eq!(sample(&metrics, "wsync_leader "), Some(1.0), "{metrics}");
    assert!(sample(&metrics, r#"wsync_control_plane_requests_total{status="500"}"#).unwrap_or(0.0) >= 1.0, "{metrics}");
    assert!(sample(&metrics, r#"wsync_sync_cycles_total{update_type="full",result="error"}"#).unwrap_or(0.0) >= 1.0);

    let mut script = Script::with_intervals(300, 1);
    script.always_return.push((ns.clone(), "ws".into()));
    script.configs.insert((ns.clone(), "ws".into()), "kind: [broken".into());
    stub.set_responder(move |req| crate::support::stub::Reply::created(&script.respond_unacknowledged(req)));
    let mut ready = 0;
    for _ in 0..100 {
        ready = get(&format!("{base}/readyz")).await.0;
        if ready == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(ready, 200, "ready once a cycle completed");
    // The control plane never acknowledges the error, so it stays pending; read until every
    // sample holds.
    let wanted = [
        (r#"wsync_sync_cycles_total{update_type="full",result="success"}"#, 1.0),
        (r#"wsync_sync_cycles_total{update_type="partial",result="success"}"#, 1.0),
        (r#"wsync_control_plane_requests_total{status="201"}"#, 1.0),
        (r#"wsync_applies_total{result="failure"}"#, 1.0),
        ("wsync_pending_errors ", 1.0),
        (r#"wsync_last_successful_sync_timestamp_seconds{update_type="full"}"#, 1.0e9),
        (r#"wsync_sync_cycle_last_start_timestamp_seconds{update_type="partial"}"#, 1.0e9),
        ("wsync_sync_cycle_duration_seconds_count", 1.0),
        ("wsync_control_plane_request_duration_seconds_count", 2.0),
        ("wsync_sync_workspaces_sent_count", 2.0),
    ];
    let summed = |metrics: &str, name: &str| {
        metrics
            .lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = get(&format!("{base}/metrics")).await.1;
        if wanted.iter().all(|(name, at_least)| summed(&metrics, name) >= *at_least) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (name, at_least) in wanted {
        let value = summed(&metrics, name);
        assert!(value >= at_least, "{name} = {value}, want >= {at_least}:\n{metrics}");
    }

    // The level changes at run time: at `warn`, the per-cycle info lines stop.
    let client = reqwest::Client::new();
    let admin = format!("http://127.0.0.1:{}", agent.admin_port);
    let put = |body: &'static str| client.put(format!("{admin}/loglevel")).body(body).send();
    let on_metrics_port = client.put(format!("{base}/loglevel")).body("trace").send().await.expect("PUT");
    assert_eq!(on_metrics_port.status().as_u16(), 404, "the metrics port changes nothing");
    assert_eq!(put("not a [filter").await.expect("PUT").status().as_u16(), 400);
    assert_eq!(put("warn").await.expect("PUT").status().as_u16(), 200);
    let quiet_from = agent.logs().len();
    let seen = stub.count();
    stub.wait_for("three more cycles", seen + 3, LONG, |_| true).await;
    assert!(!agent.logs()[quiet_from..].contains("sync cycle done"), "info lines after switching to warn");

    // The logs of the whole run are JSON, and the token never appears in them.
    let logs = agent.logs();
    assert!(!logs.contains(crate::support::stub::STUB_TOKEN), "the token leaked into the logs");
    let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() > 5);
    for line in lines {
        let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert!(value.get("level").is_some() && value.get("timestamp").is_some(), "{line}");
    }
}

/// Leader-only tasks stop with the Lease: an agent whose Lease someone else took stops
/// syncing and does not recreate a deleted WorkspaceSyncStatus (an old leader's ledger would
/// overwrite the new one's). Then the Lease is deleted: the agent creates it again (the lease
/// manager alone never would, and nothing would sync), leads, and writes its status again.
#[tokio::test(flavor = "multi_thread")]
async fn a_deposed_leader_stops_its_leader_only_tasks() {
    let env = env();
    let id = unique_id("dp");
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let agent = AgentProcess::start(env, &id, &stub.url, &["--lease-duration", "4s", "--lease-grace", "2s"]);
    stub.wait_for("the first cycle", 0, LONG, |_| true).await;
    let lease = format!("wsync-agent-{id}");

    // Another holder takes the Lease and keeps renewing it, as a newer replica would.
    let hold = || {
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
        let patch = serde_json::json!({"spec": {"holderIdentity": "intruder", "renewTime": now}});
        kubectl_ok(
            env,
            &["-n", AGENT_NAMESPACE, "patch", "lease", &lease, "--type", "merge", "-p", &patch.to_string()],
        );
    };
    hold();
    let deposed = Instant::now();
    while !agent.logs().contains("lost the Lease") {
        assert!(deposed.elapsed() < LONG, "the agent never saw it lost the Lease");
        hold();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = stub.count();
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "delete", "wss", &id]);
    for _ in 0..12 {
        hold();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(wss_json(env, &id).is_none(), "a deposed leader recreated the WorkspaceSyncStatus");
    assert_eq!(stub.count(), after, "a deposed leader synced");

    // The intruder goes, and its Lease with it: the agent leads again, writes its
    // WorkspaceSyncStatus, and syncs.
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "delete", "lease", &lease]);
    eventually("the WorkspaceSyncStatus written again", LONG, || wss_json(env, &id).map(|_| ())).await;
    stub.wait_for("a cycle of the new term", after, LONG, |_| true).await;
}

#[test]
fn an_address_already_in_use_is_named_by_its_flag() {
    let env = env();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let taken = taken.local_addr().expect("address").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("token"), "t").expect("token");
    for (flag, other) in [("--metrics-address", "--admin-address"), ("--admin-address", "--metrics-address")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
            .args(["agent", "--agent-id", "taken", "--control-plane-url", "http://127.0.0.1:1"])
            .arg("--token-file")
            .arg(dir.path().join("token"))
            .args([flag, &taken, other, &format!("127.0.0.1:{}", free_port())])
            .env("KUBECONFIG", &env.agent_kubeconfig)
            .output()
            .expect("run wsync agent");
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&format!("{flag} {taken}")) && stderr.contains("in use"), "{flag}: {stderr}");
    }
}
