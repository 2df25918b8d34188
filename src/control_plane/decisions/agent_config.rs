//! GitLab's per-agent workspace settings (the agent config's `remote_development` keys), as
//! the control plane keeps them, checks them and turns them into objects: the NetworkPolicy
//! and ResourceQuota GitLab sends, the labels and annotations it stamps, and the default
//! container resources. Free of I/O. A workspace keeps the settings it was created under.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// One egress rule: traffic to `allow`, except to `except`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRule {
    pub allow: String,
    #[serde(default)]
    pub except: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkPolicy {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_egress")]
    pub egress: Vec<EgressRule>,
}

impl Default for NetworkPolicy {
    fn default() -> Self {
        Self { enabled: true, egress: default_egress() }
    }
}

fn yes() -> bool {
    true
}

/// GitLab's default: the internet, not the private ranges.
fn default_egress() -> Vec<EgressRule> {
    vec![EgressRule {
        allow: "0.0.0.0/0".into(),
        except: vec!["10.0.0.0/8".into(), "172.16.0.0/12".into(), "192.168.0.0/16".into()],
    }]
}

/// Where the workspaces' traffic comes from: GitLab's workspaces proxy, and wsync's agent
/// (its tunnel's streams, #39), in this namespace. Set it to the agent's namespace
/// (`wsync-system`) where NetworkPolicies are enforced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspacesProxy {
    #[serde(default = "gitlab_workspaces")]
    pub namespace: String,
}

impl Default for WorkspacesProxy {
    fn default() -> Self {
        Self { namespace: gitlab_workspaces() }
    }
}

fn gitlab_workspaces() -> String {
    "gitlab-workspaces".into()
}

/// `requests` and `limits`, each of `cpu` and `memory`, as Kubernetes quantities.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, String>,
}

impl Resources {
    fn is_empty(&self) -> bool {
        self.requests.is_empty() && self.limits.is_empty()
    }
}

/// The settings, with GitLab's names and defaults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    #[serde(default)]
    pub network_policy: NetworkPolicy,
    #[serde(default)]
    pub gitlab_workspaces_proxy: WorkspacesProxy,
    #[serde(default)]
    pub default_resources_per_workspace_container: Resources,
    /// A ResourceQuota of this size in every workspace's namespace.
    #[serde(default)]
    pub max_resources_per_workspace: Resources,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The Pods' `runtimeClassName`; none when empty.
    #[serde(default)]
    pub default_runtime_class: String,
    /// `hostUsers: false` on the Pods (Kubernetes 1.25 and later know the field).
    #[serde(default)]
    pub use_kubernetes_user_namespaces: bool,
    /// Every container's `allowPrivilegeEscalation` (GitLab: false); None for a workspace
    /// created before settings existed, which sets nothing.
    #[serde(default = "no_escalation")]
    pub allow_privilege_escalation: Option<bool>,
    /// At most this many workspaces that are not terminated; -1 for no limit.
    #[serde(default = "unlimited")]
    pub workspaces_quota: i64,
    /// At most this many such workspaces per owner; -1 for no limit.
    #[serde(default = "unlimited")]
    pub workspaces_per_user_quota: i64,
    /// The one namespace every workspace runs in; empty: a namespace per workspace.
    #[serde(default)]
    pub shared_namespace: String,
    /// Not a GitLab setting: how a workspace created before settings existed reads back. Its
    /// environment stays inline in the Deployment, as it was built then.
    #[serde(skip)]
    pub inline_env: bool,
}

fn no_escalation() -> Option<bool> {
    Some(false)
}

fn unlimited() -> i64 {
    -1
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            network_policy: NetworkPolicy::default(),
            gitlab_workspaces_proxy: WorkspacesProxy::default(),
            default_resources_per_workspace_container: Resources::default(),
            max_resources_per_workspace: Resources::default(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            default_runtime_class: String::new(),
            use_kubernetes_user_namespaces: false,
            allow_privilege_escalation: no_escalation(),
            workspaces_quota: unlimited(),
            workspaces_per_user_quota: unlimited(),
            shared_namespace: String::new(),
            inline_env: false,
        }
    }
}

impl AgentConfig {
    /// What a workspace created before agents had settings gets: nothing beyond what it was
    /// built with then, so that an upgrade changes no running workspace.
    pub fn before_settings() -> Self {
        Self {
            network_policy: NetworkPolicy { enabled: false, egress: Vec::new() },
            allow_privilege_escalation: None,
            inline_env: true,
            ..Self::default()
        }
    }

