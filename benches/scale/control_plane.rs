//! Control-plane throughput: reconcile requests per second with 50 infos each, over HTTP to
//! the real router, on SQLite and on PostgreSQL.

use crate::Options;
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wsync::control_plane::api::{AdminCredential, AppState, router};
use wsync::control_plane::model::{NewWorkspace, workspace_namespace};
use wsync::control_plane::pipeline::PipelineConfig;
use wsync::control_plane::rules::Lifecycle;
use wsync::control_plane::store::Store;
use wsync::protocol::{RECONCILE_PATH, Settings};

const INFOS: usize = 50;
const CLIENTS: usize = 8;

/// A Running workspace's Deployment, as the agent reports it.
fn deployment_info(namespace: &str, name: &str, rv: u64) -> serde_json::Value {
    json!({
        "metadata": { "name": name, "namespace": namespace, "resourceVersion": rv.to_string(), "generation": 1,
                      "labels": { "agent.gitlab.com/id": "bench" } },
        "spec": { "replicas": 1 },
        "status": {
            "availableReplicas": 1, "readyReplicas": 1, "replicas": 1, "updatedReplicas": 1,
            "conditions": [
                { "type": "Available", "status": "True", "reason": "MinimumReplicasAvailable" },
                { "type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable" },
            ],
        },
    })
}

async fn requests_per_second(database_url: &str, seconds: u64) -> Result<f64, String> {
    let _logs = tracing_subscriber::fmt().with_env_filter("warn").try_init();
    let store = Store::connect(database_url).await.map_err(|e| e.to_string())?;
    let token = store.create_agent("bench", &[]).await.map_err(|e| e.to_string())?;
    let names: Vec<String> = (0..INFOS).map(|i| format!("ws-{i}")).collect();
    for name in &names {
        let new = NewWorkspace::new(name.as_str(), "busybox:1.36");
        store.create_workspace("bench", &new).await.map_err(|e| e.to_string())?;
    }
    let pipeline = PipelineConfig {
        settings: Settings { full_reconciliation_interval_seconds: 3600, partial_reconciliation_interval_seconds: 10 },
        lifecycle: Lifecycle { max_running_ms: i64::MAX, max_stopped_ms: i64::MAX, max_terminated_percent: 100 },
        label_key: "agent.gitlab.com/id".into(),
    };
    let state = Arc::new(AppState::new(store, pipeline, AdminCredential::token("bench")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let url = format!("http://{}{RECONCILE_PATH}", listener.local_addr().map_err(|e| e.to_string())?);
    let server = tokio::spawn(async move { axum::serve(listener, router(state)).await.ok() });
    let http = reqwest::Client::new();
    // Every request reports all 50 with a new resourceVersion, so each one persists 50 rows.
    // The body is rendered once and the version substituted: the client's share of the two
    // cores should stay small next to the server's.
    let template = {
        let infos: Vec<_> = names
            .iter()
            .map(|name| {
                let namespace = workspace_namespace("bench", name);
                json!({ "name": name, "namespace": namespace,
                        "latest_k8s_deployment_info": deployment_info(&namespace, name, 0) })
            })
            .collect();
        json!({ "update_type": "partial", "workspace_agent_infos": infos }).to_string()
    };
    let body = |round: u64| template.replace("\"resourceVersion\":\"0\"", &format!("\"resourceVersion\":\"{round}\""));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let counts = futures::stream::iter(0..CLIENTS)
        .map(|client| {
            let (http, url, token) = (http.clone(), url.clone(), token.clone());
            let body = &body;
            async move {
                let mut done = 0u64;
                while Instant::now() < deadline {
                    let response = http.post(&url).bearer_auth(&token).header("content-type", "application/json");
                    let response = response.body(body(done * CLIENTS as u64 + client as u64 + 1)).send().await;
                    match response {
                        Ok(r) if r.status().as_u16() == 201 => done += 1,
                        Ok(r) => {
                            return Err(format!("answered {}: {}", r.status(), r.text().await.unwrap_or_default()));
                        }
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Ok(done)
            }
        })
        .buffer_unordered(CLIENTS)
        .collect::<Vec<_>>()
        .await;
    server.abort();
    let total: u64 = counts.into_iter().sum::<Result<u64, String>>()?;
    Ok(total as f64 / started.elapsed().as_secs_f64())
}

async fn fresh_postgres_database() -> Option<String> {
    let admin = std::env::var("WSYNC_TEST_POSTGRES_URL").ok()?;
    sqlx::any::install_default_drivers();
    let database = format!("bench_{}", std::process::id());
    let pool = sqlx::AnyPool::connect(&admin).await.ok()?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {database}")).execute(&pool).await.ok()?;
    sqlx::query(&format!("CREATE DATABASE {database}")).execute(&pool).await.ok()?;
    admin.rsplit_once('/').map(|(base, _)| format!("{base}/{database}"))
}

pub async fn print_throughput(options: &Options) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = format!("sqlite://{}/bench.db", dir.path().display());
    println!("| control plane: reconcile requests/s, {INFOS} infos each, {CLIENTS} clients | target | result |");
    println!("|---|---|---|");
    match requests_per_second(&sqlite, options.throughput_seconds).await {
        Ok(rate) => println!("| SQLite | ≥ 2000 | **{rate:.0}** |"),
        Err(e) => panic!("SQLite throughput run failed: {e}"),
    }
    match fresh_postgres_database().await {
        Some(url) => match requests_per_second(&url, options.throughput_seconds).await {
            Ok(rate) => println!("| PostgreSQL | | **{rate:.0}** |"),
            Err(e) => panic!("PostgreSQL throughput run failed: {e}"),
        },
        None => println!("| PostgreSQL | | not run: set WSYNC_TEST_POSTGRES_URL (hack/local-postgres.sh env) |"),
    }
    println!();
}
