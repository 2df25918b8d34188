//! Builds a workspace's `config_to_apply` (DESIGN §3, "Config"): an inventory ConfigMap, a
//! Deployment, a Service, a home PersistentVolumeClaim and a ServiceAccount, and as GitLab does
//! by the settings the workspace was created under, a NetworkPolicy and a ResourceQuota. A
//! terminated workspace gets its inventory alone, so that the agent prunes the rest.
//!
//! The output is deterministic (sorted keys, fixed order) and canonical: quantities are written
//! as the apiserver prints them and no field is set that the server would default differently,
//! so re-applying an unchanged config changes no resourceVersion.

use super::agent_config::AgentConfig;
use crate::protocol::DesiredState;
use crate::protocol::inventory::{INVENTORY_ID_LABEL, OWNING_INVENTORY_ANNOTATION, PARTIAL_RECONCILIATION_ANNOTATION};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// A rollout that never becomes ready ends as ProgressDeadlineExceeded (actual state Failed).
pub const PROGRESS_DEADLINE_SECONDS: i64 = 300;

#[derive(Debug, Clone, PartialEq)]
pub struct WorkspaceSpec {
    pub name: String,
    pub namespace: String,
    pub image: String,
    pub cpu: Option<String>,
    pub memory: Option<String>,
    pub env: BTreeMap<String, String>,
    pub agent_id: String,
    pub label_key: String,
    /// Names of the pull secrets the agent copies into the namespace.
    pub image_pull_secrets: Vec<String>,
    /// The agent's settings when the workspace was created.
    pub config: AgentConfig,
}

/// The inventory's id, which is also its ConfigMap's name: GitLab's `<name>-workspace-inventory`,
/// made unique per agent by a digest of the agent id, so that two agents' workspaces of one
/// name never share an id (an agent prunes only what names its inventory's id).
pub fn inventory_id(agent_id: &str, name: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(agent_id.as_bytes());
    let short: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    format!("{name}-workspace-inventory-{short}")
}

