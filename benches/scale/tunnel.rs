//! Opening a workspace (#39), on the real node: requests through the control plane's workspace
//! host and the agent's tunnel, side by side with the same requests straight to the Pod, in
//! one run; then many WebSockets held open through one agent, its RSS per connection, and a
//! Deployment change reaching the control plane meanwhile.

use crate::agent_figures::{self, rss_bytes, start_agent, version};
use crate::support::{self, ControlPlaneProcess, kubectl_ok};
use crate::{Options, percentile};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

const IMAGE: &str = "localhost/workspace:3";
const LONG: Duration = Duration::from_secs(180);
/// Any one request or WebSocket read: past it the run fails rather than hangs.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Where one workspace is reached: through its host, and straight at its Pod.
struct Opened {
    control_plane: SocketAddr,
    host: String,
    url: String,
    cookie: String,
    pod: String,
}

pub async fn measure(options: &Options) {
    let node_up = std::process::Command::new(format!("{}/hack/local-node.sh", env!("CARGO_MANIFEST_DIR")))
        .arg("status")
        .status()
        .is_ok_and(|s| s.success());
    if !node_up {
        eprintln!("no local node (hack/local-node.sh up): the tunnel's figures need a real Pod; skipped");
        return;
    }
    eprintln!("== opening a workspace: the tunnel against the Pod itself");
    let built = std::process::Command::new(format!("{}/hack/local-node.sh", env!("CARGO_MANIFEST_DIR")))
        .arg("workspace-image")
        .status();
    assert!(built.is_ok_and(|s| s.success()), "building {IMAGE}");
    let count = options.websockets;
    let open_files = raise_open_files_limit();
    let wanted = u64::try_from(count).unwrap_or(u64::MAX).saturating_mul(3).saturating_add(1024);
    assert!(open_files >= wanted, "{count} WebSockets need {wanted} open files a process; the limit is {open_files}");
    // Room for the warm-up's and the checks' streams beside the held ones.
    let many = count.saturating_add(64).to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let database = format!("sqlite://{}/control-plane.db", dir.path().display());
    let flags = [
        "--partial-reconciliation-interval-seconds",
        "1",
        "--workspaces-domain",
        "ws.localhost",
        "--streams-per-user",
        &many,
        "--streams-per-workspace",
        &many,
        "--max-connections-per-address",
        "100000",
        "--max-connections",
        "100000",
    ];
    let control_plane = ControlPlaneProcess::start(&database, dir.path().join("control-plane.log"), &flags);
    let id = support::unique_id("bench-tunnel");
    let _cleanup = Cleanup(id.clone());
    let registered: Value =
        serde_json::from_str(&control_plane.cli(&["agents", "register", &id, "-o", "json"])).expect("json");
    let token = registered["token"].as_str().expect("a token");
    let agent = start_agent(&id, &control_plane.url, token, support::free_port(), true).await;
    let alice: Value =
        serde_json::from_str(&control_plane.cli(&["users", "create", "alice", "-o", "json"])).expect("json");
    let alice = alice["token"].as_str().expect("her token").to_string();
    let workspace = create_running(&control_plane, &id, &alice).await;
    let opened = open(&control_plane, &workspace, &alice).await;

    // The WebSockets first, on an agent that has moved no bulk bytes yet.
    let agent_pid = agent.pid().expect("the agent's pid");
    let sockets = websockets(&opened, &control_plane, &id, &workspace, agent_pid, options).await;
    let latency = latency(&opened, options.samples).await;
    let throughput = throughput(&opened, options.bulk_runs).await;
    print_table(&latency, &throughput, &sockets);
}

/// Deletes what the run made in the cluster, however it ends.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let env = support::env();
        let selector = format!("{}={}", support::LABEL_KEY, self.0);
        let _ = support::kubectl(env, &["delete", "namespace", "-l", &selector, "--wait=false"]);
        let _ =
            support::kubectl(env, &["-n", support::AGENT_NAMESPACE, "delete", "wss", &self.0, "--ignore-not-found"]);
    }
}

/// Raise this process's open-files limit to its hard limit (the control plane and the agent
/// it starts inherit it); the limit now.
fn raise_open_files_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: both calls read or write only the struct given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return 0;
        }
        let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
            limit = raised;
        }
    }
    limit.rlim_cur
}

