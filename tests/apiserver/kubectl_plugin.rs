//! `kubectl wsync` (#22), through kubectl itself: found by `kubectl plugin list`, and its
//! status, workspaces, errors and resync against a real agent's WorkspaceSyncStatus.

use crate::support::stub::{Reply, Script, StubControlPlane};
use crate::support::*;
use std::process::{Command, Output};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

/// A directory holding only the plugin, as an install would leave it (cargo's target
/// directory also holds `kubectl-wsync.d`, which kubectl would take for a broken plugin).
fn plugin_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::copy(env!("CARGO_BIN_EXE_kubectl-wsync"), dir.path().join("kubectl-wsync")).expect("copy the plugin");
        dir
    })
    .path()
}

/// `kubectl <args>` with the plugin's directory first on the PATH.
pub fn kubectl_with_plugin(args: &[&str]) -> Output {
    let path = format!("{}:{}", plugin_dir().display(), std::env::var("PATH").unwrap_or_default());
    Command::new("kubectl")
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", &env().admin_kubeconfig)
        .output()
        .expect("kubectl")
}

pub fn ok(args: &[&str]) -> String {
    let out = kubectl_with_plugin(args);
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_wsync_shows_status_workspaces_errors_and_runs_a_resync() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("kp");
    let ns = format!("{id}-1");
    create_workspace(&client, &ns, "ws", Some(&id)).await;
    create_workspace(&client, &ns, "broken", Some(&id)).await;
    let mut script = Script::with_intervals(300, 1);
    script.configs.insert((ns.clone(), "broken".into()), config_map(&ns, "no-inventory"));
    let stub = StubControlPlane::start(script.clone()).await;
    stub.set_responder(move |request| Reply::created(&script.respond_unacknowledged(request)));
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    eventually("the error pending in the status", LONG, || {
        let wss = wss_json(env, &id)?;
        (wss["status"]["pendingErrorCount"] == 1 && wss["status"]["acknowledged"].get(format!("{ns}/ws")).is_some())
            .then_some(())
    })
    .await;

    let plugins = ok(&["plugin", "list"]);
    assert!(plugins.contains("kubectl-wsync"), "{plugins}");

    let status = ok(&["wsync", "status", &id]);
    assert!(status.starts_with("AGENT") && status.lines().nth(1).is_some_and(|r| r.starts_with(&id)), "{status}");
    let counts: serde_json::Value = serde_json::from_str(&ok(&["wsync", "status", &id, "-o", "json"])).expect("json");
    assert_eq!(counts[0]["pendingErrors"], 1, "{counts}");
    assert_eq!(counts[0]["partialIntervalSeconds"], 1, "{counts}");
    let wide = ok(&["wsync", "status", &id, "-o", "wide", "--context", "wsync-local"]);
    assert!(wide.lines().next().is_some_and(|h| h.contains("PARTIAL") && h.contains("EPOCH")), "{wide}");

    // The deployment controller may still be writing ws's status: behind until the next cycle.
    let row = |table: &str, name: &str| {
        table.lines().find(|l| l.split_whitespace().nth(1) == Some(name)).unwrap_or_default().to_string()
    };
    let workspaces = eventually("ws in sync, as the plugin shows it", LONG, || {
        let table = ok(&["wsync", "workspaces", &id]);
        row(&table, "ws").contains("in sync").then_some(table)
    })
    .await;
    let line = |name: &str| row(&workspaces, name);
    assert!(line("broken").contains("owning-inventory"), "the pending error, with its age: {workspaces}");

    let errors: serde_json::Value = serde_json::from_str(&ok(&["wsync", "errors", &id, "-o", "json"])).expect("json");
    let errors = errors.as_array().expect("an array");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0]["workspace"], format!("{ns}/broken"));
    assert_eq!(errors[0]["errorType"], "applier");
    assert!(ok(&["wsync", "errors", "-o", "yaml"]).contains(&format!("workspace: {ns}/broken")), "every agent's");

    let resync = kubectl_with_plugin(&["wsync", "resync", &id, "--timeout", "60s"]);
    let (said, progress) = (String::from_utf8_lossy(&resync.stdout), String::from_utf8_lossy(&resync.stderr));
    assert!(resync.status.success() && said.contains("full resync done"), "{said}{progress}");
    assert!(progress.contains("requested a full resync"), "{progress}");
    assert!(
        stub.requests().iter().filter(|r| crate::support::stub::is_full(r)).count() >= 2,
        "a second full cycle ran"
    );

    // Refusals say what is wrong.
    let missing = kubectl_with_plugin(&["wsync", "status", "no-such-agent"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no WorkspaceSyncStatus \"no-such-agent\""));
    let context = kubectl_with_plugin(&["wsync", "status", "--context", "no-such-context"]);
    assert!(!context.status.success());
    assert!(String::from_utf8_lossy(&context.stderr).contains("kubeconfig"), "{context:?}");
}
