//! Agent + control plane + real apiserver, end to end: the real `wsync control-plane` on
//! SQLite, the real `wsync agent`, kube-controller-manager, and a kubelet stand-in.

use crate::support::system::System;
use crate::support::*;
use serde_json::Value;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_lives_from_creation_to_termination() {
    let env = env();
    let system = System::start("e2e").await;
    system.cli(&["create", "alice", "--image", "busybox:1.36", "--cpu", "100m", "--memory", "64Mi"]);
    let workspace = system.wait_actual("alice", "Running").await;
    let namespace = workspace["namespace"].as_str().expect("namespace").to_string();
    let replicas = kubectl_ok(
        env,
        &["-n", &namespace, "get", "deployment", "alice", "-o", "jsonpath={.status.availableReplicas}"],
    );
    assert_eq!(replicas, "1", "the real deployment controller reports the pod available");

    system.cli(&["stop", "alice"]);
    system.wait_actual("alice", "Stopped").await;

    system.cli(&["restart", "alice"]);
    eventually("the restart to flip desired back to Running", LONG, || {
        (system.workspace("alice")["desired_state"] == "Running").then_some(())
    })
    .await;
    system.wait_actual("alice", "Running").await;

    let table = system.cli(&["list"]);
    assert!(table.lines().next().unwrap_or_default().starts_with("NAME"), "{table}");
    assert!(table.contains("alice") && table.contains("Running"), "{table}");

    system.cli(&["terminate", "alice"]);
    system.wait_actual("alice", "Terminated").await;
    eventually("the namespace really gone", LONG, || {
        (!kubectl(env, &["get", "namespace", &namespace]).status.success()).then_some(())
    })
    .await;
    let wss = wss_json(env, &system.id).expect("wss");
    assert_eq!(wss["status"]["pendingErrorCount"], 0, "{wss}");
    drop(system.agent);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejected_config_shows_the_apiservers_message_and_survives_a_restart() {
    // Default requests above the limits, which only the apiserver checks: a workspace that
    // names no resources of its own gets a 422 for its Deployment.
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = dir.path().join("settings.yaml");
    std::fs::write(
        &settings,
        "default_resources_per_workspace_container: {requests: {cpu: '2'}, limits: {cpu: '1'}}\n",
    )
    .expect("settings");
    let system = System::start_with("e2e-err", &["--config", path_str(&settings)]).await;
    system.cli(&["create", "bob", "--image", "busybox:1.36"]);
    system.cli(&["create", "carol", "--image", "busybox:1.36", "--cpu", "100m"]);
    let broken = system.wait_actual("bob", "Error").await;
    let message = broken["error"]["message"].as_str().expect("an error message").to_string();
    let said = "must be less than or equal to cpu limit";
    assert!(message.contains("Invalid value") && message.contains(said), "the apiserver's words: {message}");
    assert_eq!(broken["error"]["error_type"], "applier");
    system.wait_actual("carol", "Running").await;
    let table = system.cli(&["list"]);
    assert!(table.contains("applier error:") && table.contains("cpu limit"), "{table}");

    // What a person sees on the page, rendered by a real browser, signed in.
    let mut browser = browser::Browser::launch();
    let agent_page = format!("/agents/{}", system.id);
    browser.sign_in_to(&system.control_plane.url, &system.control_plane.admin_token, &agent_page);
    let page = browser.html();
    assert!(page.contains("Workspaces of agent"), "{page}");
    assert!(page.contains("bob") && page.contains("carol"), "{page}");
    assert!(page.contains("must be less than or equal to cpu limit"), "the error message in full: {page}");
    for button in ["Start", "Stop", "Restart", "Terminate"] {
        assert!(page.contains(&format!(">{button}</button>")), "{button} button: {page}");
    }

    // A control-plane restart on the same SQLite file loses nothing.
    let before = system.cli(&["list", "-o", "json"]);
    let mut system = system;
    system.control_plane.restart();
    let after = system.cli(&["list", "-o", "json"]);
    let strip = |text: &str| -> Vec<(Value, Value, Value, Value)> {
        let list: Vec<Value> = serde_json::from_str(text).expect("json");
        list.iter()
            .map(|w| {
                (w["name"].clone(), w["desired_state"].clone(), w["error"]["message"].clone(), w["created_at"].clone())
            })
            .collect()
    };
    assert_eq!(strip(&before), strip(&after));
    // And the agent keeps syncing with it: Stop, pressed in the browser, reaches the cluster,
    // and the page shows it.
    browser.goto(&format!("{}{agent_page}", system.control_plane.url));
    browser
        .act(&format!("document.querySelector('form[action=\"{agent_page}/workspaces/carol/stop\"] button').click()"));
    system.wait_actual("carol", "Stopped").await;
    browser.wait_until(
        "the page shows carol Stopped",
        "[...document.querySelectorAll('tbody tr')].some(r => r.cells.length > 3 && r.cells[0].innerText === 'carol' \
         && r.cells[3].innerText === 'Stopped')",
    );
}

/// The control plane serves TLS with a throw-away CA; the agent trusts it with
/// `--control-plane-ca-file` and syncs over it.
#[tokio::test(flavor = "multi_thread")]
async fn the_agent_syncs_over_tls() {
    let system = System::start_over_tls("e2e-tls").await;
    assert!(system.control_plane.url.starts_with("https://"));
    system.cli(&["create", "dora", "--image", "busybox:1.36"]);
    system.wait_actual("dora", "Running").await;
    system.cli(&["stop", "dora"]);
    system.wait_actual("dora", "Stopped").await;
}
