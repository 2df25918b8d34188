//! Control-plane throughput: reconcile requests per second with 50 infos each, over HTTP to
//! the real router, on SQLite and on PostgreSQL (one process, and two on one database), each
//! beside its floor: the same rows read and written by a minimal client, in the same run.

use crate::Options;
use crate::cpu::{Spent, Throughput};
use futures::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use wsync::control_plane::decisions::pipeline::PipelineConfig;
use wsync::control_plane::decisions::rules::Lifecycle;
use wsync::control_plane::http::{AdminCredential, AppState, router};
use wsync::control_plane::model::{NewWorkspace, workspace_namespace};
use wsync::control_plane::store::rows::SELECT_COLUMNS;
use wsync::control_plane::store::{Store, pool_options};
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

/// The bench's database: its agents (one client each, as agents send one cycle at a time),
/// their tokens, and the names of each one's workspaces.
struct Fleet {
    tokens: Vec<String>,
    names: Vec<String>,
}

fn agent_id(client: usize) -> String {
    format!("bench-{client}")
}

async fn fleet(database_url: &str) -> Result<Fleet, String> {
    let store = Store::connect(database_url).await.map_err(|e| e.to_string())?;
    let names: Vec<String> = (0..INFOS).map(|i| format!("ws-{i}")).collect();
    let mut tokens = Vec::new();
    for client in 0..CLIENTS {
        let id = agent_id(client);
        tokens.push(store.create_agent(&id, &[]).await.map_err(|e| e.to_string())?);
        for name in &names {
            let new = NewWorkspace::new(name.as_str(), "busybox:1.36");
            store.create_workspace(&id, &new).await.map_err(|e| e.to_string())?;
        }
    }
    Ok(Fleet { tokens, names })
}

/// One control plane (the real router on its own store and pool) on `database_url`; its URL.
async fn serve(database_url: &str) -> Result<(String, tokio::task::JoinHandle<()>), String> {
    let store = Store::connect(database_url).await.map_err(|e| e.to_string())?;
    let pipeline = PipelineConfig {
        settings: Settings { full_reconciliation_interval_seconds: 3600, partial_reconciliation_interval_seconds: 10 },
        lifecycle: Lifecycle { max_running_ms: i64::MAX, max_stopped_ms: i64::MAX, max_terminated_percent: 100 },
        label_key: "agent.gitlab.com/id".into(),
    };
    let state = Arc::new(AppState::new(store, pipeline, AdminCredential::token("bench")));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(|e| e.to_string())?;
    let url = format!("http://{}{RECONCILE_PATH}", listener.local_addr().map_err(|e| e.to_string())?);
    let server = tokio::spawn(async move {
        axum::serve(listener, router(state, std::time::Duration::from_secs(60))).await.ok();
    });
    Ok((url, server))
}

/// Rounds per second of [`CLIENTS`] clients side by side, each running `round(client, done)`
/// again and again for `seconds`.
async fn rounds_per_second<F, R>(seconds: u64, round: F) -> Result<Throughput, String>
where
    F: Fn(usize, u64) -> R,
    R: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (started, spent) = (Instant::now(), Spent::now());
    let round = &round;
    let counts = futures::stream::iter(0..CLIENTS)
        .map(|client| async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                round(client, done).await?;
                done += 1;
            }
            Ok::<u64, String>(done)
        })
        .buffer_unordered(CLIENTS)
        .collect::<Vec<_>>()
        .await;
    let total: u64 = counts.into_iter().sum::<Result<u64, String>>()?;
    Ok(Throughput::of(total, started.elapsed(), Spent::now().since(spent)))
}

