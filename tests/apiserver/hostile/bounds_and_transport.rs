//! How much, how far a bad info reaches, and how the agent talks to the control plane (DESIGN
//! §2, "Trust": how much, blast radius, transport): rules 5 to 8, and the attacks that
//! crashed the agent with an interval, a YAML bomb or a huge answer.

use super::{Arena, LONG, config, info};
use crate::support::stub::{Reply, StubControlPlane};
use crate::support::*;
use serde_json::json;
use std::time::Duration;

fn synced_reason(arena: &Arena) -> Option<String> {
    Some(condition(&wss_json(arena.env, &arena.id)?, "Synced")?["reason"].as_str()?.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn intervals_out_of_bounds_keep_the_last_good_settings() {
    let mut arena = Arena::start("iv", &[], &[]).await;
    arena.good_syncs_on().await;
    arena.count_attacks(2);
    arena.set_settings(json!({ "full_reconciliation_interval_seconds": 1_000_000_000_000u64,
                               "partial_reconciliation_interval_seconds": 1 }));
    let rejected = |arena: &Arena| {
        let wss = wss_json(arena.env, &arena.id)?;
        let held = wss["status"]["fullReconciliationIntervalSeconds"] == 300;
        let message = condition(&wss, "SettingsRejected")?["message"].as_str()?.to_string();
        held.then_some(message)
    };
    let message = eventually("the settings refused on the status", LONG, || rejected(&arena)).await;
    assert!(message.contains("out of bounds"), "{message}");
    arena.refused_one();
    // A negative interval cannot even be read: the answer is handled all the same.
    arena.set_settings(
        json!({ "full_reconciliation_interval_seconds": -1, "partial_reconciliation_interval_seconds": 1 }),
    );
    eventually("unreadable settings refused", LONG, || rejected(&arena)?.contains("unreadable").then_some(())).await;
    arena.refused_one();
    arena.good_syncs_on().await;
    arena.finish("intervals out of bounds");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_yaml_alias_bomb_is_refused_within_the_memory_budget() {
    let mut arena = Arena::start("yb", &[], &[]).await;
    let a1 = arena.attack_namespace(1);
    let items = "x,".repeat(3_000);
    let aliases = "*a,".repeat(3_000);
    let bomb = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bomb\n  namespace: {a1}\ndata:\n  list: &a [{items}]\n  bomb: [{aliases}]\n"
    );
    assert!(bomb.len() < 20_000, "a 14 KB stream");
    arena.attack(vec![info(&a1, "bomb", &bomb)]);
    arena.refusal("bomb", "invalid YAML").await;
    arena.good_syncs_on().await;
    arena.absent(&a1, "configmap", "bomb");
    arena.finish("a YAML alias bomb");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_past_the_cap_is_never_read_whole() {
    let mut arena = Arena::start("hb", &[], &[]).await;
    arena.good_syncs_on().await;
    arena.count_attacks(1);
    arena.stub.set_responder(|_| Reply::streamed(300 * 1024 * 1024));
    eventually("the cycle failed for the size", LONG, || {
        (synced_reason(&arena)? == "ControlPlaneResponseTooLarge").then_some(())
    })
    .await;
    arena.refused_one();
    let seen = arena.stub.count();
    arena.stub.wait_for("two more oversized answers", seen + 2, LONG, |_| true).await;
    // The control plane behaves again: syncing goes on.
    let good = arena.good.clone();
    let good_info = info(&good, "ws", &inventory_config(&good, "ws-inventory", &[config_map(&good, "cfg")]));
    arena.stub.set_responder(move |_| {
        Reply::status(201, &json!({ "workspace_rails_infos": [good_info.clone()] }).to_string())
    });
    arena.good_syncs_on().await;
    arena.finish("a 300 MB answer");
}

/// One answer of 100,000 Terminated infos for workspaces that do not exist (and the good one):
/// read in linear
/// time up to its bound, at most 1,000 terminations tracked, so the status stays writable and
/// says what waits; the good workspace syncs on.
#[tokio::test(flavor = "multi_thread")]
async fn an_answer_of_100000_terminations_is_bounded_and_said() {
    let env = env();
    let mut arena = Arena::start("ht", &[], &[]).await;
    arena.good_syncs_on().await;
    arena.count_attacks(1);
    let good = arena.good.clone();
    let mut infos = vec![info(&good, "ws", &inventory_config(&good, "ws-inventory", &[config_map(&good, "cfg")]))];
    infos.extend((0..100_000).map(|i| {
        let mut gone = info(&format!("{}-gone-{i}", arena.id), "ws", "");
        gone["desired_state"] = json!("Terminated");
        gone
    }));
    let body = json!({ "workspace_rails_infos": infos }).to_string();
    arena.stub.set_responder(move |_| Reply::status(201, &body));
    let said = eventually("the AnswerLimited condition", LONG, || {
        let wss = wss_json(env, &arena.id)?;
        Some(condition(&wss, "AnswerLimited")?["message"].as_str()?.to_string())
    })
    .await;
    assert!(said.contains("50001 infos past") && said.contains("48999 terminations wait"), "{said}");
    let wss = wss_json(env, &arena.id).expect("wss");
    let tracked = wss["status"]["terminations"].as_object().map_or(0, |t| t.len());
    assert_eq!(tracked, 1_000, "terminations are bounded in the status");
    let seen = arena.stub.count();
    arena.stub.wait_for("two more cycles", seen + 2, LONG, |_| true).await;
    let logs = arena.agent.logs();
    assert!(!logs.contains("Request entity too large"), "the status stayed writable");
    arena.refused_one();
    arena.finish("an answer of 100,000 terminations");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_info_fails_only_its_workspace() {
    let env = env();
    let mut arena = Arena::start("bi", &[], &[]).await;
    let (a1, a2, a3) = (arena.attack_namespace(1), arena.attack_namespace(2), arena.attack_namespace(3));
    let mut unknown = info(&a1, "unknown", &config(&a1, &[config_map(&a1, "cfg")]));
    unknown["desired_state"] = json!("Exploded");
    let malformed = info("NOT_A_LABEL", "malformed", &config(&a1, &[]));
    let mut terminate = info("Bad_Terminate", "gone", "");
    terminate["desired_state"] = json!("Terminated");
    // Two infos for one workspace: the last wins, and only it is applied.
    let earlier = info(&a2, "twice", &config(&a2, &[config_map(&a2, "first")]));
    let later = info(&a2, "twice", &config(&a2, &[config_map(&a2, "last")]));
    let mut typed = info(&a3, "typed", "");
    typed["config_to_apply"] = json!(42);
    arena.attack(vec![unknown, malformed, terminate, earlier, typed]);
    arena.replace_attack({
        let mut infos = arena.attacks_now();
        infos.push(later);
        infos
    });
    arena.refusal("unknown", "Exploded").await;
    arena.refusal("malformed", "not a DNS label").await;
    arena.refusal("gone", "not a DNS label").await;
    arena.refusal("typed", "invalid type").await;
    arena.good_syncs_on().await;
    eventually("the last info applied", LONG, || {
        kubectl(env, &["-n", &a2, "get", "configmap", "last"]).status.success().then_some(())
    })
    .await;
    arena.absent(&a2, "configmap", "first");
    arena.refused_one();
    arena.absent(&a1, "configmap", "cfg");
    let wss = wss_json(env, &arena.id).expect("wss");
    assert_eq!(condition(&wss, "Synced").expect("Synced")["status"], "True", "no cycle failed");
    arena.finish("bad infos");
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_http_beyond_loopback_is_refused_at_start() {
    let mut arena = Arena::start("ph", &[], &[]).await;
    arena.good_syncs_on().await;
    arena.count_attacks(1);
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("token"), "t").expect("token");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(["agent", "--agent-id", "plain", "--control-plane-url", "http://control-plane.example.invalid"])
        .arg("--token-file")
        .arg(dir.path().join("token"))
        .env("KUBECONFIG", &arena.env.agent_kubeconfig)
        .output()
        .expect("run wsync agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--allow-insecure-control-plane"), "{stderr}");
    arena.refused_one();
    arena.finish("plain HTTP");
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_are_never_followed() {
    let mut arena = Arena::start("rd", &[], &[]).await;
    arena.good_syncs_on().await;
    arena.count_attacks(1);
    let elsewhere = StubControlPlane::start(Default::default()).await;
    let location = format!("{}{}", elsewhere.url, wsync::protocol::RECONCILE_PATH);
    arena.stub.set_responder(move |_| Reply::redirect(&location));
    eventually("the cycle failed for the redirect", LONG, || {
        (synced_reason(&arena)? == "ControlPlaneRedirected").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(elsewhere.count(), 0, "the redirect's target never heard from the agent");
    arena.refused_one();
    arena.finish("a redirect");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_log_level_changes_only_on_the_admin_address() {
    let mut arena = Arena::start("ll", &[], &[]).await;
    arena.good_syncs_on().await;
    arena.count_attacks(1);
    wsync::runtime::install_crypto_provider();
    let client = reqwest::Client::new();
    let put = |port: u16| client.put(format!("http://127.0.0.1:{port}/loglevel")).body("trace").send();
    assert_eq!(put(arena.agent.metrics_port).await.expect("PUT").status().as_u16(), 404, "not on the metrics port");
    assert_eq!(put(arena.agent.admin_port).await.expect("PUT").status().as_u16(), 200, "on the admin address");
    arena.refused_one();
    arena.finish("PUT /loglevel from the network");
}
