//! The CRD deleted while the agent runs (issue #18): `/readyz` turns false and the agent says
//! why; when the CRD is back, it writes its WorkspaceSyncStatus again and syncs on. Its own
//! binary, so that it runs after the real-apiserver tier: deleting the CRD deletes every
//! agent's WorkspaceSyncStatus, which no other test may see.

#[path = "support/mod.rs"]
mod support;

use std::time::Duration;
use support::stub::{Script, StubControlPlane};
use support::*;

const LONG: Duration = Duration::from_secs(60);
const CRD: &str = "crd/workspacesyncstatuses.wsync.dev";

fn ready(port: u16) -> bool {
    http_ok(&format!("http://127.0.0.1:{port}/readyz"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_crd_turns_readiness_off_and_syncing_resumes_when_it_is_back() {
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
