//! Two `wsync control-plane` processes on one PostgreSQL (#23): an agent's reconciles go
//! through both at once while the operator stops workspaces through both. A reconcile writes
//! back every row it touched; one that read a row before a Stop committed must not write it
//! back over the Stop. Every Stop survives, and both processes show the same rows.

use crate::http;
use crate::support::ControlPlaneProcess;
use crate::support::postgres::{EXCLUSIVE, fresh_database};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use wsync::protocol::RECONCILE_PATH;

const WORKSPACES: usize = 12;

fn report(names: &[String], round: usize) -> String {
    let infos: Vec<Value> = names
        .iter()
        .map(|name| {
            let namespace = wsync::control_plane::model::workspace_namespace("two", name);
            json!({"name": name, "namespace": namespace, "latest_k8s_deployment_info": {
                "metadata": {"name": name, "namespace": namespace, "resourceVersion": round.to_string(), "generation": 1},
                "spec": {"replicas": 1},
                "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
                    "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                                   {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}}})
        })
        .collect();
    json!({"update_type": "partial", "workspace_agent_infos": infos}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_control_planes_on_one_postgres_lose_no_stop() {
    let _shared = EXCLUSIVE.lock().await;
    let database = fresh_database("two_processes").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let first = ControlPlaneProcess::start(&database, dir.path().join("first.log"), &[]);
    let second = ControlPlaneProcess::start(&database, dir.path().join("second.log"), &[]);
    let registered: Value =
        serde_json::from_str(&first.cli(&["agents", "register", "two", "-o", "json"])).expect("json");
    let token = registered["token"].as_str().expect("a token").to_string();
    let names: Vec<String> = (0..WORKSPACES).map(|i| format!("ws-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        let through = if i % 2 == 0 { &first } else { &second };
        through.cli(&["workspaces", "--agent", "two", "create", name, "--image", "busybox:1.36"]);
    }

    // The agent's reconciles, through both processes at once, until the Stops are done.
    let stopping = Arc::new(AtomicBool::new(true));
    let rounds = Arc::new(AtomicUsize::new(1));
    let mut loops = Vec::new();
    for url in [first.url.clone(), second.url.clone()] {
        let (stopping, rounds, names, token) = (stopping.clone(), rounds.clone(), names.clone(), token.clone());
        loops.push(tokio::spawn(async move {
            let mut done = 0;
            while stopping.load(Ordering::Relaxed) || done < 3 {
                let round = rounds.fetch_add(1, Ordering::Relaxed);
                let answer = http()
                    .post(format!("{url}{RECONCILE_PATH}"))
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .body(report(&names, round))
                    .send()
                    .await
                    .expect("the control plane answers");
                assert_eq!(answer.status().as_u16(), 201, "{}", answer.text().await.unwrap_or_default());
                done += 1;
            }
            done
        }));
    }
    let stops = {
        let (first_url, second_url) = (first.url.clone(), second.url.clone());
        let (first_token, second_token) = (first.admin_token.clone(), second.admin_token.clone());
        let names = names.clone();
        tokio::task::spawn_blocking(move || {
            for (i, name) in names.iter().enumerate() {
                let (url, admin) = if i % 2 == 0 { (&first_url, &first_token) } else { (&second_url, &second_token) };
                let out = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
                    .args(["workspaces", "--agent", "two", "stop", name])
                    .env("WSYNC_SERVER", url)
                    .env("WSYNC_ADMIN_TOKEN", admin)
                    .output()
                    .expect("wsync");
                assert!(out.status.success(), "stop {name}: {}", String::from_utf8_lossy(&out.stderr));
            }
        })
    };
    stops.await.expect("the stops");
    stopping.store(false, Ordering::Relaxed);
    let mut reconciles = 0;
    for task in loops {
        reconciles += task.await.expect("a reconcile loop");
    }
    eprintln!("{reconciles} reconciles through two processes while {WORKSPACES} workspaces were stopped");

    for process in [&first, &second] {
        let listed: Value =
            serde_json::from_str(&process.cli(&["workspaces", "--agent", "two", "list", "-o", "json"])).expect("json");
        let rows = listed.as_array().expect("a list");
        assert_eq!(rows.len(), WORKSPACES);
        for row in rows {
            assert_eq!(row["desired_state"], "Stopped", "a Stop was lost: {row}");
        }
    }
}

/// No process keeps what another may change: what the operator does to an agent through one
/// holds at once in the other, which the agent has been reconciling through. A new pull secret
/// is in the next answer; a rotated-out token past its grace and a revoked agent are refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_refused_through_one_process_is_refused_by_the_other() {
    let _shared = EXCLUSIVE.lock().await;
    let database = fresh_database("token_checked_again").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let operator = ControlPlaneProcess::start(&database, dir.path().join("operator.log"), &[]);
    let serving = ControlPlaneProcess::start(&database, dir.path().join("serving.log"), &[]);
    let token_of = |answer: String| -> String {
        let answer: Value = serde_json::from_str(&answer).expect("json");
        answer["token"].as_str().expect("a token").to_string()
    };
    let old = token_of(operator.cli(&["agents", "register", "checked", "-o", "json"]));
    operator.cli(&["workspaces", "--agent", "checked", "create", "ws", "--image", "busybox:1.36"]);
    let reconcile = |token: &str| {
        let request = http()
            .post(format!("{}{RECONCILE_PATH}", serving.url))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(r#"{"update_type": "full", "workspace_agent_infos": []}"#);
        async move {
            let answer = request.send().await.expect("an answer");
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.unwrap_or_default())
        }
    };
    assert_eq!(reconcile(&old).await.0, 201);

    operator.cli(&["agents", "set-image-pull-secrets", "checked", "--image-pull-secret", "registry/newcred"]);
    let (status, answer) = reconcile(&old).await;
    assert_eq!(status, 201);
    assert_eq!(
        answer["workspace_rails_infos"][0]["image_pull_secrets"],
        json!([{"name": "newcred", "namespace": "registry"}]),
        "the pull secrets as the operator set them, not as they were when the token was accepted"
    );

    let new = token_of(operator.cli(&["agents", "rotate-token", "checked", "--grace", "1s", "-o", "json"]));
    assert_eq!(reconcile(&old).await.0, 201, "within the grace period");
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(reconcile(&old).await.0, 401, "the grace period is over");
    assert_eq!(reconcile(&new).await.0, 201);

    operator.cli(&["agents", "revoke", "checked"]);
    assert_eq!(reconcile(&new).await.0, 401, "revoked through the other process");
}
