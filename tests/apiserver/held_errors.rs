//! An applier failure stays on the control plane for as long as the apply keeps failing
//! (#35): through full resyncs, the workspace's Deployment changing and a kill -9 of the
//! agent, as one error episode. It clears when an apply succeeds; a newer config that fails
//! differently replaces it. The real control plane on SQLite, the real agent, the real
//! apiserver and a kubelet stand-in.

use crate::support::system::System;
use crate::support::*;
use serde_json::Value;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(120);
/// Partial cycles watched after each event: the error must show at every poll through them.
const WATCHED_CYCLES: usize = 5;

/// A registry secret the agent does not allow: the workspace's apply fails with
/// "not an allowed source" at every attempt, while the workspace keeps Running.
async fn failing_workspace(prefix: &str, allowed: Option<&str>) -> (System, String, String) {
    let env = env();
    let registry = unique_id(&format!("{prefix}-reg"));
    kubectl_ok(env, &["create", "namespace", &registry]);
    kubectl_ok(env, &["label", "namespace", &registry, &format!("{TEST_LABEL}={registry}")]);
    registry_secret(env, &registry, "regcred", "first");
    let agent: Vec<&str> = allowed.map(|a| vec!["--image-pull-secret-source", a]).unwrap_or_default();
    let system = System::start_configured(prefix, &[], &agent).await;
    system.cli(&["create", "e1", "--image", "busybox:1.36"]);
    system.wait_actual("e1", "Running").await;
    set_pull_secrets(&system, &[&format!("{registry}/regcred")]);
    (system, registry, "e1".into())
}

fn set_pull_secrets(system: &System, secrets: &[&str]) {
    let mut args = vec!["agents", "set-image-pull-secrets", system.id.as_str()];
    for secret in secrets {
        args.extend(["--image-pull-secret", secret]);
    }
    system.control_plane.cli(&args);
}

/// Wait for the workspace to show an error containing `words`; its first-seen time.
async fn error_shown(system: &System, name: &str, words: &str) -> Value {
    eventually(&format!("{name}'s error: {words}"), LONG, || {
        let workspace = system.workspace(name);
        let message = workspace["error"]["message"].as_str()?;
        (workspace["actual_state"] == "Error" && message.contains(words))
            .then(|| workspace["error"]["first_seen"].clone())
    })
    .await
}

