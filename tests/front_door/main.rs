//! The control plane's front door (#19), against the real `wsync control-plane` process:
//! authenticated by default, cross-origin writes refused, sessions and CSRF tokens, a real
//! headless Chromium, timeouts, TLS, and agent tokens rotated and revoked.

#[path = "../support/mod.rs"]
pub mod support;

use reqwest::StatusCode;
use serde_json::Value;
use support::ControlPlaneProcess;

mod api;
mod behind_proxy;
mod browser;
mod connection_limits;
mod database;
mod devfile_cli;
mod http2;
mod people;
mod scale_out;
mod sign_in_limits;
mod sign_in_oidc;
mod transport;
mod tunnel;
mod upgrades;
mod workspace_cli;
mod workspace_hosts;
mod workspace_processes;
mod workspace_support;

pub fn http() -> reqwest::Client {
    wsync::runtime::install_crypto_provider();
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client")
}

pub fn sqlite(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}/control-plane.db", dir.path().display())
}

/// A control plane with agent `a1` and its Running workspace `ws`.
pub fn control_plane_with_a_workspace(database: &str, dir: &tempfile::TempDir) -> ControlPlaneProcess {
    let control_plane = ControlPlaneProcess::start(database, dir.path().join("control-plane.log"), &[]);
    control_plane.cli(&["agents", "register", "a1"]);
    control_plane.cli(&["workspaces", "--agent", "a1", "create", "ws", "--image", "busybox:1.36"]);
    control_plane
}

pub fn desired(control_plane: &ControlPlaneProcess) -> String {
    let workspace: Value =
        serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "a1", "get", "ws", "-o", "json"]))
            .expect("json");
    workspace["desired_state"].as_str().unwrap_or_default().to_string()
}

/// The page's sign-in form posted with `token`, from the page's own origin, back to `/`.
pub async fn post_sign_in(control_plane: &ControlPlaneProcess, token: &str) -> reqwest::Response {
    http()
        .post(format!("{}/sign-in", control_plane.url))
        .header("origin", &control_plane.url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}&next=%2F"))
        .send()
        .await
        .expect("a sign-in")
}

/// Sign in as the page's form does; the session cookie (`name=value`) and its CSRF token.
async fn sign_in(control_plane: &ControlPlaneProcess) -> (String, String) {
    let answer = http()
        .post(format!("{}/sign-in", control_plane.url))
        .header("origin", &control_plane.url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={}&next=%2Fagents%2Fa1", control_plane.admin_token))
        .send()
        .await
        .expect("sign in");
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(answer.headers()["location"], "/agents/a1");
    let set_cookie = answer.headers()["set-cookie"].to_str().expect("a cookie").to_string();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(set_cookie.contains(attribute), "{attribute}: {set_cookie}");
    }
    let cookie = set_cookie.split(';').next().expect("name=value").to_string();
    let page = http().get(format!("{}/agents/a1", control_plane.url)).header("cookie", &cookie).send().await.unwrap();
    let html = page.text().await.unwrap();
    let csrf =
        html.split("name=\"csrf\" value=\"").nth(1).and_then(|rest| rest.split('"').next()).expect("a CSRF token");
    (cookie, csrf.to_string())
}

/// One attack on the front door: what was sent, and what the control plane answered.
struct Attack {
    what: &'static str,
    request: reqwest::RequestBuilder,
    refused_with: StatusCode,
}

