//! Opening a workspace on a real node (#39): its owner reaches the port a real Pod serves,
//! in headless Chromium through the control plane's workspace host, and from the CLI with
//! `port-forward`, both through the real agent's tunnel and its gate; no Service, Ingress or
//! inbound port in the cluster. A WebSocket echoes through it, and `wsync workspaces ssh` opens a
//! real `ssh` session to the Pod's own sshd. Another user gets 404, and the workspace's page can read
//! neither the control plane's cookie nor its API.

use crate::support::browser::Browser;
use crate::support::workspace_streams::port_forward;
use crate::support::*;
use crate::*;
use serde_json::Value;
use std::process::Command;

/// hack/local-node.sh's workspace to open: a page and a WebSocket echo on 8080, sshd on 60022.
pub const OPENABLE_IMAGE: &str = "localhost/workspace:3";
pub const PAGE: &str = "Served from the workspace Pod";

pub fn openable_image() {
    static BUILT: std::sync::Once = std::sync::Once::new();
    BUILT.call_once(|| {
        let built = Command::new(format!("{ROOT}/hack/local-node.sh")).arg("workspace-image").status();
        assert!(built.is_ok_and(|s| s.success()), "building {OPENABLE_IMAGE}");
    });
}

/// `wsync <args>` as whoever holds `token`.
/// `wsync <args>` as whoever holds `token`, against `node`'s control plane and agent.
pub(crate) fn wsync_as(node: &Node, token: &str, args: &[&str]) -> Command {
    wsync_at(&node.control_plane.url, &node.id, token, args)
}

/// `wsync <args>` as whoever holds `token`, at `server`, for `agent`'s workspaces.
pub fn wsync_at(server: &str, agent: &str, token: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_wsync"));
    command
        .args(args)
        .env("WSYNC_SERVER", server)
        .env("WSYNC_TOKEN", token)
        .env("WSYNC_AGENT_ID", agent)
        .env_remove("WSYNC_ADMIN_TOKEN");
    command
}

