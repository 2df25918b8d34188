//! Faults of the whole cluster (issue #18), in a binary of their own so that no other test
//! sees them (binaries run one after another): the CRD deleted while the agent runs, and the
//! apiserver restarted. The two take turns.

#[path = "support/mod.rs"]
pub mod support;

use std::time::{Duration, Instant};
use support::stub::{Script, StubControlPlane};
use support::*;

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const LONG: Duration = Duration::from_secs(60);
const CRD: &str = "crd/workspacesyncstatuses.wsync.dev";

fn ready(port: u16) -> bool {
    http_ok(&format!("http://127.0.0.1:{port}/readyz"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_crd_turns_readiness_off_and_syncing_resumes_when_it_is_back() {
    let _turn = TURN.lock().await;
    let env = env();
    let id = unique_id("cd");
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let agent = AgentProcess::start(env, &id, &stub.url, &[]);
    eventually("ready", LONG, || ready(agent.metrics_port).then_some(())).await;

    kubectl_ok(env, &["delete", CRD, "--wait=true"]);
    eventually("not ready", LONG, || (!ready(agent.metrics_port)).then_some(())).await;
    assert!(agent.logs().contains("the WorkspaceSyncStatus CRD was deleted"), "{}", agent.logs());

    let crds = concat!(env!("CARGO_MANIFEST_DIR"), "/crds");
    kubectl_ok(env, &["apply", "-k", crds]);
    kubectl_ok(env, &["wait", "--for=condition=Established", CRD, "--timeout=30s"]);
    eventually("the WorkspaceSyncStatus written again", LONG, || {
        (condition(&wss_json(env, &id)?, "Synced")?["status"] == "True").then_some(())
    })
    .await;
    eventually("ready again", LONG, || ready(agent.metrics_port).then_some(())).await;
    let seen = stub.count();
    stub.wait_for("cycles after the CRD came back", seen + 2, LONG, |_| true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_an_apiserver_restart_a_change_made_meanwhile_is_applied() {
    let _turn = TURN.lock().await;
    let env = env();
    let id = unique_id("ar");
    let ns = format!("{id}-1");
    create_workspace(&admin_client(env).await, &ns, "ws", Some(&id)).await;
    let script = |members: &[&str]| {
        let mut script = Script::with_intervals(300, 1);
        let members: Vec<String> = members.iter().map(|m| config_map(&ns, m)).collect();
        script.configs.insert((ns.clone(), "ws".into()), inventory_config(&ns, "inv", &members));
        script.always_return.push((ns.clone(), "ws".into()));
        script
    };
    let stub = StubControlPlane::start(script(&["cfg"])).await;
    let agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let exists = |name: &str| kubectl(env, &["-n", &ns, "get", "configmap", name]).status.success();
    eventually("the first config", LONG, || exists("cfg").then_some(())).await;

    let restart = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/local-cluster.sh"))
        .arg("restart")
        .status()
        .expect("hack/local-cluster.sh restart");
    assert!(restart.success());
    stub.set_script(script(&["cfg", "after-restart"]));
    let back = Instant::now();
    eventually("the change applied after the restart", Duration::from_secs(120), || {
        exists("after-restart").then_some(())
    })
    .await;
    eprintln!("apiserver restart: converged {:.1} s after the apiserver was back", back.elapsed().as_secs_f64());
    eventually("ready", LONG, || ready(agent.metrics_port).then_some(())).await;
}
