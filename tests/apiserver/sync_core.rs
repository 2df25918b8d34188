//! Sync-core scenarios on the real apiserver: the real `wsync agent` binary against a
//! scripted control plane. Each test has its own agent id and namespaces.
//!
//! Longer than 400 lines: the loop's promises of DESIGN §2, one scenario each, over the
//! helpers they share.

use crate::support::stub::{Recorded, Reply, Script, StubControlPlane, is_full, summary};
use crate::support::*;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use wsync::protocol::{ReconcileResponse, UpdateType};

const LONG: Duration = Duration::from_secs(60);

fn names(r: &Recorded) -> Vec<String> {
    let mut names: Vec<String> =
        r.request.workspace_agent_infos.iter().map(|i| format!("{}/{}", i.namespace, i.name)).collect();
    names.sort();
    names
}

fn sent_rv(r: &Recorded, namespace: &str) -> Option<String> {
    r.request
        .workspace_agent_infos
        .iter()
        .find(|i| i.namespace == namespace)?
        .latest_k8s_deployment_info
        .as_ref()
        .map(|d| d.resource_version().unwrap_or_default())
}

/// Wait until `quiet` consecutive requests (after a full one) carried nothing: the cluster has
/// settled and everything is acknowledged. Returns the count at that point.
async fn wait_idle(stub: &StubControlPlane, quiet: usize) -> usize {
    let (mut from, _) = stub.wait_for("a full cycle", 0, LONG, is_full).await;
    loop {
        let (at, _) = stub
            .wait_for("an empty partial", from + 1, LONG, |r| {
                r.request.update_type == UpdateType::Partial && r.request.workspace_agent_infos.is_empty()
            })
            .await;
        let requests = stub.requests();
        let run = requests[..=at].iter().rev().take_while(|r| r.request.workspace_agent_infos.is_empty()).count();
        if run >= quiet {
            return at + 1;
        }
        from = at;
    }
}

