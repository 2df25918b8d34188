//! Two agents in one cluster with Helm (#37): two releases of the chart, both named by the
//! default `wsync-agent`, in two namespaces, for two agent ids, installed with Helm's own SDK
//! and nothing but the values each needs; both sync. The cluster-scoped objects are the
//! releases' own, and the CRD, already in the cluster, is left to whoever installed it.

use crate::helm_chart::{CHART, agent_command, by_name, helm};
use crate::support::stub::{Script, StubControlPlane};
use crate::support::*;
use serde_json::json;
use std::time::Duration;

const RELEASE: &str = "wsync-agent";

/// A release, uninstalled when the test ends, passed or not.
struct Release {
    namespace: String,
    agent: Option<std::process::Child>,
}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(mut agent) = self.agent.take() {
            let _ = agent.kill();
            let _ = agent.wait();
        }
        let _ = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/helm.sh"))
            .args(["uninstall", CHART, "{}", &self.namespace, RELEASE])
            .env("KUBECONFIG", &env().admin_kubeconfig)
            .output();
        let _ = kubectl(env(), &["delete", "namespace", &self.namespace, "--wait=false"]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_releases_install_side_by_side_with_defaults_and_both_sync() {
    let env = env();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut releases = Vec::new();
    let mut stubs = Vec::new();
    for team in ["a", "b"] {
        let id = unique_id(&format!("team-{team}"));
        let namespace = id.clone();
        let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
        let values = json!({ "agentId": id, "controlPlane": { "url": stub.url }, "token": { "value": "stub-token" } });
        let mut release = Release { namespace: namespace.clone(), agent: None };
        let installed = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/helm.sh"))
            .args(["install", CHART, &values.to_string(), &namespace, RELEASE])
            .env("KUBECONFIG", &env.admin_kubeconfig)
            .output()
            .expect("hack/helm.sh install");
        let said =
            format!("{}{}", String::from_utf8_lossy(&installed.stdout), String::from_utf8_lossy(&installed.stderr));
        assert!(installed.status.success() && said.contains("\"deployed\""), "helm install in {namespace}: {said}");
        kubectl_ok(env, &["label", "namespace", &namespace, &format!("{TEST_LABEL}={id}")]);

        // The agent as the release's Deployment runs it, as its ServiceAccount.
        let rendered = helm(&["render", CHART, &values.to_string(), &namespace]);
        let deployment = by_name(&rendered).remove(&format!("Deployment/{RELEASE}")).expect("the Deployment");
        let token = kubectl_ok(env, &["-n", &namespace, "create", "token", RELEASE, "--duration=1h"]);
        let admin = std::fs::read_to_string(&env.admin_kubeconfig).expect("admin kubeconfig");
        let admin_token = admin.lines().find_map(|l| l.trim().strip_prefix("token: ")).expect("admin token");
        let kubeconfig = dir.path().join(format!("{team}.kubeconfig"));
        std::fs::write(&kubeconfig, admin.replace(admin_token, token.trim())).expect("kubeconfig");
        let token_file = dir.path().join(format!("{team}.token"));
        std::fs::write(&token_file, "stub-token").expect("token");
        let log = dir.path().join(format!("{team}.log"));
        let agent = agent_command(&deployment, &namespace, &token_file)
            .env("WSYNC_METRICS_ADDRESS", format!("127.0.0.1:{}", free_port()))
            .env("WSYNC_ADMIN_ADDRESS", format!("127.0.0.1:{}", free_port()))
            .env("KUBECONFIG", &kubeconfig)
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("the agent");
        release.agent = Some(agent);
        releases.push((release, log, id));
        stubs.push(stub);
    }
    for ((_, log, id), stub) in releases.iter().zip(&stubs) {
        let synced = tokio::time::timeout(Duration::from_secs(60), async {
            while stub.count() < 2 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        let said = std::fs::read_to_string(log).unwrap_or_default();
        assert!(synced.is_ok(), "agent {id} never synced:\n{said}");
    }
    let roles = kubectl_ok(env, &["get", "clusterrolebinding", "-o", "name"]);
    for (release, _, _) in &releases {
        let own = format!("clusterrolebinding.rbac.authorization.k8s.io/{RELEASE}-{}", release.namespace);
        assert!(roles.contains(&own), "{own} missing from:\n{roles}");
    }
}
