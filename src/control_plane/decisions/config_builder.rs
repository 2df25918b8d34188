//! Builds a workspace's `config_to_apply` (DESIGN §3, "Config"): an inventory ConfigMap, a
//! Deployment, a Service, a home PersistentVolumeClaim and a ServiceAccount, and as GitLab does
//! by the settings the workspace was created under, a NetworkPolicy and a ResourceQuota. The
//! environment variables are a Secret in a second inventory, which, as in GitLab, is left out
//! of partial reconciliation: it goes only with all resources. A terminated workspace gets its
//! inventories alone, so that the agent prunes the rest.
//!
//! The output is deterministic (sorted keys, fixed order) and canonical: quantities are written
//! as the apiserver prints them and no field is set that the server would default differently,
//! so re-applying an unchanged config changes no resourceVersion.

mod devfile_pod;
mod pod_parts;

pub use devfile_pod::DEFAULT_PROJECT_CLONER_IMAGE;
pub use pod_parts::{DECLARED_PORTS, SSH_PORT};

pub use super::rules::Resources;
use crate::control_plane::model::Workspace;
use crate::protocol::inventory::{INVENTORY_ID_LABEL, OWNING_INVENTORY_ANNOTATION, PARTIAL_RECONCILIATION_ANNOTATION};
use crate::protocol::{DesiredState, ImagePullSecret};
use serde_json::{Value, json};

/// A rollout that never becomes ready ends as ProgressDeadlineExceeded (actual state Failed).
pub const PROGRESS_DEADLINE_SECONDS: i64 = 300;

/// What a workspace's config is built from: the workspace as stored (with the agent's settings
/// frozen at its creation), and what its agent adds now.
#[derive(Debug, Clone, Copy)]
pub struct WorkspaceSpec<'a> {
    pub workspace: &'a Workspace,
    /// The label that marks the agent's objects (`agent.gitlab.com/id` by default).
    pub label_key: &'a str,
    /// The pull secrets the agent copies into the namespace.
    pub image_pull_secrets: &'a [ImagePullSecret],
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

/// The id of the inventory of the workspace's Secrets: GitLab's `<name>-secrets-inventory`,
/// unique per agent as [`inventory_id`] is.
pub fn secrets_inventory_id(agent_id: &str, name: &str) -> String {
    inventory_id(agent_id, name).replacen("-workspace-inventory-", "-secrets-inventory-", 1)
}

/// The Secret the workspace's environment variables are in (GitLab's name).
pub fn env_secret_name(name: &str) -> String {
    format!("{name}-env-var")
}

