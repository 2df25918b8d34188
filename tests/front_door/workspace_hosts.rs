//! Opening a workspace through the real control plane (#39): each port on a host of its own
//! under `--workspaces-domain`, its owner (or an admin) let in by a one-time code traded for
//! the host's own cookie, everyone else answered 404, and each request passed through the
//! agent's tunnel to the workspace's port, streamed, an upgrade spliced both ways. The agent
//! here is the test's own tunnel end, dialling a local server that stands for the Pod: the
//! real agent's gate is proven in the apiserver and node tiers.

use super::people::create_user;
use super::support::ControlPlaneProcess;
use super::{http, post_sign_in, sqlite};
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

const DOMAIN: &str = "ws.localhost";

/// The server standing for the workspace's Pod: echoes what it was sent, streams a large
/// answer, counts an upload, and switches to an echo protocol on `Upgrade: echo`.
async fn workspace_server() -> SocketAddr {
    async fn answer(request: Request) -> Response {
        let header = |name: &str| request.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        match request.uri().path() {
            "/big" => {
                let chunks = (0..512).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![7u8; 16 * 1024])));
                Body::from_stream(futures::stream::iter(chunks)).into_response()
            }
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
async fn agent_tunnel(control_plane: &ControlPlaneProcess, token: &str, pod: SocketAddr) -> Tunnel {
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

struct Tunnel {
    asked: Arc<Mutex<Vec<OpenStream>>>,
    task: tokio::task::JoinHandle<()>,
}

/// A browser without a cookie jar: the hosts under the domain resolve to the control plane.
fn browser(control_plane: &ControlPlaneProcess, hosts: &[&str]) -> reqwest::Client {
    wsync::runtime::install_crypto_provider();
    let address: SocketAddr = control_plane.url.trim_start_matches("http://").parse().unwrap();
    let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    for host in hosts {
        builder = builder.resolve(host, address);
    }
    builder.build().unwrap()
}

fn location(answer: &reqwest::Response) -> String {
    answer.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

fn set_cookie(answer: &reqwest::Response) -> String {
    answer.headers().get("set-cookie").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

/// The value of the first cookie a Set-Cookie sets.
fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap_or_default().to_string()
}

/// Signed in on the control plane's page with `token`: the session cookie's pair.
async fn page_session(control_plane: &ControlPlaneProcess, token: &str) -> String {
    let answer = post_sign_in(control_plane, token).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    cookie_pair(&set_cookie(&answer))
}

/// Ask the control plane for a code to `url`'s host with a page session: where it sends the
/// browser.
async fn code_for(
    browser: &reqwest::Client,
    control_plane: &ControlPlaneProcess,
    host: &str,
    session: &str,
) -> reqwest::Response {
    browser
        .get(format!("{}/workspace-sign-in?host={host}&next=%2Fhello%3Fx%3D1", control_plane.url))
        .header("cookie", session)
        .send()
        .await
        .unwrap()
}

/// Report the workspace's Deployment ready, as the agent would.
async fn report_running(control_plane: &ControlPlaneProcess, token: &str, name: &str, replicas: u32) {
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

fn workspace_json(control_plane: &ControlPlaneProcess, name: &str) -> Value {
    serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "a1", "get", name, "-o", "json"])).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn its_owner_opens_a_workspace_port_on_a_host_of_its_own_and_no_one_else_does() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane =
        ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &["--workspaces-domain", DOMAIN]);
    let registered: Value =
        serde_json::from_str(&control_plane.cli(&["agents", "register", "a1", "-o", "json"])).unwrap();
    let agent_token = registered["token"].as_str().unwrap().to_string();
    let (alice, bob) = (create_user(&control_plane, "alice", &[]), create_user(&control_plane, "bob", &[]));
    let created = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(["workspaces", "--agent", "a1", "create", "ide", "--image", "busybox"])
        .env("WSYNC_SERVER", &control_plane.url)
        .env("WSYNC_TOKEN", &alice)
        .env_remove("WSYNC_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let tag = wsync::control_plane::decisions::workspace_hosts::agent_tag("a1");
    let host = format!("8080-ide-{tag}.{DOMAIN}");
    let port = control_plane.url.rsplit(':').next().unwrap().to_string();
    let url = format!("http://{host}:{port}");
    let browser = browser(&control_plane, &[&host, &format!("9999-ide-{tag}.{DOMAIN}")]);

    // Shown: the workspace's one declared port, at its URL.
    let shown = workspace_json(&control_plane, "ide");
    assert_eq!(shown["endpoints"], json!([{"name": "ide", "port": 8080, "url": format!("{url}/")}]), "{shown}");

    // Not running yet: a page that says so, never a bare 502; and nothing is asked of the agent.
    let pod = workspace_server().await;
    let tunnel = agent_tunnel(&control_plane, &agent_token, pod).await;
    let alice_session = page_session(&control_plane, &alice).await;
    let to_code = code_for(&browser, &control_plane, &host, &alice_session).await;
    assert_eq!(to_code.status(), StatusCode::SEE_OTHER);
    let auth = location(&to_code);
    assert!(auth.starts_with(&format!("{url}/.wsync/auth?code=")), "{auth}");
    let signed_in = browser.get(&auth).send().await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&signed_in), "/hello?x=1", "on to where the sign-in began");
    let host_cookie = set_cookie(&signed_in);
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(host_cookie.contains(attribute), "{host_cookie}");
    }
    assert!(!host_cookie.to_ascii_lowercase().contains("domain"), "host-only: {host_cookie}");
    let host_cookie = cookie_pair(&host_cookie);
    assert!(host_cookie.starts_with("wsync_workspace="));
    let again = browser.get(&auth).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::BAD_REQUEST, "a code is good once");

    let starting = browser.get(format!("{url}/hello")).header("cookie", &host_cookie).send().await.unwrap();
    assert_eq!(starting.status(), StatusCode::SERVICE_UNAVAILABLE);
    let page = starting.text().await.unwrap();
    assert!(page.contains("is <b>CreationRequested</b>") && page.contains("reloads"), "{page}");
    assert!(tunnel.asked.lock().unwrap().is_empty());

    // Running: the request reaches the workspace's port as the workspace's own, without the
    // host's cookie, with the client in X-Forwarded-For whatever the client claimed.
    report_running(&control_plane, &agent_token, "ide", 1).await;
    let through = browser
        .get(format!("{url}/hello?x=1"))
        .header("cookie", format!("theirs=1; {host_cookie}; {alice_session}"))
        .header("x-forwarded-for", "10.9.9.9")
        .send()
        .await
        .unwrap();
    assert_eq!(through.status(), StatusCode::OK);
    assert!(through.headers().get("content-security-policy").is_none(), "none of the control plane's headers");
    let seen: Value = through.json().await.unwrap();
    assert_eq!(seen["path"], "/hello");
    assert_eq!(seen["host"], format!("{host}:{port}"));
    assert_eq!(seen["cookie"], format!("theirs=1; {alice_session}"), "the host's own cookie is taken out");
    assert_eq!(seen["forwarded_for"], "127.0.0.1");
    assert_eq!(seen["forwarded_proto"], "http");
    let asked = tunnel.asked.lock().unwrap().clone();
    let namespace = wsync::control_plane::model::workspace_namespace("a1", "ide");
    assert_eq!(asked, vec![OpenStream { namespace: namespace.clone(), workspace: "ide".into(), port: 8080 }]);

    // The control plane's API is not on the workspace's host: the path is the workspace's.
    let api = browser
        .get(format!("{url}/api/v1/agents"))
        .header("cookie", &host_cookie)
        .bearer_auth(&control_plane.admin_token)
        .send()
        .await
        .unwrap();
    let seen: Value = api.json().await.unwrap();
    assert_eq!(seen["path"], "/api/v1/agents", "passed to the workspace, which sees the header it was sent");

    // Streams both ways, whole.
    let big = browser.get(format!("{url}/big")).header("cookie", &host_cookie).send().await.unwrap();
    assert_eq!(big.bytes().await.unwrap().len(), 8 << 20);
    let upload = browser
        .post(format!("{url}/upload"))
        .header("cookie", &host_cookie)
        .body(vec![1u8; 6 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(upload.text().await.unwrap(), (6 << 20).to_string());

    // An upgrade is spliced both ways.
    let address: SocketAddr = control_plane.url.trim_start_matches("http://").parse().unwrap();
    let mut raw = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "GET /echo HTTP/1.1\r\nHost: {host}:{port}\r\nCookie: {host_cookie}\r\nConnection: upgrade\r\nUpgrade: echo\r\n\r\n"
    );
    raw.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = raw.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(answer.starts_with("HTTP/1.1 101"), "{answer}");
    raw.write_all(b"through the tunnel").await.unwrap();
    let mut echoed = [0u8; 18];
    tokio::time::timeout(Duration::from_secs(5), raw.read_exact(&mut echoed)).await.unwrap().unwrap();
    assert_eq!(&echoed, b"through the tunnel");

    // An undeclared port is refused by the agent: the page says so.
    let other = format!("9999-ide-{tag}.{DOMAIN}");
    let session_there = code_for(&browser, &control_plane, &other, &alice_session).await;
    let auth = location(&session_there);
    let cookie = cookie_pair(&set_cookie(&browser.get(&auth).send().await.unwrap()));
    let refused_port = browser.get(format!("http://{other}:{port}/")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(refused_port.status(), StatusCode::NOT_FOUND);
    assert!(refused_port.text().await.unwrap().contains("declares no port 9999"));

    // Bob: no code for alice's workspace, the same 404 as a missing one; a forged cookie and
    // alice's cookie on another host send a browser to sign in.
    let bob_session = page_session(&control_plane, &bob).await;
    let refused = code_for(&browser, &control_plane, &host, &bob_session).await;
    assert_eq!(refused.status(), StatusCode::NOT_FOUND);
    let missing = code_for(&browser, &control_plane, &format!("8080-nothing-{tag}.{DOMAIN}"), &bob_session).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(refused.text().await.unwrap(), missing.text().await.unwrap());
    let forged = browser.get(format!("{url}/")).header("cookie", "wsync_workspace=0123abcd").send().await.unwrap();
    assert_eq!(forged.status(), StatusCode::SEE_OTHER);
    assert!(location(&forged).starts_with(&format!("{}/workspace-sign-in?host=", control_plane.url)));
    let elsewhere = browser.get(format!("http://{other}:{port}/")).header("cookie", &host_cookie).send().await.unwrap();
    assert_eq!(elsewhere.status(), StatusCode::SEE_OTHER, "a host's cookie is that host's alone");
    // No token in a URL or a header opens it.
    for query in [format!("token={}", control_plane.admin_token), format!("access_token={alice}")] {
        let answer = browser.get(format!("{url}/?{query}")).bearer_auth(&alice).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::SEE_OTHER, "{query}");
    }

    // An admin may open it.
    let admin_session = page_session(&control_plane, &control_plane.admin_token).await;
    assert_eq!(code_for(&browser, &control_plane, &host, &admin_session).await.status(), StatusCode::SEE_OTHER);

    // Signing out of the control plane ends the host's cookie too.
    let home = http().get(format!("{}/", control_plane.url)).header("cookie", &alice_session).send().await.unwrap();
    let html = home.text().await.unwrap();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap();
    let out = http()
        .post(format!("{}/sign-out", control_plane.url))
        .header("origin", &control_plane.url)
        .header("cookie", &alice_session)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    let after = browser.get(format!("{url}/")).header("cookie", &host_cookie).send().await.unwrap();
    assert_eq!(after.status(), StatusCode::SEE_OTHER, "signed out: to sign in again");

    // The agent gone: a page that says so.
    let alice_session = page_session(&control_plane, &alice).await;
    let auth = location(&code_for(&browser, &control_plane, &host, &alice_session).await);
    let host_cookie = cookie_pair(&set_cookie(&browser.get(&auth).send().await.unwrap()));
    tunnel.task.abort();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let gone = browser.get(format!("{url}/")).header("cookie", &host_cookie).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(gone.text().await.unwrap().contains("not connected"));

    // Stopped: a page that says so.
    control_plane.cli(&["workspaces", "--agent", "a1", "stop", "ide"]);
    report_running(&control_plane, &agent_token, "ide", 0).await;
    let stopped = browser.get(format!("{url}/")).header("cookie", &host_cookie).send().await.unwrap();
    assert_eq!(stopped.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(stopped.text().await.unwrap().contains("is <b>Stopped</b>"));

    // Its activity was recorded.
    assert!(workspace_json(&control_plane, "ide")["last_activity_at"].as_i64().is_some());
}

#[test]
fn a_control_plane_on_its_workspaces_domain_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(["control-plane", "--database-url", &sqlite(&dir), "--new-admin-token"])
        .args(["--public-url", "http://cp.ws.localhost:8080", "--workspaces-domain", DOMAIN])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("may not be it or under it"), "{said}");
}