/// A new user of `control_plane`: their token.
pub fn user(control_plane: &ControlPlaneProcess, name: &str) -> String {
    let created: Value =
        serde_json::from_str(&control_plane.cli(&["users", "create", name, "-o", "json"])).expect("json");
    created["token"].as_str().expect("a token").to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn its_owner_opens_a_real_pods_port_through_the_agents_tunnel_and_no_one_else_does() {
    if !node_up() {
        return;
    }
    openable_image();
    let node = Node::start_with("op", &["--workspaces-domain", "ws.localhost"]);
    let (alice, bob) = (user(&node.control_plane, "alice"), user(&node.control_plane, "bob"));
    let created =
        wsync_as(&node, &alice, &["workspaces", "create", "web", "--image", OPENABLE_IMAGE]).output().unwrap();
    assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    let running = node.actual("web", "Running").await;
    let url = running["endpoints"][0]["url"].as_str().expect("the IDE's URL").to_string();
    assert!(url.starts_with("http://8080-web-") && url.contains(".ws.localhost:"), "{url}");
    let namespace = running["namespace"].as_str().unwrap_or_default().to_string();
    let services = kubectl_ok(env(), &["-n", &namespace, "get", "services", "-o", "jsonpath={.items[*].spec.type}"]);
    assert!(services.split_whitespace().all(|t| t == "ClusterIP"), "nothing exposed: {services}");

    // The CLI: a local port that is the Pod's.
    let (mut forward, local) =
        port_forward(&mut wsync_as(&node, &alice, &["workspaces", "port-forward", "web", "0:8080"]));
    let page = eventually("the Pod's page through port-forward", LONG, || {
        let out = Command::new("curl").args(["-fsS", "--max-time", "5", &format!("http://{local}/")]).output().ok()?;
        let body = String::from_utf8_lossy(&out.stdout).to_string();
        body.contains(PAGE).then_some(body)
    })
    .await;
    assert!(page.contains(PAGE));
    forward.kill().unwrap();
    let _ = forward.wait();

    // ssh: a real session with the Pod's own sshd, this CLI its ProxyCommand; 4 MiB sent
    // through it reach the Pod whole (their md5 there is the md5 here).
    let pod = kubectl_ok(env(), &["-n", &namespace, "get", "pods", "-o", "jsonpath={.items[0].metadata.name}"]);
    let sent: Vec<u8> = (0..4 << 20).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let said = ssh_as(&node, &alice, "printf '%s on %s: ' $USER $(hostname); md5sum", &sent);
    let digest = String::from_utf8_lossy(&with_input(&mut Command::new("md5sum"), &sent).stdout).to_string();
    let digest = digest.split_whitespace().next().unwrap_or_default();
    assert_eq!(said.split_whitespace().collect::<Vec<_>>(), ["workspace", "on", &format!("{pod}:"), digest, "-"]);

    // A browser: signed in to the control plane, it opens the workspace's host (cross-site),
    // is handed a code there and back, and sees the Pod's page on the workspace's origin.
    let mut browser = Browser::launch();
    browser.sign_in_to(&node.control_plane.url, &alice, "/");
    assert!(browser.html().contains(&url), "the page links the workspace: {}", browser.html());
    browser.goto(&url);
    browser.wait_until("the Pod's page", &format!("document.body && document.body.innerText.includes('{PAGE}')"));
    assert!(browser.location().starts_with(&url), "on the workspace's own origin: {}", browser.location());
    assert_eq!(browser.eval("document.cookie"), Value::String(String::new()), "no cookie a script can read");
    // A WebSocket to the Pod's echo, both ways through the tunnel.
    browser.eval(
        "window.echo = 'pending'; const socket = new WebSocket('ws://' + location.host + '/'); \
         socket.onopen = () => socket.send('ping through the tunnel'); \
         socket.onmessage = m => { window.echo = m.data; socket.close(); }; \
         socket.onerror = () => window.echo = 'failed'",
    );
    browser.wait_until("the echo", "window.echo !== 'pending'");
    assert_eq!(browser.eval("window.echo").as_str(), Some("ping through the tunnel"));
    // Its code cannot call the control plane's API with the user's credentials.
    let api = format!("{}/api/v1/workspaces", node.control_plane.url);
    browser.eval(&format!(
        "window.answer = 'pending'; fetch('{api}', {{credentials: 'include'}}).then(r => r.status).then(\
         s => window.answer = 'status ' + s, e => window.answer = 'refused: ' + e.name)"
    ));
    browser.wait_until("the fetch to end", "window.answer !== 'pending'");
    let answer = browser.eval("window.answer");
    assert_eq!(answer.as_str(), Some("refused: TypeError"), "the browser kept the answer from the page: {answer}");
    // Not for want of a network: the same request without credentials or CORS reaches the
    // control plane, and the page gets an opaque answer it cannot read.
    browser.eval(&format!(
        "window.opaque = 'pending'; fetch('{api}', {{mode: 'no-cors'}}).then(r => window.opaque = r.type, \
         e => window.opaque = 'failed: ' + e.name)"
    ));
    browser.wait_until("the no-cors fetch to end", "window.opaque !== 'pending'");
    assert_eq!(browser.eval("window.opaque").as_str(), Some("opaque"));

    // Bob: the same 404 a missing workspace answers.
    let mut other = Browser::launch();
    other.sign_in_to(&node.control_plane.url, &bob, "/");
    other.goto(&url);
    other.wait_until("an answer", "document.readyState === 'complete' && document.body.innerText.length > 0");
    assert!(other.text().contains("No such workspace"), "{}", other.text());
    let refused = wsync_as(&node, &bob, &["workspaces", "port-forward", "web", "0:8080"]).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("404"));
    let refused = wsync_as(&node, &bob, &["workspaces", "ssh", "web", "--stdio"]).output().unwrap();
    assert!(!refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("404"));

    // The workspace's activity was recorded.
    let used = serde_json::from_str::<Value>(&node.cli(&["get", "web", "-o", "json"])).expect("json");
    assert!(used["last_activity_at"].as_i64().is_some(), "{used}");
    node.cli(&["terminate", "web"]);
    node.actual("web", "Terminated").await;
}

/// What `wsync workspaces ssh web -l workspace -- REMOTE` prints, `stdin` its input.
fn ssh_as(node: &Node, token: &str, remote: &str, stdin: &[u8]) -> String {
    ssh_to(node, token, "web", remote, stdin)
}

/// What `wsync workspaces ssh WORKSPACE -l workspace -- REMOTE` prints, `stdin` its input.
pub(crate) fn ssh_to(node: &Node, token: &str, workspace: &str, remote: &str, stdin: &[u8]) -> String {
    // No one's ssh config, no prompt, and a session that stops answering ends.
    let options = ["-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"];
    let lively = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=30", "-o", "ServerAliveInterval=5"];
    let mut args = vec!["workspaces", "ssh", workspace, "-l", "workspace", "--"];
    args.extend(options.iter().chain(&lively));
    args.extend(["-o", "LogLevel=error", remote]);
    let out = with_input(&mut wsync_as(node, token, &args), stdin);
    assert!(out.status.success(), "ssh: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Run `command` with `input` on its standard input, written while it runs.
fn with_input(command: &mut Command, input: &[u8]) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let mut stdin = child.stdin.take().expect("its stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("its output");
    let written = writer.join().is_ok_and(|written| written.is_ok());
    assert!(written, "the input was not all written: {}", String::from_utf8_lossy(&out.stderr));
    out
}
