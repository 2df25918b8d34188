//! The whole system for end-to-end tests: the real `wsync control-plane` on SQLite, the real
//! `wsync agent`, and a kubelet stand-in, against the local cluster.

use super::*;
use serde_json::Value;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(120);

/// How the agent reaches the control plane.
#[derive(Clone, Copy, PartialEq)]
enum Link {
    Direct,
    BehindProxy,
    Tls,
}

pub struct System {
    pub control_plane: ControlPlaneProcess,
    pub agent: AgentProcess,
    pub id: String,
    /// The control plane's database URL.
    pub database: String,
    _kubelet: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl System {
    pub async fn start(prefix: &str) -> Self {
        Self::start_with(prefix, &[]).await
    }

    /// `register`: extra arguments to `wsync agents register`.
    pub async fn start_with(prefix: &str, register: &[&str]) -> Self {
        Self::start_configured(prefix, register, &[]).await
    }

    /// `agent`: extra flags for `wsync agent`.
    pub async fn start_configured(prefix: &str, register: &[&str], agent: &[&str]) -> Self {
        Self::start_inner(prefix, register, agent, None, Link::Direct, None).await.0
    }

    /// The agent authenticated to the apiserver with `kubeconfig` (a ServiceAccount's).
    pub async fn start_as(prefix: &str, register: &[&str], agent: &[&str], kubeconfig: PathBuf) -> Self {
        Self::start_inner(prefix, register, agent, None, Link::Direct, Some(kubeconfig)).await.0
    }

    /// The control plane serving TLS with a throw-away CA, which the agent is given with
    /// `--control-plane-ca-file`.
    pub async fn start_over_tls(prefix: &str) -> Self {
        Self::start_inner(prefix, &[], &[], None, Link::Tls, None).await.0
    }

    /// With a fault proxy between the agent and the control plane; `database` is a URL of an
    /// empty database (SQLite in a temporary directory when None).
    pub async fn start_behind_proxy(prefix: &str, database: Option<String>) -> (Self, fault_proxy::FaultProxy) {
        let (system, proxy) =
            Self::start_inner(prefix, &[], &["--request-timeout", "2s"], database, Link::BehindProxy, None).await;
        (system, proxy.expect("a proxy"))
    }

    async fn start_inner(
        prefix: &str,
        register: &[&str],
        agent: &[&str],
        database: Option<String>,
        link: Link,
        kubeconfig: Option<PathBuf>,
    ) -> (Self, Option<fault_proxy::FaultProxy>) {
        let env = env();
        let id = unique_id(prefix);
        let dir = tempfile::tempdir().expect("tempdir");
        let database = database.unwrap_or_else(|| format!("sqlite://{}/control-plane.db", dir.path().display()));
        let intervals =
            ["--partial-reconciliation-interval-seconds", "1", "--full-reconciliation-interval-seconds", "60"];
        let log = dir.path().join("control-plane.log");
        let control_plane = match link {
            Link::Tls => ControlPlaneProcess::start_tls(&database, log, &tls::Tls::throwaway(dir.path()), &intervals),
            _ => ControlPlaneProcess::start(&database, log, &intervals),
        };
        let registered: Value =
            serde_json::from_str(&control_plane.cli(&[&["agents", "register", &id, "-o", "json"], register].concat()))
                .expect("json");
        let token = registered["token"].as_str().expect("a token").to_string();
        let proxy = match link {
            Link::BehindProxy => Some(fault_proxy::FaultProxy::start(&control_plane.url, None).await),
            _ => None,
        };
        let url = proxy.as_ref().map_or(control_plane.url.clone(), |p| p.url.clone());
        let ca = control_plane.ca_file.as_ref().map(|ca| ca.display().to_string());
        let agent_args = match &ca {
            Some(ca) => [agent, &["--control-plane-ca-file", ca]].concat(),
            None => agent.to_vec(),
        };
        let kubeconfig = kubeconfig.unwrap_or_else(|| env.agent_kubeconfig.clone());
        let agent = AgentProcess::start_as(kubeconfig, &id, &url, &token, &agent_args);
        let client = admin_client(env).await;
        let kubelet = tokio::spawn(kubelet::run(client, Some(format!("{LABEL_KEY}={id}"))));
        (Self { control_plane, agent, id, database, _kubelet: kubelet, _dir: dir }, proxy)
    }

    pub fn cli(&self, args: &[&str]) -> String {
        let mut full = vec!["workspaces", "--agent", &self.id];
        full.extend_from_slice(args);
        self.control_plane.cli(&full)
    }

    pub fn workspace(&self, name: &str) -> Value {
        serde_json::from_str(&self.cli(&["get", name, "-o", "json"])).expect("workspace json")
    }

    pub async fn wait_actual(&self, name: &str, actual: &str) -> Value {
        eventually(&format!("{name} to be {actual}"), LONG, || {
            let workspace = self.workspace(name);
            (workspace["actual_state"] == actual).then_some(workspace)
        })
        .await
    }
}