    /// Read GitLab's YAML or JSON: the `remote_development` block of an agent config, or its
    /// keys alone. Keys wsync does not know are refused by name.
    pub fn parse(text: &str) -> Result<Self, String> {
        let value = crate::yaml::parse_value(text).map_err(|e| format!("agent config: {e}"))?;
        let value = match value.get("remote_development") {
            Some(inner) => inner.clone(),
            None if value.is_null() => json!({}),
            None => value,
        };
        let config: Self = serde_json::from_value(value).map_err(|e| format!("agent config: {e}"))?;
        config.validate()?;
        Ok(config)
    }

    /// CIDRs that parse, label and annotation keys Kubernetes takes, resources of cpu and memory.
    pub fn validate(&self) -> Result<(), String> {
        crate::names::dns_label("gitlab_workspaces_proxy.namespace", &self.gitlab_workspaces_proxy.namespace)?;
        for rule in &self.network_policy.egress {
            for cidr in std::iter::once(&rule.allow).chain(&rule.except) {
                if !is_cidr(cidr) {
                    return Err(format!("network_policy.egress: {cidr:?} is not a CIDR"));
                }
            }
        }
        for (field, resources) in [
            ("default_resources_per_workspace_container", &self.default_resources_per_workspace_container),
            ("max_resources_per_workspace", &self.max_resources_per_workspace),
        ] {
            for (name, quantity) in resources.requests.iter().chain(&resources.limits) {
                if !matches!(name.as_str(), "cpu" | "memory") || !is_quantity(quantity) {
                    return Err(format!("{field}: {name}: {quantity:?} is not a cpu or memory quantity"));
                }
            }
        }
        for (key, value) in &self.labels {
            if !is_qualified_name(key) || !is_label_value(value) {
                return Err(format!("labels: {key:?}: {value:?} is not a Kubernetes label"));
            }
        }
        if let Some(key) = self.annotations.keys().find(|k| !is_qualified_name(k)) {
            return Err(format!("annotations: {key:?} is not a Kubernetes annotation key"));
        }
        let runtime_class = &self.default_runtime_class;
        if !runtime_class.is_empty() && !crate::names::is_dns_subdomain(runtime_class) {
            return Err(format!("default_runtime_class: {runtime_class:?} is not a RuntimeClass name"));
        }
        // GitLab's rule: escalation only where something else contains it.
        if self.allow_privilege_escalation == Some(true)
            && !self.use_kubernetes_user_namespaces
            && runtime_class.is_empty()
        {
            return Err(
                "allow_privilege_escalation: true needs use_kubernetes_user_namespaces or a default_runtime_class"
                    .into(),
            );
        }
        for (name, quota) in
            [("workspaces_quota", self.workspaces_quota), ("workspaces_per_user_quota", self.workspaces_per_user_quota)]
        {
            if quota < -1 {
                return Err(format!("{name}: {quota} is neither -1 (no limit) nor a count"));
            }
        }
        self.validate_shared_namespace()
    }

    /// GitLab's rules: a DNS label, no quota object (it would bind every workspace in the
    /// namespace), and never a namespace the agent refuses to write in.
    fn validate_shared_namespace(&self) -> Result<(), String> {
        let namespace = self.shared_namespace.as_str();
        if namespace.is_empty() {
            return Ok(());
        }
        if namespace.contains('.') || !crate::names::is_dns_subdomain(namespace) {
            return Err(format!(
                "shared_namespace: {namespace:?} must be 63 characters or less, of lowercase alphanumeric \
                 characters or '-', starting and ending with an alphanumeric character"
            ));
        }
        if namespace == "default" || namespace.starts_with("kube-") {
            return Err(format!("shared_namespace: {namespace:?} is a system namespace, which the agent refuses"));
        }
        if !self.max_resources_per_workspace.is_empty() {
            return Err("max_resources_per_workspace must be empty when shared_namespace is set".into());
        }
        Ok(())
    }

    /// GitLab's rule: in a shared namespace the pull secrets are that namespace's own, since
    /// the agent copies none there.
    pub fn check_pull_secrets(&self, secrets: &[crate::protocol::ImagePullSecret]) -> Result<(), String> {
        let shared = self.shared_namespace.as_str();
        match secrets.iter().find(|s| !shared.is_empty() && s.namespace != shared) {
            Some(secret) => Err(format!(
                "image pull secret {}/{}: in shared_namespace {shared} the pull secrets must be in {shared}",
                secret.namespace, secret.name
            )),
            None => Ok(()),
        }
    }

    /// What the settings set on the Pod spec and on each container's securityContext.
    pub fn apply_to_pod(&self, pod_spec: &mut serde_json::Map<String, Value>) {
        if !self.default_runtime_class.is_empty() {
            pod_spec.insert("runtimeClassName".into(), Value::from(self.default_runtime_class.as_str()));
        }
        if self.use_kubernetes_user_namespaces {
            pod_spec.insert("hostUsers".into(), Value::from(false));
        }
        if let Some(allow) = self.allow_privilege_escalation {
            for list in ["initContainers", "containers"] {
                for container in pod_spec.get_mut(list).and_then(Value::as_array_mut).into_iter().flatten() {
                    container["securityContext"] = json!({ "allowPrivilegeEscalation": allow, "privileged": false });
                }
            }
        }
    }

