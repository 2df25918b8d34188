//! Two control-plane processes on one PostgreSQL (#39): the agent's tunnel is held by one, and
//! a browser or the CLI that reaches the other opens the workspace all the same, forwarded
//! through the holder. Kill the holder: the other says the agent is not connected (a page,
//! never a bare error) until the agent opens its tunnel again there, and then it opens again.

use super::support::ControlPlaneProcess;
use super::support::postgres::{EXCLUSIVE, fresh_database};
use super::support::workspace_streams::through_stdio;
use super::workspace_support::*;
use reqwest::StatusCode;
use serde_json::Value;

fn port_of(control_plane: &ControlPlaneProcess) -> String {
    control_plane.url.rsplit(':').next().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_opens_through_either_process_whichever_holds_the_tunnel() {
    let _shared = EXCLUSIVE.lock().await;
    let database = fresh_database("tunnel_processes").await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("forward-secret");
    std::fs::write(&secret, super::support::secret_token("forward")).unwrap();
    let secret = secret.display().to_string();
    let flags = ["--workspaces-domain", DOMAIN, "--advertise-url", "{url}", "--forward-secret-file", &secret];
    let first = ControlPlaneProcess::start(&database, dir.path().join("first.log"), &flags);
    let second = ControlPlaneProcess::start(&database, dir.path().join("second.log"), &flags);
    let (agent_token, alice, _) = alice_and_bob_with_a_workspace(&first);
    report_running(&first, &agent_token, "ide", 1).await;
    let pod = workspace_server().await;
    let tunnel = agent_tunnel(&first, &agent_token, pod).await;

    // Through the second process, which holds no tunnel: the CLI and a browser.
    let proxy = wsync_as(&second, &alice, &["workspaces", "--agent", "a1", "ssh", "ide", "--stdio", "--port", "8080"]);
    let answer = through_stdio(proxy, b"GET /via-second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("/via-second"), "{answer}");

    let tag = wsync::control_plane::decisions::workspace_hosts::agent_tag("a1");
    let host = format!("8080-ide-{tag}.{DOMAIN}");
    let url = format!("http://{host}:{}", port_of(&second));
    let browser = browser(&second, &[&host]);
    let session = page_session(&second, &alice).await;
    let cookie = open_host(&browser, &second, &url, &session).await;
    let page = browser.get(format!("{url}/through-second")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let seen: Value = page.json().await.unwrap();
    assert_eq!(seen["path"], "/through-second");
    assert!(tunnel.asked.lock().unwrap().len() >= 2, "both streams went through the one tunnel");
    // The agent's refusal comes back through the forward, by name.
    let undeclared =
        wsync_as(&second, &alice, &["workspaces", "--agent", "a1", "port-forward", "ide", "0:9999"]).output().unwrap();
    assert!(String::from_utf8_lossy(&undeclared.stderr).contains("declares no port 9999"));
    // A forward not signed with the processes' secret, for that process, now, opens nothing.
    let forward = format!("{}/api/v1/internal/streams", first.url);
    let asked = r#"{"namespace":"wsync-a1-ide","workspace":"ide","port":8080}"#;
    for (signature, process) in [("00", "anything"), ("", ""), ("zz", "x")] {
        let answer = super::http()
            .get(&forward)
            .bearer_auth(signature)
            .header("wsync-forward-process", process)
            .header("wsync-forward-time", wsync::control_plane::model::now_ms().to_string())
            .header("wsync-agent", "a1")
            .header("wsync-open-stream", asked)
            .header("connection", "upgrade")
            .header("upgrade", "wsync-forward")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    }

    // The holder dies: the second says so, then the agent's tunnel there opens it again.
    drop(first);
    tunnel.task.abort();
    let gone = browser.get(format!("{url}/")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(gone.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(gone.text().await.unwrap().contains("not connected"));
    let _again = agent_tunnel(&second, &agent_token, pod).await;
    let back = browser.get(format!("{url}/back")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(back.status(), StatusCode::OK, "open again through the new holder");
    let seen: Value = back.json().await.unwrap();
    assert_eq!(seen["path"], "/back");
}
