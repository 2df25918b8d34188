//! Faults that must lose nothing (issue #18): an answer lost after the control plane committed
//! it, an apply that fails and heals with no new config, and an apply that overruns its
//! deadline. The real agent against the real apiserver, with the stub scripted per fault.

use crate::support::stub::{Reply, StubControlPlane, is_full};
use crate::support::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use wsync::protocol::UpdateType;

const LONG: Duration = Duration::from_secs(60);

fn answer(infos: Vec<serde_json::Value>) -> Reply {
    let settings = json!({ "full_reconciliation_interval_seconds": 300, "partial_reconciliation_interval_seconds": 1 });
    Reply::status(201, &json!({ "workspace_rails_infos": infos, "settings": settings }).to_string())
}

fn running(namespace: &str, config: &str) -> serde_json::Value {
    json!({ "name": "ws", "namespace": namespace, "desired_state": "Running", "actual_state": "Running",
            "config_to_apply": config })
}

#[tokio::test(flavor = "multi_thread")]
async fn after_an_answer_lost_past_the_timeout_the_next_cycle_is_full() {
    let env = env();
    let id = unique_id("fl");
    let stub = StubControlPlane::start(Default::default()).await;
    let lose_next = Arc::new(AtomicBool::new(false));
    let lose = lose_next.clone();
    stub.set_responder(move |_| {
        let reply = answer(vec![]);
        if lose.swap(false, Ordering::SeqCst) { reply.delayed(Duration::from_secs(4)) } else { reply }
    });
    let _agent = AgentProcess::start(env, &id, &stub.url, &["--request-timeout", "1s"]);
    let (first, _) = stub.wait_for("the first full cycle", 0, LONG, is_full).await;
    let (partial, _) = stub.wait_for("a partial cycle", first + 1, LONG, |r| !is_full(r)).await;
    lose_next.store(true, Ordering::SeqCst);
    let (lost, _) = stub.wait_for("the cycle whose answer is lost", partial + 1, LONG, |_| true).await;
    let (_, next) = stub.wait_for("the cycle after it", lost + 1, LONG, |_| true).await;
    assert_eq!(next.request.update_type, UpdateType::Full, "the control plane may have committed: start over");
    let (_, after) = stub.wait_for("the one after the full one", lost + 2, LONG, |_| true).await;
    assert_eq!(after.request.update_type, UpdateType::Partial, "then partial again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_apply_is_retried_with_its_config_until_it_heals() {
    let env = env();
    let id = unique_id("fr");
    let ns = format!("{id}-1");
    // A namespace the agent may not use until someone labels it: the apply fails, and heals
    // without the control plane sending anything new.
    kubectl_ok(env, &["create", "namespace", &ns]);
    kubectl_ok(env, &["label", "namespace", &ns, &format!("{TEST_LABEL}={id}")]);
    let config = inventory_config(&ns, "inv", &[config_map(&ns, "cfg")]);
    let sent = Arc::new(AtomicUsize::new(0));
    let stub = StubControlPlane::start(Default::default()).await;
    let (times, ns2) = (sent.clone(), ns.clone());
    stub.set_responder(move |_| {
        // The config once, as a control plane sends it only on change.
        let once = times.fetch_add(1, Ordering::SeqCst) == 0;
        answer(if once { vec![running(&ns2, &config)] } else { vec![] })
    });
    let agent = AgentProcess::start(env, &id, &stub.url, &[]);
    stub.wait_for("the error reported", 0, LONG, |r| {
        r.request.workspace_agent_infos.iter().any(|i| {
            i.namespace == ns && i.error_details.as_ref().is_some_and(|e| e.error_message.contains("not labelled"))
        })
    })
    .await;
    kubectl_ok(env, &["label", "namespace", &ns, &format!("{LABEL_KEY}={id}")]);
    eventually("the retried apply landed", LONG, || {
        kubectl(env, &["-n", &ns, "get", "configmap", "cfg"]).status.success().then_some(())
    })
    .await;
    assert!(sent.load(Ordering::SeqCst) > 1);
    assert!(agent.logs().contains("retried a failed apply"), "{}", agent.logs());
    eventually("the pending error cleared", LONG, || {
        (wss_json(env, &id)?["status"]["pendingErrorCount"].as_u64()? == 0).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_apply_past_its_deadline_is_reported_and_frees_its_slot() {
    let env = env();
    let id = unique_id("fd");
    let (slow, fast) = (format!("{id}-slow"), format!("{id}-fast"));
    let stub = StubControlPlane::start(Default::default()).await;
    let slow_config = inventory_config(&slow, "inv", &[config_map(&slow, "cfg")]);
    let fast_config = inventory_config(&fast, "inv", &[config_map(&fast, "cfg")]);
    let (s, f) = (slow.clone(), fast.clone());
    let once = Arc::new(AtomicUsize::new(0));
    stub.set_responder(move |_| {
        let first = once.fetch_add(1, Ordering::SeqCst) == 0;
        let mut infos = vec![running(&s, &slow_config)];
        if !first {
            infos.push(running(&f, &fast_config));
        }
        answer(infos)
    });
    // One slot, and a deadline no apply can meet: the first apply times out, frees the slot,
    // and the next workspace is applied (and times out too) instead of waiting for ever.
    let _agent = AgentProcess::start(env, &id, &stub.url, &["--apply-concurrency", "1", "--apply-timeout", "1ms"]);
    for namespace in [&slow, &fast] {
        stub.wait_for("the deadline reported", 0, LONG, |r| {
            r.request.workspace_agent_infos.iter().any(|i| {
                &i.namespace == namespace
                    && i.error_details.as_ref().is_some_and(|e| e.error_message.contains("--apply-timeout"))
            })
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_termination_held_by_a_finalizer_is_reported_and_ends_when_released() {
    let env = env();
    let id = unique_id("ft");
    let ns = format!("{id}-1");
    kubectl_ok(env, &["create", "namespace", &ns]);
    kubectl_ok(env, &["label", "namespace", &ns, &format!("{TEST_LABEL}={id}"), &format!("{LABEL_KEY}={id}")]);
    let held = json!({ "apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": { "name": "held", "namespace": ns, "finalizers": ["example.com/hold"] } });
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), held.to_string()).expect("write");
    kubectl_ok(env, &["apply", "-f", path_str(file.path())]);
    let stub = StubControlPlane::start(Default::default()).await;
    let ns2 = ns.clone();
    stub.set_responder(move |request| {
        let terminated = request.workspace_agent_infos.iter().any(|i| {
            i.namespace == ns2 && i.termination_progress == Some(wsync::protocol::TerminationProgress::Terminated)
        });
        let actual = if terminated { "Terminated" } else { "Terminating" };
        answer(vec![json!({ "name": "ws", "namespace": ns2, "desired_state": "Terminated", "actual_state": actual })])
    });
    let agent = AgentProcess::start(env, &id, &stub.url, &["--termination-timeout", "2s"]);
    let (_, reported) = stub
        .wait_for("the stuck termination reported", 0, LONG, |r| {
            r.request.workspace_agent_infos.iter().any(|i| {
                i.namespace == ns
                    && i.error_details.as_ref().is_some_and(|e| e.error_message.contains("still terminating"))
            })
        })
        .await;
    let info = reported.request.workspace_agent_infos.iter().find(|i| i.namespace == ns).expect("info");
    assert_eq!(info.error_details.as_ref().map(|e| e.error_type), Some(wsync::protocol::ErrorType::Kubernetes));
    eventually("the TerminationStuck condition", LONG, || {
        (condition(&wss_json(env, &id)?, "TerminationStuck")?["status"] == "True").then_some(())
    })
    .await;
    let metrics = || {
        let out = std::process::Command::new("curl")
            .args(["-fs", &format!("http://127.0.0.1:{}/metrics", agent.metrics_port)])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find(|l| l.starts_with("wsync_terminations_stuck "))
            .map(str::to_string)
    };
    assert_eq!(metrics().as_deref(), Some("wsync_terminations_stuck 1"));

    // Released: the namespace goes, the workspace is Terminated, and nothing is stuck.
    kubectl_ok(
        env,
        &["-n", &ns, "patch", "configmap", "held", "--type", "merge", "-p", r#"{"metadata":{"finalizers":null}}"#],
    );
    eventually("the namespace gone", LONG, || {
        (!kubectl(env, &["get", "namespace", &ns]).status.success()).then_some(())
    })
    .await;
    eventually("nothing stuck", LONG, || condition(&wss_json(env, &id)?, "TerminationStuck").is_none().then_some(()))
        .await;
    assert_eq!(metrics().as_deref(), Some("wsync_terminations_stuck 0"));
}
