//! A failing workspace says why (#21): a Pod that a ResourceQuota refuses, for real (the
//! apiserver's ResourceQuota admission and the local cluster's resourcequota controller),
//! reaches the control plane as a `kubernetes` error within seconds, once, with what to do,
//! on the page (headless Chromium) and in the CLI; and clears when the failure ends.

use crate::support::system::System;
use crate::support::*;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread")]
async fn a_pod_the_quota_refuses_is_reported_with_what_to_do_and_cleared_when_it_ends() {
    let env = env();
    let system = System::start("wf").await;
    // The namespace the workspace will get, made first with the agent's label (which the
    // agent accepts as its own) and a quota whose usage the controller has counted.
    let namespace = format!("wsync-{}-erin", system.id);
    let quota = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n  labels:\n    {LABEL_KEY}: {id}\n---\n\
         apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: small\n  namespace: {namespace}\nspec:\n  hard:\n    requests.cpu: 100m\n",
        id = system.id
    );
    kubectl_apply(env, &quota);
    eventually("the quota's usage counted", LONG, || {
        get_field(env, &namespace, "resourcequota/small", "{.status.hard.requests\\.cpu}").filter(|h| !h.is_empty())
    })
    .await;

    system.cli(&["create", "erin", "--image", "busybox:1.36", "--cpu", "500m", "--memory", "64Mi"]);
    let created = Instant::now();
    let failing = system.wait_actual("erin", "Error").await;
    let reported_in = created.elapsed();
    eprintln!("quota refusal reported in {reported_in:?} after the workspace's creation");
    let error = &failing["error"];
    assert_eq!(error["error_type"], "kubernetes", "{failing}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("QuotaExceeded: ") && message.contains("exceeded quota: small"), "{message}");

    let shown = system.cli(&["get", "erin"]);
    assert!(shown.contains("what to do: the agent's resource quota is too small"), "{shown}");
    let mut browser = browser::Browser::launch();
    let page = format!("/agents/{}", system.id);
    browser.sign_in_to(&system.control_plane.url, &system.control_plane.admin_token, &page);
    let html = browser.html();
    assert!(html.contains("QuotaExceeded: ") && html.contains("What to do: the agent's resource quota"), "{html}");

    // Once, whatever the ReplicaSet's retries: one log line, one count.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let logs = system.agent.logs();
    let reported = logs.lines().filter(|l| l.contains("a workspace's workload is failing")).count();
    assert_eq!(reported, 1, "{logs}");
    let metrics = system.agent.metrics();
    assert!(metrics.contains("wsync_workspace_failures_total{reason=\"QuotaExceeded\"} 1"), "{metrics}");

    // Stopped, no Pod is wanted: the failure ends and the control plane hears of it.
    system.cli(&["stop", "erin"]);
    let stopped = system.wait_actual("erin", "Stopped").await;
    assert!(stopped["error"].is_null(), "the error cleared: {stopped}");
    assert!(system.agent.logs().contains("a workspace's workload failure ended"));
    // The page keeps it as history.
    browser.goto(&format!("{}{page}", system.control_plane.url));
    let html = browser.html();
    assert!(html.contains("Earlier errors (1)") && html.contains("QuotaExceeded: "), "{html}");
}

