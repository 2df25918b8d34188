//! What the workspace-host tests share (#39): the server that stands for a workspace's Pod,
//! the test's own end of an agent's tunnel, a browser that resolves the workspaces' hosts, and
//! a browser's sign-in to one.

use super::people::create_user;
use super::support::ControlPlaneProcess;
use super::{http, post_sign_in};
use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wsync::tunnel::transport::serve_streams;
use wsync::tunnel::{OpenStream, StreamRefusal, TUNNEL_PATH, UPGRADE_PROTOCOL};

pub(super) const DOMAIN: &str = "ws.localhost";

/// The server standing for the workspace's Pod: echoes what it was sent, streams a large
/// answer, counts an upload, and switches to an echo protocol on `Upgrade: echo`.
pub(super) async fn workspace_server() -> SocketAddr {
    async fn answer(request: Request) -> Response {
        let header = |name: &str| {
            request.headers().get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).unwrap_or_default()
        };
        match request.uri().path() {
            "/big" => {
                let chunks = (0..512).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![7u8; 16 * 1024])));
                Body::from_stream(futures::stream::iter(chunks)).into_response()
            }
            "/set-cookie" => Response::builder()
                .header("set-cookie", "mine=1; Path=/")
                .header("set-cookie", "everyones=1; Path=/; Domain=ws.localhost")
                .header("set-cookie", "sneaky=1; path=/;DOMAIN=localhost")
                .body(Body::from("set"))
                .unwrap(),
            "/upload" => {
                let body = axum::body::to_bytes(request.into_body(), 64 << 20).await.unwrap_or_default();
                body.len().to_string().into_response()
            }
            "/echo" if header("upgrade") == "echo" => {
                let upgrade = hyper::upgrade::on(request);
                tokio::spawn(async move {
                    let mut io = hyper_util::rt::TokioIo::new(upgrade.await.expect("upgraded"));
                    let mut buffer = [0u8; 1024];
                    while let Ok(n) = io.read(&mut buffer).await {
                        if n == 0 || io.write_all(&buffer[..n]).await.is_err() {
                            break;
                        }
                    }
                });
                Response::builder()
                    .status(101)
                    .header("connection", "upgrade")
                    .header("upgrade", "echo")
                    .body(Body::empty())
                    .unwrap()
            }
            path => axum::Json(json!({
                "path": path,
                "query": request.uri().query(),
                "host": header("host"),
                "cookie": header("cookie"),
                "authorization": header("authorization"),
                "forwarded_for": header("x-forwarded-for"),
                "forwarded_proto": header("x-forwarded-proto"),
            }))
            .into_response(),
        }
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, axum::Router::new().fallback(answer)).await });
    address
}

/// The agent's end of the tunnel, as the test plays it: every stream is dialled to `pod`,
/// and what was asked is kept.
pub(super) async fn agent_tunnel(control_plane: &ControlPlaneProcess, token: &str, pod: SocketAddr) -> Tunnel {
    wsync::runtime::install_crypto_provider();
    let client = reqwest::Client::builder().http1_only().build().unwrap();
    let answer = client
        .get(format!("{}{TUNNEL_PATH}", control_plane.url))
        .bearer_auth(token)
        .header("upgrade", UPGRADE_PROTOCOL)
        .header("connection", "upgrade")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 101);
    let upgraded = answer.upgrade().await.unwrap();
    let asked = Arc::new(Mutex::new(Vec::new()));
    let kept = asked.clone();
    let task = tokio::spawn(async move {
        // As the agent's gate: only the declared port.
        let dial = move |open: OpenStream| {
            let port = open.port;
            kept.lock().unwrap().push(open);
            async move {
                if port != 8080 {
                    return Err(StreamRefusal::UndeclaredPort(port));
                }
                tokio::net::TcpStream::connect(pod).await.map_err(|e| StreamRefusal::DialFailed(e.to_string()))
            }
        };
        let _ = serve_streams(upgraded, dial).await;
    });
    // The control plane holds it once its handshake is done.
    tokio::time::sleep(Duration::from_millis(300)).await;
    Tunnel { asked, task }
}

pub(super) struct Tunnel {
    pub asked: Arc<Mutex<Vec<OpenStream>>>,
    pub task: tokio::task::JoinHandle<()>,
}