/// Reconciles per second through `servers` control planes on one database, the clients
/// spread over them.
async fn requests_per_second(
    fleet: &Fleet,
    database_url: &str,
    servers: usize,
    seconds: u64,
) -> Result<Throughput, String> {
    let _logs = tracing_subscriber::fmt().with_env_filter("warn").try_init();
    let mut urls = Vec::new();
    let mut running = Vec::new();
    for _ in 0..servers.max(1) {
        let (url, server) = serve(database_url).await?;
        urls.push(url);
        running.push(server);
    }
    let http = reqwest::Client::new();
    // Every request reports all 50 with a new resourceVersion, so each one persists 50 rows.
    // The body is rendered once per agent and the version substituted: the client's share of
    // the two cores should stay small next to the server's.
    let template = |client: usize| {
        let id = agent_id(client);
        let infos: Vec<_> = fleet
            .names
            .iter()
            .map(|name| {
                let namespace = workspace_namespace(&id, name);
                json!({ "name": name, "namespace": namespace,
                        "latest_k8s_deployment_info": deployment_info(&namespace, name, 0) })
            })
            .collect();
        json!({ "update_type": "partial", "workspace_agent_infos": infos }).to_string()
    };
    let templates: Vec<String> = (0..CLIENTS).map(template).collect();
    let rate = rounds_per_second(seconds, |client, done| {
        let (http, url, token) = (&http, &urls[client % urls.len()], &fleet.tokens[client]);
        let round = format!("\"resourceVersion\":\"{}\"", done + 1);
        let body = templates[client].replace("\"resourceVersion\":\"0\"", &round);
        async move {
            let request = http.post(url).bearer_auth(token).header("content-type", "application/json");
            match request.body(body).send().await {
                Ok(r) if r.status().as_u16() == 201 => Ok(()),
                Ok(r) => Err(format!("answered {}: {}", r.status(), r.text().await.unwrap_or_default())),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await;
    running.iter().for_each(|server| server.abort());
    rate
}

/// The floor: the same rows read and written by a minimal client, none of the pipeline's
/// logic and no HTTP: per request one SELECT of the agent's 50 rows and one statement writing
/// their reported version, with the same clients on the same database.
async fn floor_per_second(database_url: &str, postgres: bool, seconds: u64) -> Result<Throughput, String> {
    sqlx::any::install_default_drivers();
    // Connected as the store connects.
    let pool = pool_options(!postgres).connect(database_url).await.map_err(|e| e.to_string())?;
    let select = format!("SELECT {} FROM workspaces WHERE agent_id = $1", *SELECT_COLUMNS);
    let write = if postgres {
        "UPDATE workspaces SET deployment_resource_version = v.rv, last_reported_at = v.at \
         FROM jsonb_to_recordset(CAST($1 AS jsonb)) AS v(agent_id TEXT, name TEXT, rv TEXT, at BIGINT) \
         WHERE workspaces.agent_id = v.agent_id AND workspaces.name = v.name"
    } else {
        "UPDATE workspaces SET deployment_resource_version = $1, last_reported_at = $2 WHERE agent_id = $3"
    };
    rounds_per_second(seconds, |client, done| {
        let (pool, select, id) = (&pool, &select, agent_id(client));
        async move {
            let rows = sqlx::query(select).bind(&id).fetch_all(pool).await.map_err(|e| e.to_string())?;
            let rv = (done + 1).to_string();
            let written = if postgres {
                let rows: Vec<_> = (0..rows.len())
                    .map(|i| json!({"agent_id": id, "name": format!("ws-{i}"), "rv": rv, "at": done}))
                    .collect();
                sqlx::query(write).bind(serde_json::to_string(&rows).map_err(|e| e.to_string())?)
            } else {
                sqlx::query(write).bind(rv).bind(done as i64).bind(id.clone())
            };
            written.execute(pool).await.map_err(|e| e.to_string())?;
            Ok(())
        }
    })
    .await
}

/// The floor again through sqlx's own PostgreSQL driver instead of `Any`: rows decoded lazily
/// and typed, the written rows bound as arrays (binary) instead of one JSON text. What leaving
/// the `Any` driver would buy the store, measured beside the floor the store has now.
async fn typed_floor_per_second(database_url: &str, seconds: u64) -> Result<Throughput, String> {
    use sqlx::{Column, Row, TypeInfo};
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(CLIENTS as u32)
        .connect(database_url)
        .await
        .map_err(|e| e.to_string())?;
    let select = format!("SELECT {} FROM workspaces WHERE agent_id = $1", *SELECT_COLUMNS);
    let write = "UPDATE workspaces SET deployment_resource_version = v.rv, last_reported_at = v.at \
                 FROM unnest($2::text[], $3::text[], $4::bigint[]) AS v(name, rv, at) \
                 WHERE workspaces.agent_id = $1 AND workspaces.name = v.name";
    rounds_per_second(seconds, |client, done| {
        let (pool, select, id) = (&pool, &select, agent_id(client));
        async move {
            let rows = sqlx::query(select).bind(&id).fetch_all(pool).await.map_err(|e| e.to_string())?;
            // Every value decoded, as the store decodes them.
            let mut names = Vec::with_capacity(rows.len());
            for row in &rows {
                for (i, column) in row.columns().iter().enumerate() {
                    if column.type_info().name() == "INT8" {
                        row.try_get::<Option<i64>, _>(i).map_err(|e| e.to_string())?;
                    } else {
                        row.try_get::<Option<String>, _>(i).map_err(|e| e.to_string())?;
                    }
                }
                names.push(row.try_get::<String, _>("name").map_err(|e| e.to_string())?);
            }
            let versions = vec![(done + 1).to_string(); names.len()];
            let at = vec![done as i64; names.len()];
            let written = sqlx::query(write).bind(&id).bind(&names).bind(&versions).bind(&at);
            written.execute(pool).await.map_err(|e| e.to_string())?;
            Ok(())
        }
    })
    .await
}

/// The PostgreSQL server's own ceiling on this machine: pgbench (C, no logic, one client per
/// agent) running the floor's two statements, the written rows generated in SQL. What a
/// control plane in front of PostgreSQL can reach at most, beside what SQLite's whole pipeline
/// reaches in the same run. None when pgbench is not installed.
async fn server_alone_per_second(database_url: &str, seconds: u64) -> Result<Option<Throughput>, String> {
    let script = format!(
        "SELECT {} FROM workspaces WHERE agent_id = 'bench-' || :client_id;\n\
         UPDATE workspaces SET deployment_resource_version = v.rv, last_reported_at = v.at \
         FROM (SELECT 'ws-' || i AS name, (random() * 1e9)::bigint::text AS rv, 1::bigint AS at \
         FROM generate_series(0, {}) AS i) AS v \
         WHERE workspaces.agent_id = 'bench-' || :client_id AND workspaces.name = v.name;\n",
        *SELECT_COLUMNS,
        INFOS - 1,
    );
    let file = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    std::fs::write(file.path(), script).map_err(|e| e.to_string())?;
    let (started, spent) = (Instant::now(), Spent::now());
    let mut pgbench = std::process::Command::new("pgbench");
    pgbench.args(["-n", "-M", "prepared", "-c", &CLIENTS.to_string(), "-j", "2", "-T", &seconds.to_string(), "-f"]);
    pgbench.arg(file.path()).arg(database_url);
    let output = match tokio::task::spawn_blocking(move || pgbench.output()).await.map_err(|e| e.to_string())? {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let said = String::from_utf8_lossy(&output.stdout);
    let tps: Option<f64> =
        said.lines().find_map(|line| line.strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok());
    let transactions: Option<u64> = said.lines().find_map(|line| {
        line.strip_prefix("number of transactions actually processed: ")?.split('/').next()?.trim().parse().ok()
    });
    // pgbench's own CPU is not this process's: only the server's counts.
    let spent = Spent { process: Duration::ZERO, ..Spent::now().since(spent) };
    match (tps, transactions) {
        (Some(tps), Some(n)) => Ok(Some(Throughput { per_second: tps, ..Throughput::of(n, started.elapsed(), spent) })),
        _ => Err(format!("pgbench: {said}{}", String::from_utf8_lossy(&output.stderr))),
    }
}

/// A database of its own for one row; dropped by `drop_postgres_databases` after the table.
async fn fresh_postgres_database(name: &str) -> Option<String> {
    let admin = std::env::var("WSYNC_TEST_POSTGRES_URL").ok()?;
    sqlx::any::install_default_drivers();
    let database = format!("bench_{name}_{}", std::process::id());
    let pool = sqlx::AnyPool::connect(&admin).await.ok()?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS {database}")).execute(&pool).await.ok()?;
    sqlx::query(&format!("CREATE DATABASE {database}")).execute(&pool).await.ok()?;
    admin.rsplit_once('/').map(|(base, _)| format!("{base}/{database}"))
}

/// FORCE: the aborted servers' pools may still hold connections.
async fn drop_postgres_databases(urls: &[&str]) {
    let Ok(admin) = std::env::var("WSYNC_TEST_POSTGRES_URL") else { return };
    let Ok(pool) = sqlx::AnyPool::connect(&admin).await else { return };
    for database in urls.iter().filter_map(|url| url.rsplit_once('/').map(|(_, name)| name)) {
        if let Err(e) = sqlx::query(&format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)")).execute(&pool).await {
            eprintln!("could not drop the bench's database {database}: {e}");
        }
    }
}

/// The control plane's rate and its floor's on one database, each the median of `rounds`
/// runs that alternate which goes first. On PostgreSQL the table is vacuumed before each run,
/// so that neither side inherits the other's dead rows.
async fn side_by_side(
    database_url: &str,
    servers: usize,
    seconds: u64,
    rounds: usize,
) -> Result<(Throughput, Throughput), String> {
    let postgres = database_url.starts_with("postgres");
    let fleet = fleet(database_url).await?;
    let (mut rates, mut floors) = (Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        for floor_turn in [round % 2 == 1, round % 2 == 0] {
            if postgres {
                vacuum(database_url).await?;
            }
            if floor_turn {
                floors.push(floor_per_second(database_url, postgres, seconds).await?);
            } else {
                rates.push(requests_per_second(&fleet, database_url, servers, seconds).await?);
            }
        }
    }
    Ok((Throughput::median(&rates), Throughput::median(&floors)))
}

/// So that no run inherits the one before's dead rows.
async fn vacuum(postgres_url: &str) -> Result<(), String> {
    let pool = sqlx::AnyPool::connect(postgres_url).await.map_err(|e| e.to_string())?;
    sqlx::query("VACUUM ANALYZE workspaces").execute(&pool).await.map_err(|e| e.to_string())?;
    pool.close().await;
    Ok(())
}

pub async fn print_throughput(options: &Options) {
    let (seconds, rounds) = (options.throughput_seconds, options.throughput_rounds);
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = format!("sqlite://{}/bench.db", dir.path().display());
    let heading = format!("control plane: reconciles/s, {INFOS} infos each, {CLIENTS} agents (one client each)");
    println!("| {heading} | target | reconciles/s | floor/s | ÷ floor (target ≥ 0.7) |");
    println!("|---|---|---|---|---|");
    let mut costs: Vec<(&str, Throughput)> = Vec::new();
    let mut row = |what: &'static str, floor_what: &'static str, (rate, floor): (Throughput, Throughput)| {
        let (per_second, floor_rate) = (rate.per_second, floor.per_second);
        println!("| {what} | | **{per_second:.0}** | {floor_rate:.0} | {:.2} |", per_second / floor_rate);
        costs.extend([(what, rate), (floor_what, floor)]);
        per_second
    };
    let sqlite_runs = side_by_side(&sqlite, 1, seconds, rounds).await.expect("the SQLite runs");
    let sqlite_rate = row("SQLite", "SQLite, its floor", sqlite_runs);
    let Some(one) = fresh_postgres_database("one").await else {
        println!("| PostgreSQL | | not run: set WSYNC_TEST_POSTGRES_URL (hack/local-postgres.sh env) | | |\n");
        return;
    };
    let one_runs = side_by_side(&one, 1, seconds, rounds).await.expect("the PostgreSQL runs");
    let one_rate = row("PostgreSQL, one process", "PostgreSQL, its floor", one_runs);
    vacuum(&one).await.expect("vacuum");
    let typed = typed_floor_per_second(&one, seconds).await.expect("the typed floor");
    println!("| PostgreSQL floor through sqlx's own driver, not `Any` | | {:.0} | | |", typed.per_second);
    vacuum(&one).await.expect("vacuum");
    let alone = server_alone_per_second(&one, seconds).await.expect("pgbench");
    match alone {
        Some(alone) => {
            println!("| PostgreSQL server alone (pgbench, the floor's statements) | | {:.0} | | |", alone.per_second);
            println!(
                "| … its ceiling ÷ SQLite, the most any client reaches | | {:.2} | | |",
                alone.per_second / sqlite_rate
            );
        }
        None => println!("| PostgreSQL server alone | | not run: no pgbench (package postgresql-client) | | |"),
    }
    let two = fresh_postgres_database("two").await.expect("a second database");
    let two_runs = side_by_side(&two, 2, seconds, rounds).await.expect("the two-process runs");
    let two_rate = row("PostgreSQL, two processes", "PostgreSQL (two processes' run), its floor", two_runs);
    println!("| PostgreSQL two processes ÷ SQLite | ≥ 1.0 | **{:.2}** | | |", two_rate / sqlite_rate);
    println!("| PostgreSQL two processes ÷ one | ≥ 1.0 | **{:.2}** | | |", two_rate / one_rate);
    drop_postgres_databases(&[&one, &two]).await;
    println!();
    costs.push(("PostgreSQL floor through sqlx's own driver", typed));
    if let Some(alone) = alone {
        costs.push(("PostgreSQL server alone (pgbench's CPU not counted)", alone));
    }
    print_costs(&costs);
}

/// What one request cost each side of the shared cores, and how busy the cores were: a
/// saturated machine's rate is its cores divided by the sum.
fn print_costs(costs: &[(&str, Throughput)]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "| CPU per request (ms), medians of the same runs | bench process: clients, control plane | PostgreSQL server | cores busy |"
    );
    println!("|---|---|---|---|");
    for (what, run) in costs {
        let server = if run.server_ms > 0.0 { format!("{:.2}", run.server_ms) } else { "–".into() };
        println!("| {what} | {:.2} | {server} | {:.0}% |", run.process_ms, 100.0 * run.busy(cores));
    }
    println!();
}