fn concerns_agent(id: &str) -> impl Fn(&serde_json::Value) -> bool + '_ {
    move |e| {
        let o = &e["objectRef"];
        o["name"].as_str() == Some(id) || o["namespace"].as_str().is_some_and(|ns| ns.starts_with(id))
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_first_cycle_is_full_and_carries_only_this_agents_workspaces() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("sa");
    create_workspace(&client, &format!("{id}-1"), "ws", Some(&id)).await;
    create_workspace(&client, &format!("{id}-2"), "ws", Some(&id)).await;
    create_workspace(&client, &format!("{id}-3"), "ws", Some(&format!("{id}-other"))).await;
    create_workspace(&client, &format!("{id}-4"), "ws", None).await;

    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let (index, first) = stub.wait_for("the first request", 0, LONG, |_| true).await;
    assert_eq!(index, 0);
    assert_eq!(first.request.update_type, UpdateType::Full);
    assert_eq!(names(&first), [format!("{id}-1/ws"), format!("{id}-2/ws")]);
    assert_eq!(first.authorization.as_deref(), Some("Bearer stub-agent-token"));
    let info = &first.request.workspace_agent_infos[0];
    let deployment = info.latest_k8s_deployment_info.as_ref().expect("deployment info").to_value();
    assert!(deployment["metadata"].get("managedFields").is_none(), "the projection drops managedFields");
    assert_eq!(deployment["spec"]["replicas"], 1);

    // `kubectl get wss -A` shows where sync stands.
    eventually("Ready=True", LONG, || {
        let wss = wss_json(env, &id)?;
        (condition(&wss, "Ready")?["status"] == "True").then_some(())
    })
    .await;
    let table = kubectl_ok(env, &["get", "wss", "-A"]);
    let header = table.lines().next().unwrap_or_default();
    for column in
        ["NAMESPACE", "NAME", "READY", "WORKSPACES", "ERRORS", "REASON", "LAST FULL SYNC", "LAST PARTIAL SYNC", "AGE"]
    {
        assert!(header.contains(column), "missing column {column} in:\n{table}");
    }
    let row = table.lines().find(|l| l.contains(&id)).expect("a row for the agent");
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(&cells[..6], [AGENT_NAMESPACE, id.as_str(), "True", "2", "0", "Synced"], "{table}");
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_partial_cycles_send_nothing_and_write_nothing() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("sb");
    create_workspace(&client, &format!("{id}-1"), "ws", Some(&id)).await;
    create_workspace(&client, &format!("{id}-2"), "ws", Some(&id)).await;

    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let settled = wait_idle(&stub, 2).await;
    let mark = audit_mark(env);
    stub.wait_for("four more cycles", settled + 3, LONG, |_| true).await;

    let idle: Vec<String> = stub.requests().iter().skip(settled).map(summary).collect();
    assert!(idle.len() >= 4);
    for request in &stub.requests()[settled..] {
        assert_eq!(request.request.update_type, UpdateType::Partial, "{idle:?}");
        assert!(request.request.workspace_agent_infos.is_empty(), "{idle:?}");
    }
    let writes = agent_writes(env, mark, concerns_agent(&id));
    assert!(writes.is_empty(), "idle cycles wrote to the apiserver: {writes:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deployment_change_is_sent_promptly_alone_and_once() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("sc");
    let (changed_ns, quiet_ns) = (format!("{id}-1"), format!("{id}-2"));
    create_workspace(&client, &changed_ns, "ws", Some(&id)).await;
    create_workspace(&client, &quiet_ns, "ws", Some(&id)).await;

    // A long partial interval: only the watch can explain a prompt cycle.
    let stub = StubControlPlane::start(Script::with_intervals(600, 120)).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let (full, _) = stub.wait_for("the first full cycle", 0, LONG, is_full).await;
    // Let the deployment controller's own status writes come and go.
    let mut seen = stub.count();
    loop {
        tokio::time::sleep(Duration::from_secs(3)).await;
        if stub.count() == seen {
            break;
        }
        seen = stub.count();
    }
    assert!(seen > full);

    let changed_at = Instant::now();
    kubectl_ok(env, &["-n", &changed_ns, "scale", "deployment/ws", "--replicas=0"]);
    let (_, prompt) = stub
        .wait_for("a partial carrying the scaled workspace", seen, LONG, |r| sent_rv(r, &changed_ns).is_some())
        .await;
    let delay = prompt.received.duration_since(changed_at);
    assert!(delay < Duration::from_secs(20), "took {delay:?}; the partial interval is 120s");
    assert_eq!(prompt.request.update_type, UpdateType::Partial);

    // Wait for the change and the deployment controller's follow-up to settle.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after: Vec<Recorded> = stub.requests().into_iter().skip(seen).collect();
    let mut sent_versions: HashMap<String, usize> = HashMap::new();
    // A trigger that arrives during a cycle may start one more that finds nothing left to send.
    for request in after.iter().filter(|r| !r.request.workspace_agent_infos.is_empty()) {
        assert_eq!(
            names(request),
            [format!("{changed_ns}/ws")],
            "only the changed workspace is sent: {}",
            summary(request)
        );
        if let Some(rv) = sent_rv(request, &changed_ns) {
            *sent_versions.entry(rv).or_default() += 1;
        }
    }
    assert!(
        sent_versions.values().all(|&n| n == 1),
        "an acknowledged resourceVersion was sent again: {sent_versions:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn returned_config_is_applied_under_the_agents_field_manager() {
    let env = env();
    let id = unique_id("sd");
    let ns = format!("{id}-1");
    let service = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: ws\n  namespace: {ns}\nspec:\n  ports:\n  - port: 80\n    protocol: TCP\n    targetPort: 8080\n  selector:\n    app: ws\n"
    );
    let config = inventory_config(&ns, "ws-inventory", &[config_map(&ns, "ws-config"), service]);
    let mut script = Script::with_intervals(300, 1);
    script.always_return.push((ns.clone(), "ws".into()));
    script.configs.insert((ns.clone(), "ws".into()), config);
    let stub = StubControlPlane::start(script).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);

    let cm: serde_json::Value = eventually("the ConfigMap", LONG, || {
        let out = kubectl(env, &["-n", &ns, "get", "configmap", "ws-config", "-o", "json", "--show-managed-fields"]);
        out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
    })
    .await;
    assert_eq!(cm["data"]["greeting"], "hello");
    let managers: Vec<(&str, &str)> = cm["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|m| (m["manager"].as_str().unwrap_or_default(), m["operation"].as_str().unwrap_or_default()))
        .collect();
    assert!(managers.contains(&("wsync", "Apply")), "{managers:?}");
    let svc =
        kubectl_ok(env, &["-n", &ns, "get", "service", "ws", "-o", "jsonpath={.metadata.managedFields[*].manager}"]);
    assert!(svc.contains("wsync"), "{svc}");
    let label = kubectl_ok(env, &["get", "namespace", &ns, "-o", r"jsonpath={.metadata.labels.agent\.gitlab\.com/id}"]);
    assert_eq!(label, id, "the agent creates the namespace, labelled with its id");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_cycle_follows_the_full_interval() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("se");
    create_workspace(&client, &format!("{id}-1"), "ws", Some(&id)).await;
    create_workspace(&client, &format!("{id}-2"), "ws", Some(&id)).await;

    let stub = StubControlPlane::start(Script::with_intervals(5, 1)).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let (first, a) = stub.wait_for("the first full cycle", 0, LONG, is_full).await;
    let (second, b) = stub.wait_for("the next full cycle", first + 1, LONG, is_full).await;
    let gap = b.received.duration_since(a.received);
    assert!(gap >= Duration::from_millis(4500), "full cycles {gap:?} apart; the interval is 5s");
    assert!(second - first >= 3, "partial cycles run in between");
    assert_eq!(names(&b), [format!("{id}-1/ws"), format!("{id}-2/ws")], "a full cycle sends every workspace");
    assert!(stub.requests()[first + 1..second].iter().all(|r| r.request.update_type == UpdateType::Partial));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_resync_annotation_forces_a_full_cycle() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("se2");
    create_workspace(&client, &format!("{id}-1"), "ws", Some(&id)).await;
    create_workspace(&client, &format!("{id}-2"), "ws", Some(&id)).await;

    let stub = StubControlPlane::start(Script::with_intervals(600, 1)).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let settled = wait_idle(&stub, 2).await;
    let wss = format!("wss/{id}");
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "annotate", &wss, "wsync.dev/resync-requested=first"]);
    let (forced, full) = stub.wait_for("a forced full cycle", settled, LONG, is_full).await;
    assert_eq!(names(&full), [format!("{id}-1/ws"), format!("{id}-2/ws")]);

    eventually("the handled request recorded", LONG, || {
        let wss = wss_json(env, &id)?;
        (wss["status"]["lastHandledResyncRequest"] == "first").then_some(())
    })
    .await;
    // Handled once: the next cycles are partial again.
    stub.wait_for("three more cycles", forced + 3, LONG, |_| true).await;
    assert!(stub.requests()[forced + 1..].iter().all(|r| r.request.update_type == UpdateType::Partial));

    let now = stub.count();
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "annotate", "--overwrite", &wss, "wsync.dev/resync-requested=second"]);
    stub.wait_for("a second forced full cycle", now, LONG, is_full).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn control_plane_failures_apply_nothing_show_the_reason_and_recover() {
    let env = env();
    let id = unique_id("sf");
    let ns = format!("{id}-1");
    let config = inventory_config(&ns, "ws-inventory", &[config_map(&ns, "ws-config")]);
    let mut script = Script::with_intervals(300, 1);
    script.always_return.push((ns.clone(), "ws".into()));
    script.configs.insert((ns.clone(), "ws".into()), config);
    // Every failure below carries a body that would apply a config, if the agent trusted it.
    let tempting =
        serde_json::to_string(&script.respond(&wsync::protocol::ReconcileRequest {
            update_type: UpdateType::Full,
            workspace_agent_infos: vec![],
        }))
        .expect("json");

    let stub = StubControlPlane::start(Script::default()).await;
    let body = tempting.clone();
    stub.set_responder(move |_| Reply::status(500, &body));
    let _agent = AgentProcess::start(env, &id, &stub.url, &["--request-timeout", "1s"]);

    let reason_shown = |reason: &'static str| {
        let id = id.clone();
        move || {
            let wss = wss_json(env, &id)?;
            let synced = condition(&wss, "Synced")?;
            (synced["status"] == "False" && synced["reason"] == reason).then(|| synced["message"].to_string())
        }
    };
    let message = eventually("ControlPlaneRejected", LONG, reason_shown("ControlPlaneRejected")).await;
    assert!(message.contains("500"), "{message}");
    let table = kubectl_ok(env, &["-n", AGENT_NAMESPACE, "get", "wss", &id]);
    assert!(table.contains("ControlPlaneRejected"), "{table}");

    // Backoff: the retries spread out instead of hammering.
    let before = stub.count();
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(stub.count() - before <= 5, "{} retries in 4s", stub.count() - before);

    let body = tempting.clone();
    stub.set_responder(move |_| Reply::status(201, &body).delayed(Duration::from_secs(3)));
    eventually("ControlPlaneTimeout", LONG, reason_shown("ControlPlaneTimeout")).await;

    stub.set_responder(|_| Reply::status(201, "<html>this is not JSON</html>"));
    eventually("ControlPlaneInvalidResponse", LONG, reason_shown("ControlPlaneInvalidResponse")).await;

    let applied = kubectl(env, &["-n", &ns, "get", "configmap", "ws-config"]);
    assert!(!applied.status.success(), "nothing may be applied from a failed call");

    stub.set_script(script);
    eventually("Synced=True", LONG, || {
        let wss = wss_json(env, &id)?;
        (condition(&wss, "Synced")?["status"] == "True").then_some(())
    })
    .await;
    eventually("the config applied after recovery", LONG, || {
        kubectl(env, &["-n", &ns, "get", "configmap", "ws-config"]).status.success().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_and_restart_starts_full_with_the_ledger_intact() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("sg");
    let good_ns = format!("{id}-1");
    let bad_ns = format!("{id}-bad");
    create_workspace(&client, &good_ns, "ws", Some(&id)).await;
    create_workspace(&client, &bad_ns, "ws", Some(&id)).await;

    // "bad" gets a broken config. While the agent reports its error, the control plane does
    // not return it, so the error is never acknowledged and must survive everything below.
    let mut script = Script::with_intervals(300, 1);
    script.configs.insert((bad_ns.clone(), "ws".into()), "apiVersion: v1\nkind: [broken".into());
    let stub = StubControlPlane::start(Script::default()).await;
    let bad = bad_ns.clone();
    stub.set_responder(move |req| {
        let mut response: ReconcileResponse = script.respond(req);
        if req.workspace_agent_infos.iter().any(|i| i.namespace == bad && i.error_details.is_some()) {
            response.workspace_rails_infos.retain(|i| i.namespace != bad);
        }
        Reply::created(&response)
    });
    let mut agent = AgentProcess::start(env, &id, &stub.url, &[]);

    let before = eventually("a pending error in the status", LONG, || {
        let wss = wss_json(env, &id)?;
        (wss["status"]["pendingErrorCount"] == 1).then_some(wss)
    })
    .await;
    let message = before["status"]["errorMessages"][0].as_str().unwrap_or_default().to_string();
    assert!(message.contains("invalid YAML"), "{message}");
    let described = kubectl_ok(env, &["-n", AGENT_NAMESPACE, "describe", "wss", &id]);
    assert!(described.contains("invalid YAML"), "kubectl describe shows the message:\n{described}");

    agent.kill9();
    let after_kill = wss_json(env, &id).expect("wss");
    assert_eq!(after_kill["status"]["pendingErrors"], before["status"]["pendingErrors"]);
    assert_eq!(after_kill["status"]["errorMessages"], before["status"]["errorMessages"]);
    assert_eq!(after_kill["status"]["lastFullSyncTime"], before["status"]["lastFullSyncTime"]);
    assert_eq!(after_kill["status"]["epoch"], before["status"]["epoch"]);

    let carries_the_error = |r: &Recorded| {
        r.request
            .workspace_agent_infos
            .iter()
            .any(|i| i.namespace == bad_ns && i.error_details.as_ref().is_some_and(|e| e.error_message == message))
    };
    let restart_at = stub.count();
    agent.restart();
    let (_, first) = stub.wait_for("the first cycle after restart", restart_at, LONG, |_| true).await;
    assert_eq!(first.request.update_type, UpdateType::Full);
    assert!(names(&first).contains(&format!("{good_ns}/ws")), "{}", summary(&first));
    assert!(carries_the_error(&first), "the pending error is reported after the restart: {}", summary(&first));

    let epoch = before["status"]["epoch"].as_u64().expect("epoch");
    eventually("a new epoch", LONG, || (wss_json(env, &id)?["status"]["epoch"].as_u64()? == epoch + 1).then_some(()))
        .await;

    // A forced full resync drops derived state, but not the unacknowledged error.
    let forced_at = stub.count();
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "annotate", &format!("wss/{id}"), "wsync.dev/resync-requested=1"]);
    let (_, forced) = stub.wait_for("the forced full cycle", forced_at, LONG, is_full).await;
    assert!(carries_the_error(&forced), "the forced full cycle carries the error: {}", summary(&forced));
}