/// A browser without a cookie jar: the hosts under the domain resolve to the control plane.
pub(super) fn browser(control_plane: &ControlPlaneProcess, hosts: &[&str]) -> reqwest::Client {
    wsync::runtime::install_crypto_provider();
    let address: SocketAddr = control_plane.url.trim_start_matches("http://").parse().unwrap();
    let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    for host in hosts {
        builder = builder.resolve(host, address);
    }
    builder.build().unwrap()
}

pub(super) fn location(answer: &reqwest::Response) -> String {
    answer.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

pub(super) fn set_cookie(answer: &reqwest::Response) -> String {
    answer.headers().get("set-cookie").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// The value of the first cookie a Set-Cookie sets.
pub(super) fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap_or_default().to_string()
}

/// Signed in on the control plane's page with `token`: the session cookie's pair.
pub(super) async fn page_session(control_plane: &ControlPlaneProcess, token: &str) -> String {
    let answer = post_sign_in(control_plane, token).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    cookie_pair(&set_cookie(&answer))
}

/// A browser's whole sign-in to a workspace host: the host sends it to the control plane with
/// a state it keeps in a cookie; the control plane (with the page session) sends it back with a
/// code; the host trades the code for its cookie. Returns the host's cookie pair.
pub(super) async fn open_host(
    browser: &reqwest::Client,
    control_plane: &ControlPlaneProcess,
    url: &str,
    session: &str,
) -> String {
    let (sign_in, state) = to_sign_in(browser, control_plane, url).await;
    let to_code = browser.get(&sign_in).header("cookie", session).send().await.unwrap();
    assert_eq!(to_code.status(), StatusCode::SEE_OTHER, "{sign_in}");
    let auth = location(&to_code);
    let signed_in = browser.get(&auth).header("cookie", &state).send().await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER, "{auth}");
    signed_in
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|c| c.starts_with("wsync_workspace="))
        .map(cookie_pair)
        .unwrap()
}

/// A page load without the host's cookie: where it is sent to sign in, and the state cookie.
pub(super) async fn to_sign_in(
    browser: &reqwest::Client,
    control_plane: &ControlPlaneProcess,
    url: &str,
) -> (String, String) {
    let first = browser.get(format!("{url}/hello?x=1")).send().await.unwrap();
    assert_eq!(first.status(), StatusCode::SEE_OTHER);
    let sign_in = location(&first);
    assert!(sign_in.starts_with(&format!("{}/workspace-sign-in?host=", control_plane.url)), "{sign_in}");
    (sign_in, cookie_pair(&set_cookie(&first)))
}

/// Report the workspace's Deployment ready, as the agent would.
pub(super) async fn report_running(control_plane: &ControlPlaneProcess, token: &str, name: &str, replicas: u32) {
    let namespace = wsync::control_plane::model::workspace_namespace("a1", name);
    let rv = format!("{}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros());
    let info = json!({"name": name, "namespace": namespace, "latest_k8s_deployment_info": {
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv, "generation": 1},
        "spec": {"replicas": replicas},
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas, "updatedReplicas": replicas,
            "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                           {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}}});
    let body = json!({"update_type": "partial", "workspace_agent_infos": [info]}).to_string();
    let answer = http()
        .post(format!("{}{}", control_plane.url, wsync::protocol::RECONCILE_PATH))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201);
}

pub(super) fn workspace_json(control_plane: &ControlPlaneProcess, name: &str) -> Value {
    serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "a1", "get", name, "-o", "json"])).unwrap()
}

/// `wsync <args>` against `control_plane` as whoever holds `token`, not yet run.
pub(super) fn wsync_as(control_plane: &ControlPlaneProcess, token: &str, args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"));
    command
        .args(args)
        .env("WSYNC_SERVER", &control_plane.url)
        .env("WSYNC_TOKEN", token)
        .env_remove("WSYNC_ADMIN_TOKEN");
    command
}

/// Agent `a1` registered, users alice and bob, and alice's workspace `ide`, not yet running:
/// the agent's token, alice's and bob's.
pub(super) fn alice_and_bob_with_a_workspace(control_plane: &ControlPlaneProcess) -> (String, String, String) {
    let registered: Value =
        serde_json::from_str(&control_plane.cli(&["agents", "register", "a1", "-o", "json"])).unwrap();
    let agent_token = registered["token"].as_str().unwrap().to_string();
    let (alice, bob) = (create_user(control_plane, "alice", &[]), create_user(control_plane, "bob", &[]));
    let created =
        wsync_as(control_plane, &alice, &["workspaces", "--agent", "a1", "create", "ide", "--image", "busybox"])
            .output()
            .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    (agent_token, alice, bob)
}
