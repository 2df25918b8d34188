//! Opening a workspace through the real control plane (#39): each port on a host of its own
//! under `--workspaces-domain`, its owner (or an admin) let in by a one-time code traded for
//! the host's own cookie, everyone else answered 404, and each request passed through the
//! agent's tunnel to the workspace's port, streamed, an upgrade spliced both ways. The agent
//! here is the test's own tunnel end, dialling a local server that stands for the Pod: the
//! real agent's gate is proven in the apiserver and node tiers.

use super::support::ControlPlaneProcess;
use super::workspace_support::*;
use super::{http, sqlite};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wsync::tunnel::OpenStream;

#[tokio::test(flavor = "multi_thread")]
async fn its_owner_opens_a_workspace_port_on_a_host_of_its_own_and_no_one_else_does() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(
        &sqlite(&dir),
        dir.path().join("cp.log"),
        &["--workspaces-domain", DOMAIN, "--tunnel-recheck", "300ms"],
    );
    let (agent_token, alice, bob) = alice_and_bob_with_a_workspace(&control_plane);
    let tag = wsync::control_plane::decisions::workspace_hosts::agent_tag("a1");
    let host = format!("8080-ide-{tag}.{DOMAIN}");
    let port = control_plane.url.rsplit(':').next().unwrap().to_string();
    let url = format!("http://{host}:{port}");
    let browser = browser(&control_plane, &[&host, &format!("9999-ide-{tag}.{DOMAIN}")]);

    // Shown: the workspace's declared ports, the web one at its URL.
    let shown = workspace_json(&control_plane, "ide");
    let endpoints =
        json!([{"name": "ide", "port": 8080, "url": format!("{url}/")}, {"name": "ssh", "port": 60022, "url": null}]);
    assert_eq!(shown["endpoints"], endpoints, "{shown}");

    // Not running yet: a page that says so, never a bare 502; and nothing is asked of the agent.
    let pod = workspace_server().await;
    let tunnel = agent_tunnel(&control_plane, &agent_token, pod).await;
    let alice_session = page_session(&control_plane, &alice).await;
    let (sign_in, state) = to_sign_in(&browser, &control_plane, &url).await;
    assert!(state.starts_with("wsync_workspace_state="), "{state}");
    let to_code = browser.get(&sign_in).header("cookie", &alice_session).send().await.unwrap();
    assert_eq!(to_code.status(), StatusCode::SEE_OTHER);
    let auth = location(&to_code);
    assert!(auth.starts_with(&format!("{url}/.wsync/auth?code=")), "{auth}");
    // The code in another browser (without the state, or with another) opens nothing: no one
    // can sign someone else in to their workspace with a code of their own.
    for other_browser in ["", "wsync_workspace_state=0123456789abcdef"] {
        let planted = browser.get(&auth).header("cookie", other_browser).send().await.unwrap();
        assert_eq!(planted.status(), StatusCode::BAD_REQUEST, "{other_browser:?}");
    }
    let signed_in = browser.get(&auth).header("cookie", &state).send().await.unwrap();
    assert_eq!(signed_in.status(), StatusCode::SEE_OTHER);
    assert_eq!(location(&signed_in), "/hello?x=1", "on to where the sign-in began");
    let cookies: Vec<String> =
        signed_in.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_string()).collect();
    let host_cookie = cookies.iter().find(|c| c.starts_with("wsync_workspace=")).unwrap().clone();
    assert!(cookies.iter().any(|c| c.starts_with("wsync_workspace_state=;") && c.contains("Max-Age=0")), "{cookies:?}");
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(host_cookie.contains(attribute), "{host_cookie}");
    }
    assert!(!host_cookie.to_ascii_lowercase().contains("domain"), "host-only: {host_cookie}");
    let host_cookie = cookie_pair(&host_cookie);
    let again = browser.get(&auth).header("cookie", &state).send().await.unwrap();
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

    // Another site's pages, and every other workspace's (all one site), drive nothing: no
    // write, no WebSocket, no fetch; a link they follow still navigates.
    let own = |request: reqwest::RequestBuilder| request.header("cookie", &host_cookie);
    let foreign = format!("http://3000-other-{tag}.{DOMAIN}:{port}");
    let refusals = [
        own(browser.post(format!("{url}/upload")).header("origin", &foreign).body("x")),
        own(browser
            .get(format!("{url}/echo"))
            .header("origin", &foreign)
            .header("connection", "upgrade")
            .header("upgrade", "echo")),
        own(browser.get(format!("{url}/hello")).header("sec-fetch-site", "same-site").header("sec-fetch-mode", "cors")),
        own(browser
            .get(format!("{url}/hello"))
            .header("sec-fetch-site", "cross-site")
            .header("sec-fetch-mode", "no-cors")),
    ];
    for request in refusals {
        assert_eq!(request.send().await.unwrap().status(), StatusCode::FORBIDDEN);
    }
    let navigation = own(browser
        .get(format!("{url}/hello"))
        .header("sec-fetch-site", "cross-site")
        .header("sec-fetch-mode", "navigate"));
    assert_eq!(navigation.send().await.unwrap().status(), StatusCode::OK);
    let same_origin = own(browser.post(format!("{url}/upload")).header("origin", &url).body("xy"));
    assert_eq!(same_origin.send().await.unwrap().text().await.unwrap(), "2");

    // A workspace sets cookies on its own host only.
    let set = own(browser.get(format!("{url}/set-cookie"))).send().await.unwrap();
    let set: Vec<&str> = set.headers().get_all("set-cookie").iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(set, vec!["mine=1; Path=/"]);
    // A cookie that is not ASCII hides nothing.
    let mut odd = reqwest::header::HeaderMap::new();
    odd.insert(
        "cookie",
        reqwest::header::HeaderValue::from_bytes(format!("theirs=\u{e9}t\u{e9}; {host_cookie}").as_bytes()).unwrap(),
    );
    let answer = browser.get(format!("{url}/hello")).headers(odd).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let seen: Value = answer.json().await.unwrap();
    assert_eq!(seen["cookie"], "theirs=\u{e9}t\u{e9}", "the rest passed on: {seen}");

    // An undeclared port is refused by the agent: the page says so.
    let other = format!("9999-ide-{tag}.{DOMAIN}");
    let cookie = open_host(&browser, &control_plane, &format!("http://{other}:{port}"), &alice_session).await;
    let refused_port = browser.get(format!("http://{other}:{port}/")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(refused_port.status(), StatusCode::NOT_FOUND);
    assert!(refused_port.text().await.unwrap().contains("declares no port 9999"));

    // Bob: no code for alice's workspace, the same 404 as a missing one; a forged cookie and
    // alice's cookie on another host send a browser to sign in.
    let bob_session = page_session(&control_plane, &bob).await;
    let (sign_in, _) = to_sign_in(&browser, &control_plane, &url).await;
    let refused = browser.get(&sign_in).header("cookie", &bob_session).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::NOT_FOUND);
    let nothing = sign_in.replace("8080-ide-", "8080-nothing-");
    let missing = browser.get(&nothing).header("cookie", &bob_session).send().await.unwrap();
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
    let (sign_in, _) = to_sign_in(&browser, &control_plane, &url).await;
    let admin = browser.get(&sign_in).header("cookie", &admin_session).send().await.unwrap();
    assert_eq!(admin.status(), StatusCode::SEE_OTHER);

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
    // The WebSocket-like stream opened with that cookie closes too, within a recheck.
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(5), raw.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the upgraded stream outlived the sign-out");

    // The agent gone: a page that says so.
    let alice_session = page_session(&control_plane, &alice).await;
    let host_cookie = open_host(&browser, &control_plane, &url, &alice_session).await;
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