/// The config for one workspace in its desired state.
pub fn build(spec: &WorkspaceSpec, desired: DesiredState) -> Result<String, serde_saphyr::SerializeError> {
    let inventory = inventory_id(&spec.agent_id, &spec.name);
    // The operator's labels and annotations first, so that wsync's own keys always win.
    let mut labels: serde_json::Map<String, Value> =
        spec.config.labels.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
    labels.insert(spec.label_key.clone(), Value::from(spec.agent_id.as_str()));
    labels.insert("app.kubernetes.io/name".into(), Value::from(spec.name.as_str()));
    labels.insert("app.kubernetes.io/managed-by".into(), Value::from("wsync"));
    let labels = Value::Object(labels);
    let annotations = |partial: bool| {
        let mut annotations: serde_json::Map<String, Value> =
            spec.config.annotations.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        annotations.insert(OWNING_INVENTORY_ANNOTATION.into(), Value::from(inventory.as_str()));
        if partial {
            annotations.insert(PARTIAL_RECONCILIATION_ANNOTATION.into(), Value::from("true"));
        }
        Value::Object(annotations)
    };
    let member_meta = |name: &str| json!({ "name": name, "namespace": spec.namespace, "labels": labels, "annotations": annotations(true) });
    let inventory_document = json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": inventory,
            "namespace": spec.namespace,
            "labels": { INVENTORY_ID_LABEL: inventory, &spec.label_key: spec.agent_id },
        },
    });
    if desired == DesiredState::Terminated {
        return to_stream(&[inventory_document]);
    }
    let selector = json!({ "app.kubernetes.io/name": spec.name });
    let mut resources = serde_json::Map::new();
    if let Some(cpu) = &spec.cpu {
        resources.insert("cpu".into(), Value::from(cpu.as_str()));
    }
    if let Some(memory) = &spec.memory {
        resources.insert("memory".into(), Value::from(memory.as_str()));
    }
    let own = (!resources.is_empty()).then(|| json!({ "requests": resources.clone(), "limits": resources }));
    let resources = spec.config.container_resources(own).unwrap_or_else(|| json!({}));
    let env: Vec<Value> = spec.env.iter().map(|(name, value)| json!({ "name": name, "value": value })).collect();
    let mut container = json!({
        "name": "workspace",
        "image": spec.image,
        "ports": [{ "containerPort": 8080, "name": "ide", "protocol": "TCP" }],
        "volumeMounts": [{ "mountPath": "/home/workspace", "name": "home" }],
    });
    if !env.is_empty() {
        container["env"] = Value::from(env);
    }
    if resources != json!({}) {
        container["resources"] = resources;
    }
    let mut pod_spec = json!({
        "serviceAccountName": spec.name,
        "containers": [container],
        "volumes": [{ "name": "home", "persistentVolumeClaim": { "claimName": format!("{}-home", spec.name) } }],
    });
    if !spec.image_pull_secrets.is_empty() {
        let names: Vec<Value> = spec.image_pull_secrets.iter().map(|name| json!({ "name": name })).collect();
        pod_spec["imagePullSecrets"] = Value::from(names);
    }
    if let Some(pod_spec) = pod_spec.as_object_mut() {
        spec.config.apply_to_pod(pod_spec);
    }
    let mut documents = vec![
        inventory_document,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": member_meta(&spec.name),
            "spec": {
                "replicas": crate::control_plane::rules::replicas(desired),
                "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
                "selector": { "matchLabels": selector },
                "strategy": { "type": "Recreate" },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": pod_spec,
                },
            },
        }),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": member_meta(&spec.name),
            "spec": {
                "selector": selector,
                "ports": [{ "name": "ide", "port": 80, "protocol": "TCP", "targetPort": 8080 }],
            },
        }),
        json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": member_meta(&format!("{}-home", spec.name)),
            "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": { "requests": { "storage": "1Gi" } },
            },
        }),
        json!({
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": member_meta(&spec.name),
            "automountServiceAccountToken": false,
        }),
    ];
    if let Some(policy) = spec.config.network_policy_spec() {
        documents.push(json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": member_meta(&spec.name),
            "spec": policy,
        }));
    }
    if let Some(hard) = spec.config.resource_quota_hard() {
        // As GitLab: the quota is left out of partial reconciliation.
        let metadata = json!({ "name": spec.name, "namespace": spec.namespace, "labels": labels, "annotations": annotations(false) });
        documents.push(
            json!({ "apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata, "spec": { "hard": hard } }),
        );
    }
    to_stream(&documents)
}

fn to_stream(documents: &[Value]) -> Result<String, serde_saphyr::SerializeError> {
    let mut stream = String::new();
    for document in documents {
        stream.push_str("---\n");
        stream.push_str(&crate::yaml::to_string(document)?);
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> WorkspaceSpec {
        WorkspaceSpec {
            name: "alice".into(),
            namespace: "wsync-1-alice".into(),
            image: "busybox:1.36".into(),
            cpu: Some("500m".into()),
            memory: Some("256Mi".into()),
            env: BTreeMap::from([("EDITOR".into(), "vim".into())]),
            agent_id: "1".into(),
            label_key: "agent.gitlab.com/id".into(),
            image_pull_secrets: vec![],
            config: AgentConfig::before_settings(),
        }
    }

    #[test]
    fn pods_name_the_copied_pull_secrets_only_when_there_are_some() {
        let pod = |spec: &WorkspaceSpec| {
            let objects = crate::yaml::parse_objects(&build(spec, DesiredState::Running).unwrap()).unwrap();
            objects[1].data["spec"]["template"]["spec"].clone()
        };
        assert!(pod(&spec()).get("imagePullSecrets").is_none(), "no empty list the server would drop");
        let with = WorkspaceSpec { image_pull_secrets: vec!["regcred".into()], ..spec() };
        assert_eq!(pod(&with)["imagePullSecrets"], serde_json::json!([{ "name": "regcred" }]));
    }

    #[test]
    fn the_same_input_gives_the_same_bytes() {
        assert_eq!(build(&spec(), DesiredState::Running).unwrap(), build(&spec(), DesiredState::Running).unwrap());
    }

    #[test]
    fn replicas_follow_the_desired_state() {
        let objects = |desired| crate::yaml::parse_objects(&build(&spec(), desired).unwrap()).unwrap();
        let replicas = |desired| objects(desired)[1].data["spec"]["replicas"].as_i64();
        assert_eq!(replicas(DesiredState::Running), Some(1));
        assert_eq!(replicas(DesiredState::Stopped), Some(0));
        assert_eq!(replicas(DesiredState::RestartRequested), Some(0));
    }

    #[test]
    fn inventory_ids_are_unique_per_agent() {
        assert_ne!(inventory_id("1", "ws"), inventory_id("2", "ws"));
        assert_eq!(inventory_id("1", "ws"), inventory_id("1", "ws"));
        assert!(inventory_id("1", "ws").starts_with("ws-workspace-inventory-"));
    }

    #[test]
    fn every_member_belongs_to_the_one_inventory() {
        let objects = crate::yaml::parse_objects(&build(&spec(), DesiredState::Running).unwrap()).unwrap();
        let kinds: Vec<String> = objects.iter().map(|o| o.types.as_ref().unwrap().kind.clone()).collect();
        assert_eq!(kinds, ["ConfigMap", "Deployment", "Service", "PersistentVolumeClaim", "ServiceAccount"]);
        for member in &objects[1..] {
            let annotations = member.metadata.annotations.as_ref().unwrap();
            assert_eq!(annotations[OWNING_INVENTORY_ANNOTATION], inventory_id("1", "alice"));
            assert_eq!(annotations[PARTIAL_RECONCILIATION_ANNOTATION], "true");
            assert_eq!(member.metadata.labels.as_ref().unwrap()["agent.gitlab.com/id"], "1");
        }
        assert_eq!(objects[0].metadata.labels.as_ref().unwrap()[INVENTORY_ID_LABEL], inventory_id("1", "alice"));
    }

    #[test]
    fn gitlabs_settings_add_its_network_policy_quota_labels_and_resources() {
        let config = AgentConfig::parse(
            "max_resources_per_workspace: {limits: {cpu: '2', memory: 4Gi}}\n\
             default_resources_per_workspace_container: {requests: {cpu: 100m}}\n\
             labels: {tier: dev, agent.gitlab.com/id: forged}\nannotations: {team: eng}\n",
        )
        .unwrap();
        let spec = WorkspaceSpec { cpu: None, memory: None, config, ..spec() };
        let objects = crate::yaml::parse_objects(&build(&spec, DesiredState::Running).unwrap()).unwrap();
        let kinds: Vec<String> = objects.iter().map(|o| o.types.as_ref().unwrap().kind.clone()).collect();
        assert_eq!(
            kinds,
            [
                "ConfigMap",
                "Deployment",
                "Service",
                "PersistentVolumeClaim",
                "ServiceAccount",
                "NetworkPolicy",
                "ResourceQuota"
            ]
        );
        for member in &objects[1..] {
            let labels = member.metadata.labels.as_ref().unwrap();
            assert_eq!((labels["tier"].as_str(), labels["agent.gitlab.com/id"].as_str()), ("dev", "1"), "ours win");
            let annotations = member.metadata.annotations.as_ref().unwrap();
            assert_eq!(annotations["team"], "eng");
            assert_eq!(annotations[OWNING_INVENTORY_ANNOTATION], inventory_id("1", "alice"));
        }
        let quota = &objects[6];
        assert!(!quota.metadata.annotations.as_ref().unwrap().contains_key(PARTIAL_RECONCILIATION_ANNOTATION));
        assert_eq!(quota.data["spec"]["hard"]["limits.memory"], "4Gi");
        let container = &objects[1].data["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["resources"]["requests"]["cpu"], "100m", "the agent's default resources");
        assert_eq!(objects[1].data["spec"]["template"]["metadata"]["labels"]["tier"], "dev");
    }

    #[test]
    fn runtime_class_user_namespaces_and_escalation_reach_the_pod() {
        let pod = |config: AgentConfig| {
            let spec = WorkspaceSpec { config, ..spec() };
            let objects = crate::yaml::parse_objects(&build(&spec, DesiredState::Running).unwrap()).unwrap();
            objects[1].data["spec"]["template"]["spec"].clone()
        };
        let before = pod(AgentConfig::before_settings());
        assert!(before.get("runtimeClassName").is_none() && before.get("hostUsers").is_none());
        assert!(before["containers"][0].get("securityContext").is_none(), "an old workspace builds as it did");
        let gitlab = pod(AgentConfig::default());
        assert_eq!(
            gitlab["containers"][0]["securityContext"],
            json!({ "allowPrivilegeEscalation": false, "privileged": false })
        );
        let config = AgentConfig::parse(
            "default_runtime_class: gvisor\nuse_kubernetes_user_namespaces: true\nallow_privilege_escalation: true\n",
        )
        .unwrap();
        let contained = pod(config);
        assert_eq!(
            (contained["runtimeClassName"].as_str(), contained["hostUsers"].as_bool()),
            (Some("gvisor"), Some(false))
        );
        assert_eq!(contained["containers"][0]["securityContext"]["allowPrivilegeEscalation"], true);
    }

    #[test]
    fn a_terminated_workspace_gets_its_inventory_alone() {
        let objects = crate::yaml::parse_objects(&build(&spec(), DesiredState::Terminated).unwrap()).unwrap();
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].metadata.name.as_deref(), Some(inventory_id("1", "alice").as_str()));
    }

    #[test]
    fn a_rollout_has_a_progress_deadline() {
        let objects = crate::yaml::parse_objects(&build(&spec(), DesiredState::Running).unwrap()).unwrap();
        assert_eq!(objects[1].data["spec"]["progressDeadlineSeconds"], PROGRESS_DEADLINE_SECONDS);
    }
}