/// The control plane shows the same error episode at every poll through several partial
/// cycles of the agent.
async fn shown_throughout(system: &System, name: &str, first_seen: &Value, after: &str) {
    let from = system.agent.cycles("partial");
    let deadline = Instant::now() + LONG;
    let mut polls = 0;
    while system.agent.cycles("partial") < from + WATCHED_CYCLES {
        let workspace = system.workspace(name);
        assert_eq!(workspace["actual_state"], "Error", "after {after}, poll {polls}: {workspace}");
        assert_eq!(&workspace["error"]["first_seen"], first_seen, "after {after}, one episode: {workspace}");
        polls += 1;
        assert!(Instant::now() < deadline, "after {after}: the agent ran too few cycles");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(polls >= WATCHED_CYCLES, "after {after}: polled {polls} times");
}

async fn full_resync(system: &System, request: &str) {
    let fulls = system.agent.cycles("full");
    let wss = format!("wss/{}", system.id);
    let annotation = format!("wsync.dev/resync-requested={request}");
    kubectl_ok(env(), &["-n", AGENT_NAMESPACE, "annotate", &wss, &annotation, "--overwrite"]);
    eventually("the requested full cycle", LONG, || (system.agent.cycles("full") > fulls).then_some(())).await;
}

/// The rows of the workspace's error history (the page's "Earlier errors").
fn history_rows(system: &System, name: &str) -> i64 {
    let path = system.database.strip_prefix("sqlite://").expect("a SQLite database");
    let db = rusqlite::Connection::open(path).expect("open the control plane's database");
    let query = "SELECT count(*) FROM workspace_errors WHERE agent_id = ?1 AND name = ?2";
    db.query_row(query, rusqlite::params![system.id, name], |row| row.get(0)).expect("count the history")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_apply_stays_an_error_through_full_resyncs_deployment_changes_and_restarts() {
    let env = env();
    let (mut system, registry, name) = failing_workspace("held", None).await;
    let first_seen = error_shown(&system, &name, "not an allowed source").await;
    eventually("the error acknowledged, as it holds", LONG, || {
        let status = &wss_json(env, &system.id)?["status"];
        (status["pendingErrorCount"] == 0 && status["errorCount"] == 1).then_some(())
    })
    .await;
    let wss = wss_json(env, &system.id).expect("wss");
    assert_eq!(wss["status"]["pendingErrors"][0]["acknowledged"], true, "kept in the status: {wss}");

    full_resync(&system, "held-1").await;
    shown_throughout(&system, &name, &first_seen, "a full resync").await;

    let namespace = system.workspace(&name)["namespace"].as_str().expect("namespace").to_string();
    kubectl_ok(env, &["-n", &namespace, "annotate", "deployment", &name, "example.com/poked=1"]);
    let version = |text: Option<&str>| text.and_then(|v| v.parse::<u64>().ok());
    let poked = get_field(env, &namespace, &format!("deployment/{name}"), "{.metadata.resourceVersion}");
    let poked = version(poked.as_deref()).expect("the Deployment's resourceVersion");
    eventually("the changed Deployment reported", LONG, || {
        let acknowledged = &wss_json(env, &system.id)?["status"]["acknowledged"][format!("{namespace}/{name}")];
        (version(acknowledged.as_str())? >= poked).then_some(())
    })
    .await;
    shown_throughout(&system, &name, &first_seen, "the Deployment changed").await;

    system.agent.restart();
    let restored = wss_json(env, &system.id).expect("wss");
    assert_eq!(restored["status"]["errorCount"], 1, "the status holds it before any retry: {restored}");
    eventually("the restarted agent's first full cycle", LONG, || (system.agent.cycles("full") > 0).then_some(()))
        .await;
    shown_throughout(&system, &name, &first_seen, "a kill -9 of the agent").await;
    full_resync(&system, "held-2").await;
    shown_throughout(&system, &name, &first_seen, "a second full resync").await;
    assert_eq!(history_rows(&system, &name), 1, "one error episode in the history");

    // Fixed: the error clears at the agent's next report.
    set_pull_secrets(&system, &[]);
    system.wait_actual(&name, "Running").await;
    let workspace = system.workspace(&name);
    assert!(workspace["error"].is_null(), "{workspace}");
    eventually("nothing left in the status", LONG, || {
        (wss_json(env, &system.id)?["status"]["errorCount"] == 0).then_some(())
    })
    .await;
    kubectl_ok(env, &["delete", "namespace", &registry, "--wait=false"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_newer_config_that_fails_differently_replaces_the_error_and_one_that_applies_clears_it() {
    let env = env();
    let missing = unique_id("held-missing");
    let allowed = format!("{missing}/regcred");
    let (system, registry, name) = failing_workspace("held2", Some(&allowed)).await;
    let refused = error_shown(&system, &name, "not an allowed source").await;
    full_resync(&system, "replace-1").await;
    shown_throughout(&system, &name, &refused, "a full resync").await;

    // Allowed, but missing: another failure, a new episode.
    set_pull_secrets(&system, &[&allowed]);
    let missing_since = error_shown(&system, &name, "does not exist").await;
    assert_ne!(missing_since, refused, "a new error starts a new episode");
    full_resync(&system, "replace-2").await;
    shown_throughout(&system, &name, &missing_since, "a full resync").await;
    assert_eq!(history_rows(&system, &name), 2, "two episodes");

    // A config that applies clears it.
    set_pull_secrets(&system, &[]);
    system.wait_actual(&name, "Running").await;
    full_resync(&system, "replace-3").await;
    let workspace = system.workspace(&name);
    assert_eq!(workspace["actual_state"], "Running", "{workspace}");
    assert!(workspace["error"].is_null(), "{workspace}");
    kubectl_ok(env, &["delete", "namespace", &registry, "--wait=false"]);
}