#[tokio::test(flavor = "multi_thread")]
async fn no_request_overlaps_a_slow_full_cycle() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("sh");
    let ns = format!("{id}-1");
    create_workspace(&client, &ns, "ws", Some(&id)).await;

    let script = Script::with_intervals(600, 1);
    let stub = StubControlPlane::start(Script::default()).await;
    stub.set_responder(move |req| {
        let reply = Reply::created(&script.respond(req));
        if req.update_type == UpdateType::Full { reply.delayed(Duration::from_secs(4)) } else { reply }
    });
    let _agent = AgentProcess::start(env, &id, &stub.url, &["--request-timeout", "10s"]);
    let settled = wait_idle(&stub, 1).await;

    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "annotate", &format!("wss/{id}"), "wsync.dev/resync-requested=slow"]);
    let (full_at, _) = stub.wait_for("the slow full cycle", settled, LONG, is_full).await;
    // Changes while the full cycle waits would each trigger a partial, if anything allowed it.
    for replicas in ["0", "1", "0"] {
        kubectl_ok(env, &["-n", &ns, "scale", "deployment/ws", &format!("--replicas={replicas}")]);
        tokio::time::sleep(Duration::from_millis(600)).await;
    }
    let (_, next) = stub.wait_for("the cycle after the full one", full_at + 1, LONG, |_| true).await;
    let full = &stub.requests()[full_at];
    let answered = full.answered.expect("the full cycle was answered");
    assert!(next.received >= answered, "a request arrived while the full cycle was waiting");
    assert_eq!(stub.max_in_flight(), 1, "requests overlapped");
}