/// The config for one workspace in its desired state.
pub fn build(
    spec: &WorkspaceSpec<'_>,
    desired: DesiredState,
    resources: Resources,
) -> Result<String, serde_saphyr::SerializeError> {
    let workspace = spec.workspace;
    let config = &*workspace.agent_config;
    let inventory = inventory_id(&workspace.agent_id, &workspace.name);
    let secrets_inventory = secrets_inventory_id(&workspace.agent_id, &workspace.name);
    let env_in_secret = !config.inline_env;
    // The operator's labels and annotations first, so that wsync's own keys always win.
    let mut labels: serde_json::Map<String, Value> =
        config.labels.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
    labels.insert(spec.label_key.to_string(), Value::from(workspace.agent_id.as_str()));
    labels.insert("app.kubernetes.io/name".into(), Value::from(workspace.name.as_str()));
    labels.insert("app.kubernetes.io/managed-by".into(), Value::from("wsync"));
    let labels = Value::Object(labels);
    let annotations = |owner: Option<&str>, partial: bool| {
        let mut annotations: serde_json::Map<String, Value> =
            config.annotations.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        if let Some(owner) = owner {
            annotations.insert(OWNING_INVENTORY_ANNOTATION.into(), Value::from(owner));
        }
        if partial {
            annotations.insert(PARTIAL_RECONCILIATION_ANNOTATION.into(), Value::from("true"));
        }
        Value::Object(annotations)
    };
    let member_meta = |name: &str| json!({ "name": name, "namespace": workspace.namespace, "labels": labels, "annotations": annotations(Some(&inventory), true) });
    let inventory_document = |id: &str, partial: bool| {
        let mut document = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": id,
                "namespace": workspace.namespace,
                "labels": { INVENTORY_ID_LABEL: id, spec.label_key: workspace.agent_id },
            },
        });
        // As GitLab writes it; an old workspace's inventory is written as it was.
        let annotations = annotations(None, partial);
        if env_in_secret && annotations.as_object().is_some_and(|a| !a.is_empty()) {
            document["metadata"]["annotations"] = annotations;
        }
        document
    };
    let mut secrets = Vec::new();
    if env_in_secret && resources == Resources::All {
        secrets.push(inventory_document(&secrets_inventory, false));
    }
    if desired == DesiredState::Terminated {
        return to_stream(&[vec![inventory_document(&inventory, true)], secrets].concat());
    }
    if let Some(inventory) = secrets.first().map(|_| secrets_inventory.as_str()) {
        let data: serde_json::Map<String, Value> = workspace.env.iter().map(|(k, v)| (k.clone(), base64(v))).collect();
        let metadata = json!({ "name": env_secret_name(&workspace.name), "namespace": workspace.namespace, "labels": labels, "annotations": annotations(Some(inventory), false) });
        secrets.push(json!({ "apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": data }));
    }
    let selector = json!({ "app.kubernetes.io/name": workspace.name });
    let parts = match &workspace.devfile {
        Some(devfile) => devfile_pod::from_devfile(&workspace.name, devfile, config),
        None => pod_parts::from_image(workspace),
    };
    let env: Vec<Value> = match env_in_secret {
        true => Vec::new(),
        false => workspace.env.iter().map(|(name, value)| json!({ "name": name, "value": value })).collect(),
    };
    let with_environment = |mut container: Value| {
        if !env.is_empty() {
            let mut all = container.get("env").and_then(Value::as_array).cloned().unwrap_or_default();
            all.extend(env.iter().cloned());
            container["env"] = Value::from(all);
        }
        if env_in_secret {
            container["envFrom"] = json!([{ "secretRef": { "name": env_secret_name(&workspace.name) } }]);
        }
        container
    };
    let mut pod_spec = json!({
        "serviceAccountName": workspace.name,
        "containers": parts.containers.into_iter().map(with_environment).collect::<Vec<_>>(),
        "volumes": parts.volumes,
    });
    if !parts.init_containers.is_empty() {
        pod_spec["initContainers"] = parts.init_containers.into_iter().map(with_environment).collect();
    }
    if !spec.image_pull_secrets.is_empty() {
        let names: Vec<Value> = spec.image_pull_secrets.iter().map(|secret| json!({ "name": secret.name })).collect();
        pod_spec["imagePullSecrets"] = Value::from(names);
    }
    if let Some(pod_spec) = pod_spec.as_object_mut() {
        config.apply_to_pod(pod_spec);
    }
    let mut documents = vec![
        inventory_document(&inventory, true),
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": member_meta(&workspace.name),
            "spec": {
                "replicas": crate::control_plane::decisions::rules::replicas(desired),
                "progressDeadlineSeconds": PROGRESS_DEADLINE_SECONDS,
                "selector": { "matchLabels": selector },
                "strategy": { "type": "Recreate" },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": pod_spec,
                },
            },
        }),
    ];
    if !parts.service_ports.is_empty() {
        let spec = json!({ "selector": selector, "ports": parts.service_ports });
        documents.push(
            json!({ "apiVersion": "v1", "kind": "Service", "metadata": member_meta(&workspace.name), "spec": spec }),
        );
    }
    for (claim, size) in &parts.claims {
        let spec = json!({ "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": size } } });
        let metadata = member_meta(claim);
        documents
            .push(json!({ "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec }));
    }
    if let Some((name, data)) = &parts.scripts {
        documents.push(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": member_meta(name), "data": data }));
    }
    documents.push(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": member_meta(&workspace.name),
        "automountServiceAccountToken": false,
    }));
    if let Some(policy) = config.network_policy_spec(&selector) {
        documents.push(json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": member_meta(&workspace.name),
            "spec": policy,
        }));
    }
    if let Some(hard) = config.resource_quota_hard() {
        // As GitLab: the quota is left out of partial reconciliation.
        let metadata = json!({ "name": workspace.name, "namespace": workspace.namespace, "labels": labels, "annotations": annotations(Some(&inventory), false) });
        documents.push(
            json!({ "apiVersion": "v1", "kind": "ResourceQuota", "metadata": metadata, "spec": { "hard": hard } }),
        );
    }
    documents.extend(secrets);
    to_stream(&documents)
}

/// Why a new workspace's devfile cannot be built under its agent's settings, checked before
/// it is stored: a request above a limit, or a config the agent would refuse for its size.
pub fn refused_devfile(workspace: &Workspace, label_key: &str) -> Vec<String> {
    let Some(devfile) = &workspace.devfile else { return Vec::new() };
    let mut refused = devfile_pod::refused_with(devfile, &workspace.agent_config);
    let spec = WorkspaceSpec { workspace, label_key, image_pull_secrets: &[] };
    match build(&spec, DesiredState::Running, Resources::All) {
        Ok(config) if config.len() > crate::yaml::MAX_CONFIG_BYTES => refused.push(format!(
            "its config would be {} bytes; an agent takes at most {}",
            config.len(),
            crate::yaml::MAX_CONFIG_BYTES
        )),
        Ok(_) => {}
        Err(error) => refused.push(format!("its config cannot be written: {error}")),
    }
    refused
}

/// A Secret's `data` value: base64, as k8s-openapi writes bytes.
fn base64(text: &str) -> Value {
    serde_json::to_value(k8s_openapi::ByteString(text.as_bytes().to_vec())).unwrap_or_default()
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
mod tests;
