//! Two control-plane processes on one PostgreSQL, on the real node (#39). The real agent
//! reaches them through a balancer, as it would through a Service, and its tunnel lands on one
//! of them. The CLI, through the other, opens the workspace's Pod, forwarded through the
//! holder. Kill the holder: the agent's tunnel opens at the survivor, and the workspace opens
//! again there. No stand-in anywhere.

use crate::opening::{OPENABLE_IMAGE, PAGE, openable_image, user, wsync_at};
use crate::support::balancer::Balancer;
use crate::support::postgres::fresh_database;
use crate::support::workspace_streams::through_stdio;
use crate::support::*;
use crate::*;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn the_workspace_opens_again_after_the_process_holding_its_tunnel_is_killed() {
    if !node_up() {
        return;
    }
    openable_image();
    let database = fresh_database("node_processes").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let secret = dir.path().join("forward-secret");
    std::fs::write(&secret, secret_token("forward")).expect("the forward secret");
    let secret = secret.display().to_string();
    let flags = [
        &CONTROL_PLANE_FLAGS[..],
        &["--workspaces-domain", "ws.localhost", "--advertise-url", "{url}", "--forward-secret-file", &secret],
    ]
    .concat();
    let mut processes = [
        Some(ControlPlaneProcess::start(&database, dir.path().join("first.log"), &flags)),
        Some(ControlPlaneProcess::start(&database, dir.path().join("second.log"), &flags)),
    ];
    let first = processes[0].as_ref().expect("the first").url.clone();
    let second = processes[1].as_ref().expect("the second").url.clone();
    let balancer = Balancer::start(&[&first, &second]).await;
    let admin = processes[0].as_ref().expect("the first");
    let id = unique_id("twice");
    let registered: Value = serde_json::from_str(&admin.cli(&["agents", "register", &id, "-o", "json"])).expect("json");
    let token = registered["token"].as_str().expect("its token");
    let _agent = AgentProcess::start_with_token(env(), &id, &balancer.url, token, &[]);
    let alice = user(admin, "alice");
    let created = wsync_at(&first, &id, &alice, &["workspaces", "create", "web", "--image", OPENABLE_IMAGE]).output();
    assert!(created.is_ok_and(|out| out.status.success()), "alice creates web");
    eventually("web to run", LONG, || {
        let out = wsync_at(&first, &id, &alice, &["workspaces", "get", "web", "-o", "json"]).output().ok()?;
        let web: Value = serde_json::from_slice(&out.stdout).ok()?;
        (web["actual_state"] == "Running").then_some(())
    })
    .await;

    // The tunnel is held by one process; the CLI reaches the Pod through the other.
    let opened = format!("an agent's tunnel opened agent={id}");
    let tunnels_opened = |process: &Option<ControlPlaneProcess>| {
        process.as_ref().map_or(0, |process| process.logs().matches(&opened).count())
    };
    let holder = eventually("the agent's tunnel", LONG, || {
        let counts: Vec<usize> = processes.iter().map(tunnels_opened).collect();
        assert!(counts.iter().sum::<usize>() <= 1, "the tunnel opened once, at one process: {counts:?}");
        counts.iter().position(|&count| count == 1)
    })
    .await;
    let survivor = 1 - holder;
    let survivor_url = if holder == 0 { &second } else { &first };
    // The holder logs the tunnel before it records itself for forwards: a moment later.
    let page = eventually_page(survivor_url, &id, &alice, LONG).await;
    assert!(page.contains(PAGE), "through the process without the tunnel: {page}");
    assert_eq!(tunnels_opened(&processes[survivor]), 0, "forwarded, not opened there");

    // The holder is killed; the agent opens its tunnel at the survivor, and web opens again.
    let killed = std::time::Instant::now();
    processes[holder] = None;
    eventually_page(survivor_url, &id, &alice, LONG).await;
    eprintln!("web opened again {:?} after the holder was killed", killed.elapsed());
    assert_eq!(tunnels_opened(&processes[survivor]), 1, "the agent's tunnel opened at the survivor");
}

/// The Pod's page through `server`, once it comes; panics with the last answer after `within`.
async fn eventually_page(server: &str, agent: &str, token: &str, within: std::time::Duration) -> String {
    let deadline = std::time::Instant::now() + within;
    loop {
        let page = page_through(server, agent, token).await;
        if page.contains(PAGE) {
            return page;
        }
        assert!(std::time::Instant::now() < deadline, "web did not open; the last answer: {page}");
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The Pod's page, asked through `wsync workspaces ssh web --stdio --port 8080` at `server`;
/// what came back, or the refusal.
async fn page_through(server: &str, agent: &str, token: &str) -> String {
    let stdio = wsync_at(server, agent, token, &["workspaces", "ssh", "web", "--stdio", "--port", "8080"]);
    through_stdio(stdio, b"GET / HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n").await
}