async fn cross_origin_writes_change_nothing(database: String, dir: tempfile::TempDir) {
    let control_plane = control_plane_with_a_workspace(&database, &dir);
    let (cookie, csrf) = sign_in(&control_plane).await;
    let url = &control_plane.url;
    let page_stop = format!("{url}/agents/a1/workspaces/ws/terminate");
    let api_stop = format!("{url}/api/v1/agents/a1/workspaces/ws/terminate");
    let evil = "http://evil.example";
    let form = "application/x-www-form-urlencoded";
    let attacks = vec![
        Attack {
            what: "a cross-origin form, with the session and the right CSRF token",
            request: http()
                .post(&page_stop)
                .header("origin", evil)
                .header("cookie", &cookie)
                .header("content-type", form)
                .body(format!("csrf={csrf}")),
            refused_with: StatusCode::FORBIDDEN,
        },
        Attack {
            what: "a cross-origin text/plain POST to the API, even with the admin token",
            request: http()
                .post(&api_stop)
                .header("origin", evil)
                .bearer_auth(&control_plane.admin_token)
                .header("content-type", "text/plain")
                .body("{}"),
            refused_with: StatusCode::FORBIDDEN,
        },
        Attack {
            what: "a cross-origin JSON POST to the API, even with the admin token",
            request: http()
                .post(&api_stop)
                .header("origin", evil)
                .bearer_auth(&control_plane.admin_token)
                .header("content-type", "application/json")
                .body("{}"),
            refused_with: StatusCode::FORBIDDEN,
        },
        Attack {
            what: "a same-origin form with the session but no CSRF token",
            request: http()
                .post(&page_stop)
                .header("origin", url)
                .header("cookie", &cookie)
                .header("content-type", form)
                .body(""),
            refused_with: StatusCode::FORBIDDEN,
        },
        Attack {
            what: "a same-origin form with the session and a wrong CSRF token",
            request: http()
                .post(&page_stop)
                .header("origin", url)
                .header("cookie", &cookie)
                .header("content-type", form)
                .body("csrf=guess"),
            refused_with: StatusCode::FORBIDDEN,
        },
        Attack {
            what: "a same-origin form with the CSRF token but no session",
            request: http()
                .post(&page_stop)
                .header("origin", url)
                .header("content-type", form)
                .body(format!("csrf={csrf}")),
            refused_with: StatusCode::UNAUTHORIZED,
        },
        Attack {
            what: "a form with the session that names no origin",
            request: http()
                .post(&page_stop)
                .header("cookie", &cookie)
                .header("content-type", form)
                .body(format!("csrf={csrf}")),
            refused_with: StatusCode::FORBIDDEN,
        },
        Attack {
            what: "a DNS-rebound form (Host evil.example), with session and token",
            request: http()
                .post(&page_stop)
                .header("host", "evil.example")
                .header("origin", "http://evil.example")
                .header("cookie", &cookie)
                .header("content-type", form)
                .body(format!("csrf={csrf}")),
            refused_with: StatusCode::FORBIDDEN,
        },
        Attack {
            what: "a text/plain POST to the API with the admin token, no origin",
            request: http()
                .post(&api_stop)
                .bearer_auth(&control_plane.admin_token)
                .header("content-type", "text/plain")
                .body("{}"),
            refused_with: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        },
        Attack {
            what: "the API with the page's session cookie instead of the token",
            request: http()
                .post(&api_stop)
                .header("cookie", &cookie)
                .header("content-type", "application/json")
                .body("{}"),
            refused_with: StatusCode::UNAUTHORIZED,
        },
    ];
    let total = attacks.len();
    let mut landed = Vec::new();
    for attack in attacks {
        let status = attack.request.send().await.expect("an answer").status();
        let state = desired(&control_plane);
        println!("  {:<75} {status}  desired: {state}", attack.what);
        if status != attack.refused_with || state != "Running" {
            landed.push(format!("{}: {status}, desired {state}", attack.what));
        }
    }
    println!(
        "front door ({database:.10}…): {total} attacks, {} refused, {} landed",
        total - landed.len(),
        landed.len()
    );
    assert!(landed.is_empty(), "{landed:#?}");

    // The page's own form, from its own origin, with its session and token, works.
    let own_form = |path: &str| {
        http()
            .post(format!("{url}{path}"))
            .header("origin", url)
            .header("cookie", &cookie)
            .header("content-type", form)
            .body(format!("csrf={csrf}"))
            .send()
    };
    let answer = own_form("/agents/a1/workspaces/ws/stop").await.unwrap();
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    assert_eq!(desired(&control_plane), "Stopped");

    // Signing out ends the session: its cookie opens nothing after.
    let out = own_form("/sign-out").await.unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(out.headers()["set-cookie"].to_str().unwrap().contains("Max-Age=0"));
    let page = http().get(format!("{url}/agents/a1")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER, "back to the sign-in form");
    let replay = own_form("/agents/a1/workspaces/ws/start").await.unwrap();
    assert_eq!(replay.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(desired(&control_plane), "Stopped");
}

#[tokio::test(flavor = "multi_thread")]
async fn cross_origin_writes_change_nothing_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    cross_origin_writes_change_nothing(sqlite(&dir), dir).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cross_origin_writes_change_nothing_on_postgres() {
    let database = support::postgres::fresh_database("front_door").await;
    cross_origin_writes_change_nothing(database, tempfile::tempdir().unwrap()).await;
}

/// On its first start without `--admin-token-file`, the control plane makes an admin token,
/// prints it once, and stores only its hash; a restart prints nothing and the token still works.
#[tokio::test(flavor = "multi_thread")]
async fn a_first_start_prints_the_admin_token_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("control-plane.log");
    let mut control_plane = ControlPlaneProcess::start_bare(&sqlite(&dir), log, &[], String::new());
    let printed = control_plane.printed();
    let token = printed.lines().find_map(|l| l.rsplit_once(": ").map(|(_, t)| t.trim().to_string())).expect("a token");
    assert!(token.len() >= 32, "{printed}");
    let refused = control_plane.try_cli(&["agents", "register", "a1"]);
    assert!(!refused.status.success(), "the CLI without the token is refused");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"), "{}", String::from_utf8_lossy(&refused.stderr));
    control_plane.admin_token = token.clone();
    control_plane.cli(&["agents", "register", "a1"]);
    control_plane.restart();
    assert_eq!(control_plane.printed().matches("admin token").count(), 1, "printed once: {}", control_plane.printed());
    control_plane.cli(&["agents", "register", "a2"]);
    let database = std::fs::read(dir.path().join("control-plane.db")).expect("the database");
    assert!(!database.windows(token.len()).any(|w| w == token.as_bytes()), "the token is stored hashed only");
    assert!(!control_plane.logs().contains(&token), "and never logged");
}