/// Alice's workspace `bench`, once it runs.
async fn create_running(control_plane: &ControlPlaneProcess, agent: &str, alice: &str) -> Value {
    let url = format!("{}/api/v1/agents/{agent}/workspaces", control_plane.url);
    let body = json!({"name": "bench", "image": IMAGE, "cpu": "1", "memory": "1Gi"});
    let created = agent_figures::http().post(&url).bearer_auth(alice).json(&body).send().await.expect("create");
    assert!(created.status().is_success(), "creating the workspace: {}", created.status());
    let deadline = Instant::now() + LONG;
    loop {
        let answer = agent_figures::http().get(format!("{url}/bench")).bearer_auth(alice).send().await;
        let workspace: Value = answer.expect("get").json().await.expect("json");
        if workspace["actual_state"] == "Running" {
            return workspace;
        }
        assert!(Instant::now() < deadline, "the workspace never ran: {workspace}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Alice signs in, and in to the workspace's host, as a browser does.
async fn open(control_plane: &ControlPlaneProcess, workspace: &Value, alice: &str) -> Opened {
    let url = workspace["endpoints"][0]["url"].as_str().expect("the IDE's URL").trim_end_matches('/').to_string();
    let host = url.trim_start_matches("http://").split(':').next().unwrap_or_default().to_string();
    let address: SocketAddr = control_plane.url.trim_start_matches("http://").parse().expect("an address");
    let browser = reqwest::Client::builder()
        .timeout(TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .resolve(&host, address)
        .build()
        .expect("a client");
    let signed_in = browser
        .post(format!("{}/sign-in", control_plane.url))
        .header("origin", &control_plane.url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={alice}&next=%2F"))
        .send()
        .await
        .expect("sign in");
    let session = cookie(&signed_in, "");
    let to_sign_in = browser.get(format!("{url}/")).send().await.expect("the host");
    let state = cookie(&to_sign_in, "");
    let to_code = browser.get(location(&to_sign_in)).header("cookie", session).send().await.expect("a code");
    let traded = browser.get(location(&to_code)).header("cookie", state).send().await.expect("the host's cookie");
    let cookie = cookie(&traded, "wsync_workspace=");
    let namespace = workspace["namespace"].as_str().expect("a namespace");
    let pod = kubectl_ok(support::env(), &["-n", namespace, "get", "pods", "-o", "jsonpath={.items[0].status.podIP}"]);
    Opened { control_plane: address, host, url, cookie, pod: format!("http://{pod}:8080") }
}

fn location(answer: &reqwest::Response) -> String {
    answer.headers().get("location").and_then(|v| v.to_str().ok()).expect("a redirect").to_string()
}

/// The `name=value` of the first cookie `answer` sets whose name starts with `prefix`.
fn cookie(answer: &reqwest::Response, prefix: &str) -> String {
    let set = answer.headers().get_all("set-cookie").iter().filter_map(|v| v.to_str().ok());
    let found = set.filter(|c| c.starts_with(prefix)).find_map(|c| c.split(';').next());
    found.expect("a cookie").to_string()
}

struct Latency {
    tunnel: Vec<Duration>,
    /// Straight to the Pod on one kept-alive connection, and on a new connection each time,
    /// as the tunnel's path dials the Pod for each request.
    kept_alive: Vec<Duration>,
    connecting: Vec<Duration>,
}

/// `GET /` three ways, taken in turns: through the workspace's host (a kept-alive connection
/// to the control plane), and straight to the Pod on a kept-alive or a new connection.
async fn latency(opened: &Opened, samples: usize) -> Latency {
    let tunnel_client = client().resolve(&opened.host, opened.control_plane).build().expect("client");
    let kept_alive_client = client().build().expect("client");
    let connecting_client = client().pool_max_idle_per_host(0).build().expect("client");
    let mut figures = Latency { tunnel: Vec::new(), kept_alive: Vec::new(), connecting: Vec::new() };
    for sample in 0..samples + 10 {
        for way in 0..3 {
            let way = (way + sample) % 3;
            let request = match way {
                0 => tunnel_client.get(format!("{}/", opened.url)).header("cookie", &opened.cookie),
                1 => kept_alive_client.get(format!("{}/", opened.pod)),
                _ => connecting_client.get(format!("{}/", opened.pod)),
            };
            let started = Instant::now();
            let answer = request.send().await.expect("an answer");
            assert!(answer.status().is_success(), "GET /: {}", answer.status());
            answer.bytes().await.expect("the page");
            // The first ten warm every path.
            if sample >= 10 {
                let series = match way {
                    0 => &mut figures.tunnel,
                    1 => &mut figures.kept_alive,
                    _ => &mut figures.connecting,
                };
                series.push(started.elapsed());
            }
        }
    }
    figures
}

fn client() -> reqwest::ClientBuilder {
    reqwest::Client::builder().timeout(TIMEOUT)
}

/// MB/s reading /big (32 MiB) each way, the median of `runs` in turns.
async fn throughput(opened: &Opened, runs: usize) -> (f64, f64) {
    let tunnel_client = client().resolve(&opened.host, opened.control_plane).build().expect("client");
    let direct_client = client().build().expect("client");
    let (mut tunnel, mut direct) = (Vec::new(), Vec::new());
    for run in 0..runs {
        for through_tunnel in if run % 2 == 0 { [true, false] } else { [false, true] } {
            let request = match through_tunnel {
                true => tunnel_client.get(format!("{}/big", opened.url)).header("cookie", &opened.cookie),
                false => direct_client.get(format!("{}/big", opened.pod)),
            };
            let started = Instant::now();
            let mut body = request.send().await.expect("an answer");
            let mut read = 0usize;
            while let Some(chunk) = body.chunk().await.expect("the body") {
                read += chunk.len();
            }
            assert_eq!(read, 32 << 20, "the whole of /big");
            let rate = read as f64 / 1e6 / started.elapsed().as_secs_f64();
            if through_tunnel { &mut tunnel } else { &mut direct }.push(rate);
        }
    }
    let median = |rates: &mut Vec<f64>| {
        rates.sort_by(|a, b| a.total_cmp(b));
        rates.get(rates.len() / 2).copied().unwrap_or(f64::NAN)
    };
    (median(&mut tunnel), median(&mut direct))
}

struct Sockets {
    count: usize,
    opened_in: Duration,
    rss_before: i64,
    rss_after: i64,
    quiet: Vec<Duration>,
    busy: Vec<Duration>,
}

/// `count` WebSockets to the Pod's echo, each echoing once, held open; a Deployment change's
/// way to the control plane before and while they are open.
async fn websockets(
    opened: &Opened,
    control_plane: &ControlPlaneProcess,
    agent: &str,
    workspace: &Value,
    agent_pid: u32,
    options: &Options,
) -> Sockets {
    let changes = (options.samples / 4).clamp(5, 50);
    let quiet = deployment_changes(control_plane, agent, workspace, changes).await;
    let (address, url, cookie) =
        (opened.control_plane, format!("ws://{}/", opened.url.trim_start_matches("http://")), opened.cookie.clone());
    let warm = tokio::task::spawn_blocking({
        let (url, cookie) = (url.clone(), cookie.clone());
        move || (0..10).for_each(|i| drop(echoing(address, &url, &cookie, i)))
    });
    warm.await.expect("warmed");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_before = rss_bytes(agent_pid) as i64;
    let count = options.websockets;
    let started = Instant::now();
    let opening = tokio::task::spawn_blocking({
        let (url, cookie) = (url.clone(), cookie.clone());
        move || (0..count).map(|i| echoing(address, &url, &cookie, i)).collect::<Vec<_>>()
    });
    let mut sockets = opening.await.expect("opened");
    let opened_in = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = rss_bytes(agent_pid) as i64;
    let busy = deployment_changes(control_plane, agent, workspace, changes).await;
    // Every one still echoes.
    let sockets_checked = tokio::task::spawn_blocking(move || {
        for (i, socket) in sockets.iter_mut().enumerate() {
            echo(socket, &format!("still there {i}"));
        }
        sockets
    });
    drop(sockets_checked.await.expect("checked"));
    Sockets { count, opened_in, rss_before, rss_after, quiet, busy }
}

/// A WebSocket through the workspace's host to the Pod's echo, which has echoed one message
/// of 16 KiB: every buffer on its way has been filled once.
fn echoing(address: SocketAddr, url: &str, cookie: &str, i: usize) -> WebSocket<TcpStream> {
    let stream = TcpStream::connect(address).expect("connect to the control plane");
    stream.set_read_timeout(Some(TIMEOUT)).expect("a read timeout");
    stream.set_write_timeout(Some(TIMEOUT)).expect("a write timeout");
    let mut request = url.into_client_request().expect("a request");
    request.headers_mut().insert("cookie", cookie.parse().expect("a header"));
    let (mut socket, _) = tungstenite::client(request, stream).expect("the WebSocket handshake");
    echo(&mut socket, &format!("{i:>16384}"));
    socket
}

fn echo(socket: &mut WebSocket<TcpStream>, text: &str) {
    socket.send(Message::text(text)).expect("send");
    match socket.read().expect("the echo") {
        Message::Text(echoed) => assert_eq!(echoed.as_str(), text),
        other => panic!("not an echo: {other:?}"),
    }
}

/// From a change to the workspace's Deployment to the control plane showing its version.
async fn deployment_changes(
    control_plane: &ControlPlaneProcess,
    agent: &str,
    workspace: &Value,
    n: usize,
) -> Vec<Duration> {
    let namespace = workspace["namespace"].as_str().expect("a namespace");
    let api = Api::<Deployment>::namespaced(support::admin_client(support::env()).await, namespace);
    let url = format!("{}/api/v1/agents/{agent}/workspaces/bench", control_plane.url);
    let mut taken = Vec::new();
    for sample in 0..n {
        let patch =
            json!({"metadata": {"annotations": {"bench.wsync.dev/sample": format!("{sample}-{}", taken.len())}}});
        let changed = api.patch("bench", &PatchParams::default(), &Patch::Merge(&patch)).await.expect("patch");
        let changed_at = Instant::now();
        let patched = version(changed.metadata.resource_version.as_deref());
        loop {
            let answer = agent_figures::http().get(&url).bearer_auth(&control_plane.admin_token).send().await;
            let seen: Value = answer.expect("get").json().await.expect("json");
            if version(seen["deployment_resource_version"].as_str()) >= patched {
                taken.push(changed_at.elapsed());
                break;
            }
            assert!(changed_at.elapsed() < LONG, "the change never reached the control plane");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    taken
}

fn print_table(latency: &Latency, (tunnel_rate, direct_rate): &(f64, f64), sockets: &Sockets) {
    let p = |samples: &[Duration], at: f64| percentile(samples, at);
    let pair = |samples: &[Duration]| format!("{:.2} / {:.2}", p(samples, 50.0), p(samples, 99.0));
    // Each percentile of one series less the same of the other, not a percentile of differences.
    let added = |base: &[Duration], at: f64| p(&latency.tunnel, at) - p(base, at);
    println!("| opening a workspace, on the real node | target | measured |");
    println!("|---|---|---|");
    println!("| GET / straight to the Pod, kept-alive connection, p50 / p99 (ms) | | {} |", pair(&latency.kept_alive));
    println!("| GET / straight to the Pod, a new connection each, p50 / p99 (ms) | | {} |", pair(&latency.connecting));
    println!("| GET / through the workspace's host and the tunnel, p50 / p99 (ms) | | {} |", pair(&latency.tunnel));
    for (base, name) in [(&latency.connecting, "a new connection each"), (&latency.kept_alive, "kept-alive")] {
        let (p50, p99) = (added(base, 50.0), added(base, 99.0));
        println!(
            "| added by the tunnel over straight ({name}), p50 / p99 (ms) | ≤ 1 / ≤ 5 | **{p50:.2}** / **{p99:.2}** |"
        );
    }
    println!("| 32 MiB straight / through the tunnel (MB/s) | | {direct_rate:.0} / {tunnel_rate:.0} |");
    println!("| throughput, tunnel ÷ straight | ≥ 0.5 | **{:.2}** |", tunnel_rate / direct_rate);
    let grown = sockets.rss_after.saturating_sub(sockets.rss_before);
    let per = grown as f64 / sockets.count.max(1) as f64 / 1024.0;
    println!(
        "| {} WebSockets opened, one 16 KiB echo each (s) | | {:.1} |",
        sockets.count,
        sockets.opened_in.as_secs_f64()
    );
    println!(
        "| agent RSS before / with them open (MiB) | | {:.1} / {:.1} |",
        sockets.rss_before as f64 / 1048576.0,
        sockets.rss_after as f64 / 1048576.0
    );
    println!("| agent RSS per open WebSocket (KiB) | ≤ 32 | **{per:.1}** |");
    println!(
        "| Deployment change → control plane, none open, p50 / p99 (ms) | | {:.0} / {:.0} |",
        p(&sockets.quiet, 50.0),
        p(&sockets.quiet, 99.0)
    );
    println!(
        "| Deployment change → control plane, all open, p50 / p99 (ms) | p99 < 1000 | {:.0} / **{:.0}** |",
        p(&sockets.busy, 50.0),
        p(&sockets.busy, 99.0)
    );
    println!();
}