/// The Pod watch: each kind of failure a kubelet or scheduler shows is reported with its
/// reason and words; one that ends clears; one that ends before the kubelet backs off
/// reports nothing. The kubelet stand-in writes the statuses (tests/support/kubelet.rs).
#[tokio::test(flavor = "multi_thread")]
async fn pod_failures_are_reported_by_reason_and_a_passing_one_reports_nothing() {
    let system = System::start_configured("wp", &[], &["--unschedulable-grace", "2s"]).await;
    let workspaces = [
        ("pull", "standin/image-pull-backoff"),
        ("oom", "standin/oomkilled"),
        ("config", "standin/config-error"),
        ("pending", "standin/unschedulable"),
        ("late", "standin/pull-recovers"),
        ("flaky", "standin/first-pull-fails"),
    ];
    for (name, image) in workspaces {
        system.cli(&["create", name, "--image", image]);
    }
    for (name, reason, said) in [
        ("pull", "ImagePull: ", "Back-off pulling image \"standin/image-pull-backoff\""),
        ("oom", "CrashLoop: ", "container \"workspace\" OOMKilled (exit 137), restarted 4 times"),
        ("config", "ContainerConfig: ", "secret \"missing\" not found"),
        ("pending", "Unschedulable: ", "Insufficient cpu"),
    ] {
        let failing = system.wait_actual(name, "Error").await;
        let message = failing["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(reason) && message.contains(said), "{name}: {message}");
        assert_eq!(failing["error"]["error_type"], "kubernetes");
    }
    let shown = system.cli(&["get", "oom"]);
    assert!(shown.contains("what to do: the workspace ran out of memory"), "{shown}");

    let recovered = system.wait_actual("late", "Running").await;
    assert!(recovered["error"].is_null(), "{recovered}");
    system.wait_actual("flaky", "Running").await;
    let logs = system.agent.logs();
    let said = |what: &str, name: &str| {
        logs.lines().filter(|l| l.contains(what) && l.contains(&format!("workspace={name} "))).count()
    };
    assert_eq!(said("workload is failing", "late"), 1, "reported once, then cleared:\n{logs}");
    assert_eq!(said("workload failure ended", "late"), 1, "{logs}");
    assert_eq!(said("workload is failing", "flaky"), 0, "a first ErrImagePull is no failure yet:\n{logs}");
}

/// A Pod failure the control plane has not acknowledged survives `kill -9`: the restarted
/// agent's first cycle carries it from the WorkspaceSyncStatus, and it is not counted as a new
/// failure (no second "is failing", the same words).
#[tokio::test(flavor = "multi_thread")]
async fn an_unacknowledged_pod_failure_survives_kill_9() {
    use crate::support::stub::{Recorded, Reply, Script, StubControlPlane, is_full};
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("wk");
    let ns = format!("{id}-1");
    create_workspace(&client, &ns, "ws", Some(&id)).await;
    kubectl_apply(
        env,
        &format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: pull\n  namespace: {ns}\n  labels:\n    {LABEL_KEY}: {id}\n\
             spec:\n  selector:\n    matchLabels:\n      app: pull\n  template:\n    metadata:\n      labels:\n        app: pull\n        {LABEL_KEY}: {id}\n\
             \x20   spec:\n      containers:\n      - name: main\n        image: standin/image-pull-backoff\n"
        ),
    );
    let _kubelet = tokio::spawn(kubelet::run(client.clone(), Some(format!("{LABEL_KEY}={id}"))));
    let script = Script::with_intervals(300, 1);
    let stub = StubControlPlane::start(script.clone()).await;
    stub.set_responder(move |request| Reply::created(&script.respond_unacknowledged(request)));
    let mut agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let carried = |r: &Recorded| {
        r.request.workspace_agent_infos.iter().find(|i| i.name == "pull").and_then(|i| i.error_details.clone())
    };
    let (_, first) = stub.wait_for("the image-pull failure", 0, LONG, |r| carried(r).is_some()).await;
    let error = carried(&first).expect("an error");
    assert!(error.error_message.starts_with("ImagePull: "), "{}", error.error_message);

    agent.kill9();
    let before = stub.count();
    let logs_before = agent.logs().len();
    agent.restart();
    let (_, after) = stub.wait_for("the restarted agent's first cycle", before, LONG, |_| true).await;
    assert!(is_full(&after), "a restart begins with a full cycle");
    assert_eq!(carried(&after).map(|e| e.error_message), Some(error.error_message), "carried again, unchanged");
    // Restored in the first cycle after the restart; a new failure would say so by now.
    let seen = stub.count();
    stub.wait_for("three more cycles", seen + 3, LONG, |_| true).await;
    let logs = agent.logs();
    let failing_again =
        logs[logs_before.min(logs.len())..].lines().filter(|l| l.contains("workload is failing")).count();
    assert_eq!(failing_again, 0, "restored, not a new failure:\n{logs}");
}