/// The list API answers a page at a time with a `Link` to the next; the CLI follows them all.
#[tokio::test(flavor = "multi_thread")]
async fn lists_come_in_pages_and_the_cli_reads_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = control_plane_with_a_workspace(&sqlite(&dir), &dir);
    let url = format!("{}/api/v1/agents/a1/workspaces", control_plane.url);
    let creations = (0..500).map(|i| {
        let request = http()
            .post(&url)
            .bearer_auth(&control_plane.admin_token)
            .json(&serde_json::json!({ "name": format!("p-{i:03}"), "image": "busybox:1.36" }));
        async move { request.send().await.expect("create").status() }
    });
    // 32 at a time: one address has its share of connections and requests in flight (128, 64).
    use futures::StreamExt;
    let statuses: Vec<StatusCode> = futures::stream::iter(creations).buffer_unordered(32).collect().await;
    assert!(statuses.iter().all(|status| *status == StatusCode::CREATED), "{statuses:?}");
    let first = http().get(format!("{url}?limit=200")).bearer_auth(&control_plane.admin_token).send().await.unwrap();
    let link = first.headers()["link"].to_str().unwrap().to_string();
    assert_eq!(link, "</api/v1/agents/a1/workspaces?after=p-199&limit=200>; rel=\"next\"");
    assert_eq!(first.json::<Vec<Value>>().await.unwrap().len(), 200);
    let listed: Vec<Value> =
        serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "a1", "list", "-o", "json"])).unwrap();
    assert_eq!(listed.len(), 501, "every page, the 500 and ws");
}

/// An agent chooses the names it reports, and an orphan's name becomes part of the page's
/// links: one shaped as a path (`../../b/workspaces/prod/terminate?`) would aim a button at
/// another agent's workspace. The control plane refuses a report naming anything Kubernetes
/// would not, stores nothing of it, and leaves the other agent's workspace as it was.
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_cannot_aim_the_pages_buttons_at_another_agent() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = control_plane_with_a_workspace(&sqlite(&dir), &dir);
    control_plane.cli(&["agents", "register", "b"]);
    control_plane.cli(&["workspaces", "--agent", "b", "create", "prod", "--image", "busybox:1.36"]);
    let rotated = control_plane.cli(&["agents", "rotate-token", "a1", "-o", "json"]);
    let token = serde_json::from_str::<Value>(&rotated).unwrap()["token"].as_str().unwrap().to_string();
    let reconcile = format!("{}{}", control_plane.url, wsync::protocol::RECONCILE_PATH);
    for (name, namespace) in [("x", "../../b/workspaces/prod/terminate?"), ("../../b/workspaces/prod/stop?", "ns")] {
        let report = serde_json::json!({ "update_type": "full", "workspace_agent_infos": [
            { "name": "ws", "namespace": "wsync-a1-ws" },
            { "name": name, "namespace": namespace },
        ]});
        let answer = http().post(&reconcile).bearer_auth(&token).json(&report).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
        let said = answer.text().await.unwrap();
        assert!(said.contains("workspace_agent_infos[1]") && !said.contains("../"), "{said}");
    }
    let orphans = control_plane.cli(&["workspaces", "--agent", "a1", "list", "--orphans", "-o", "json"]);
    assert_eq!(orphans.trim(), "[]", "nothing of the refused reports is kept");
    let prod: Value =
        serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "b", "get", "prod", "-o", "json"])).unwrap();
    assert_eq!(prod["desired_state"], "Running");
    let report = serde_json::json!({ "update_type": "full", "workspace_agent_infos": [
        { "name": "web.v2", "namespace": "restored" },
    ]});
    let answer = http().post(&reconcile).bearer_auth(&token).json(&report).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::CREATED, "a Deployment's name may hold dots");
}

/// A leaked admin token is replaced by writing a new one into `--admin-token-file` and
/// restarting: sessions opened with the old one end then. A restart with the same token
/// keeps them.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_admin_token_file_signs_every_session_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut control_plane = control_plane_with_a_workspace(&sqlite(&dir), &dir);
    let (cookie, _) = sign_in(&control_plane).await;
    let page = format!("{}/agents/a1", control_plane.url);
    let status = |cookie: String| {
        let request = http().get(&page).header("cookie", cookie);
        async move { request.send().await.expect("the page").status() }
    };
    assert_eq!(status(cookie.clone()).await, StatusCode::OK);
    control_plane.restart();
    assert_eq!(status(cookie.clone()).await, StatusCode::OK, "the same token keeps its sessions");
    control_plane.admin_token = format!("{}-replaced", control_plane.admin_token);
    std::fs::write(&control_plane.admin_token_file, &control_plane.admin_token).unwrap();
    control_plane.restart();
    assert_eq!(status(cookie).await, StatusCode::SEE_OTHER, "to the sign-in form");
    assert!(control_plane.logs().contains("its sessions are signed out"));
    let (fresh, _) = sign_in(&control_plane).await;
    assert_eq!(status(fresh).await, StatusCode::OK, "the new token signs in");
}