    /// Whether one more workspace fits when `existing` are not terminated.
    pub fn admits_another(&self, existing: i64) -> bool {
        self.workspaces_quota < 0 || existing < self.workspaces_quota
    }

    /// Whether an owner with `owned` workspaces that are not terminated may create another;
    /// GitLab's message when not. A workspace that names no owner cannot be counted, so under
    /// a per-user quota it is refused.
    pub fn admits_another_of(&self, owner: Option<&str>, owned: i64) -> Result<(), String> {
        let quota = self.workspaces_per_user_quota;
        match owner {
            _ if quota < 0 => Ok(()),
            None => Err(format!("this agent has a workspaces_per_user_quota of '{quota}': name the workspace's owner")),
            Some(_) if owned < quota => Ok(()),
            Some(_) => Err(format!(
                "You cannot create a workspace because you already have '{owned}' existing workspaces for the \
                 given agent which has a per user quota of '{quota}' workspaces"
            )),
        }
    }

    /// The NetworkPolicy GitLab sends: the workspace's Pods (in a namespace of its own, all of
    /// them; in a shared one, those `pods` selects); in from the workspaces proxy only (and
    /// wsync's agent, the proxy here, in the same namespace); out to DNS in kube-system and to
    /// the egress rules.
    pub fn network_policy_spec(&self, pods: &Value) -> Option<Value> {
        if !self.network_policy.enabled {
            return None;
        }
        let mut egress = vec![json!({
            "ports": [{ "port": 53, "protocol": "TCP" }, { "port": 53, "protocol": "UDP" }],
            "to": [{ "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "kube-system" } } }],
        })];
        for rule in &self.network_policy.egress {
            egress.push(json!({ "to": [{ "ipBlock": { "cidr": rule.allow, "except": rule.except } }] }));
        }
        let namespace = &self.gitlab_workspaces_proxy.namespace;
        let proxies = ["gitlab-workspaces-proxy", "wsync-agent"].map(|proxy| {
            json!({
                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": namespace } },
                "podSelector": { "matchLabels": { "app.kubernetes.io/name": proxy } },
            })
        });
        Some(json!({
            "egress": egress,
            "ingress": [{ "from": proxies }],
            "podSelector": if self.shared_namespace.is_empty() { json!({}) } else { json!({ "matchLabels": pods }) },
            "policyTypes": ["Ingress", "Egress"],
        }))
    }

    /// The ResourceQuota's `spec.hard`, when there is a maximum (never in a shared namespace).
    pub fn resource_quota_hard(&self) -> Option<Value> {
        let max = &self.max_resources_per_workspace;
        if max.is_empty() || !self.shared_namespace.is_empty() {
            return None;
        }
        let mut hard = serde_json::Map::new();
        for (scope, values) in [("requests", &max.requests), ("limits", &max.limits)] {
            for (name, quantity) in values {
                hard.insert(format!("{scope}.{name}"), Value::from(quantity.as_str()));
            }
        }
        Some(Value::Object(hard))
    }

    /// A container's resources: the workspace's own, else the agent's defaults.
    pub fn container_resources(&self, own: Option<Value>) -> Option<Value> {
        own.or_else(|| {
            let defaults = &self.default_resources_per_workspace_container;
            (!defaults.is_empty()).then(|| serde_json::to_value(defaults).unwrap_or_default())
        })
    }
}

fn is_cidr(text: &str) -> bool {
    let Some((address, prefix)) = text.split_once('/') else { return false };
    let Ok(prefix) = prefix.parse::<u8>() else { return false };
    match address.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => prefix <= 32,
        Ok(std::net::IpAddr::V6(_)) => prefix <= 128,
        Err(_) => false,
    }
}

/// `500m`, `2`, `1.5`, `4Gi`, `512M`: digits, an optional fraction, an optional suffix.
fn is_quantity(text: &str) -> bool {
    let number_end = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    !number.is_empty()
        && number.parse::<f64>().is_ok()
        && matches!(suffix, "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" | "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei")
}

fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && value.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && value.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

/// `name` or `prefix/name`, with a DNS-subdomain prefix and a label-value-shaped name.
fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = key.rsplit_once('/').unwrap_or(("", key));
    let prefix_ok = prefix.is_empty() || crate::names::is_dns_subdomain(prefix);
    prefix_ok && !name.is_empty() && is_label_value(name)
}

#[cfg(test)]
mod tests;
