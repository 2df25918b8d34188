//! The sync loop's own Kubernetes calls: its WorkspaceSyncStatus, the workspace Deployments'
//! watch and LIST, and Events. The applier's calls are its own (`agent::apply`).

pub mod endpoints;
pub mod events;
pub mod lease;
pub mod ledger_object;
pub mod pods;
pub mod watch;
pub mod workspaces;

use crate::agent::policy::pod_security::PodSecurityLevel;
use crate::agent::policy::shared_namespace::NamespaceMode;
use kube::Client;
use kube::api::ObjectMeta;
use kube::runtime::events::{Recorder, Reporter};
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub agent_id: String,
    pub agent_namespace: String,
    pub workspace_label_key: String,
    pub field_manager: String,
    /// Read namespaces and inventories from watched caches instead of one GET per apply.
    pub apply_cache: bool,
    /// Set on every workspace namespace, for the apiserver to enforce where it can.
    pub pod_security_level: PodSecurityLevel,
    /// A namespace per workspace, or one shared namespace that is all the agent may reach.
    pub namespace_mode: NamespaceMode,
}

/// The Pod Security admission labels: enforce, and warn and audit at the same level.
pub const POD_SECURITY_LABELS: [&str; 3] =
    ["pod-security.kubernetes.io/enforce", "pod-security.kubernetes.io/warn", "pod-security.kubernetes.io/audit"];

impl ClusterConfig {
    /// Agent `agent-1` in `wsync-system`, GitLab's label key, as the mocked-apiserver tiers
    /// expect it.
    #[cfg(test)]
    pub fn for_tests(namespace_mode: NamespaceMode) -> Self {
        Self {
            agent_id: "agent-1".into(),
            agent_namespace: "wsync-system".into(),
            workspace_label_key: "agent.gitlab.com/id".into(),
            field_manager: "wsync".into(),
            apply_cache: true,
            pod_security_level: PodSecurityLevel::default(),
            namespace_mode,
        }
    }

    /// True when the object carries this agent's label (`workspace_selector`).
    pub fn is_ours(&self, meta: &ObjectMeta) -> bool {
        meta.labels.as_ref().and_then(|l| l.get(&self.workspace_label_key)) == Some(&self.agent_id)
    }

    /// An API over the namespaces workspaces may live in: all, or the shared one.
    pub fn workspaces_api<K>(&self, client: &Client) -> kube::Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match self.namespace_mode.shared() {
            Some(namespace) => kube::Api::namespaced(client.clone(), namespace),
            None => kube::Api::all(client.clone()),
        }
    }

    /// `<label key>=<agent id>`: what marks a Deployment as one of this agent's workspaces.
    pub fn workspace_selector(&self) -> String {
        format!("{}={}", self.workspace_label_key, self.agent_id)
    }

    /// The agent's label, for what it creates besides the workspaces' own config.
    pub fn agent_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(self.workspace_label_key.clone(), self.agent_id.clone())])
    }

    /// A workspace namespace's labels: the agent's, and Pod Security at the agent's level.
    pub fn namespace_labels(&self) -> BTreeMap<String, String> {
        let level = self.pod_security_level.label_value();
        let mut labels = self.agent_labels();
        labels.extend(POD_SECURITY_LABELS.iter().map(|key| (key.to_string(), level.to_string())));
        labels
    }

    /// Whether a namespace carries the Pod Security labels at the agent's level.
    pub fn pod_security_labels_current(&self, meta: &ObjectMeta) -> bool {
        let level = self.pod_security_level.label_value();
        let labels = meta.labels.as_ref();
        POD_SECURITY_LABELS.iter().all(|key| labels.and_then(|l| l.get(*key)).map(String::as_str) == Some(level))
    }
}

pub fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// The loop's handle on the cluster.
pub struct Cluster {
    client: Client,
    config: ClusterConfig,
    recorder: Recorder,
}

impl Cluster {
    pub fn new(client: Client, config: ClusterConfig) -> Self {
        let reporter = Reporter {
            controller: config.field_manager.clone(),
            instance: std::env::var("POD_NAME").ok().or_else(|| Some(config.agent_id.clone())),
        };
        Self { recorder: Recorder::new(client.clone(), reporter), client, config }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }
}
