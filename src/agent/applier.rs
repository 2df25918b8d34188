//! Applying one workspace's config, and terminating a workspace (DESIGN §2, "Applier").
//!
//! The order per inventory is cli-utils': write the inventory with old ∪ new members, apply
//! every new member with force, prune old members that left (only those it owns), then write
//! the inventory with the new members. Every Kubernetes call goes through `Cluster`.

use super::apply_plan::{self, ApplyPolicy, InventoryApply, MemberRef};
use super::cluster::{Cluster, api_message};
use super::workspace::WorkspaceKey;
use crate::protocol::ErrorType;
use kube::api::DynamicObject;
use kube::discovery::Scope;
use std::collections::{BTreeSet, HashMap};

pub type ApplyError = (ErrorType, String);

/// Check the whole stream, then apply it. Nothing is sent for a stream the policy refuses.
pub async fn apply_workspace(
    cluster: &Cluster,
    policy: &ApplyPolicy,
    key: &WorkspaceKey,
    config: &str,
) -> Result<(), ApplyError> {
    let applier = |message: String| (ErrorType::Applier, message);
    let objects = crate::yaml::parse_objects(config).map_err(|e| applier(e.to_string()))?;
    let scopes = resolve_scopes(cluster, &objects).await.map_err(applier)?;
    let inventories = apply_plan::plan(objects, &key.namespace, policy, |gvk| {
        scopes.get(gvk).is_some_and(|scope| *scope == Scope::Namespaced)
    })
    .map_err(applier)?;
    ensure_own_namespace(cluster, policy, &key.namespace).await?;
    for inventory in &inventories {
        apply_inventory(cluster, inventory).await.map_err(applier)?;
    }
    Ok(())
}

async fn resolve_scopes(
    cluster: &Cluster,
    objects: &[DynamicObject],
) -> Result<HashMap<kube::core::GroupVersionKind, Scope>, String> {
    let mut scopes = HashMap::new();
    for object in objects {
        let types = object.types.as_ref().ok_or("an object without apiVersion/kind")?;
        let gvk = kube::core::GroupVersionKind::try_from(types).map_err(|e| e.to_string())?;
        if scopes.contains_key(&gvk) {
            continue;
        }
        let (_, capabilities) = cluster
            .resolve(&gvk)
            .await
            .map_err(|e| format!("{} {}: unknown kind: {}", types.kind, types.api_version, api_message(&e)))?;
        scopes.insert(gvk, capabilities.scope);
    }
    Ok(scopes)
}

/// Whose a workspace namespace is. One the agent neither created nor labelled is refused.
enum Namespace {
    Missing,
    Ours,
}

/// The namespace rule, shared by apply and termination: never a protected namespace, and
/// only one that is new or already carries this agent's label.
async fn namespace_ownership(
    cluster: &Cluster,
    policy: &ApplyPolicy,
    namespace: &str,
) -> Result<Namespace, ApplyError> {
    let kubernetes = |message: String| (ErrorType::Kubernetes, message);
    if policy.protected_namespace(namespace) {
        return Err(kubernetes(format!("refused: namespace {namespace} is protected")));
    }
    let labels = cluster
        .namespace_labels(namespace)
        .await
        .map_err(|e| kubernetes(format!("namespace {namespace}: {}", api_message(&e))))?;
    let config = cluster.config();
    match labels {
        None => Ok(Namespace::Missing),
        Some(labels) if labels.get(&config.workspace_label_key) == Some(&config.agent_id) => Ok(Namespace::Ours),
        Some(_) => Err(kubernetes(format!(
            "refused: namespace {namespace} exists and is not labelled {}={}",
            config.workspace_label_key, config.agent_id
        ))),
    }
}

async fn ensure_own_namespace(cluster: &Cluster, policy: &ApplyPolicy, namespace: &str) -> Result<(), ApplyError> {
    match namespace_ownership(cluster, policy, namespace).await? {
        Namespace::Ours => Ok(()),
        Namespace::Missing => cluster
            .ensure_namespace(namespace)
            .await
            .map_err(|e| (ErrorType::Kubernetes, format!("creating namespace {namespace}: {}", api_message(&e)))),
    }
}

async fn apply_inventory(cluster: &Cluster, inventory: &InventoryApply) -> Result<(), String> {
    let namespace = inventory.inventory.metadata.namespace.clone().unwrap_or_default();
    let name = inventory.inventory.metadata.name.clone().unwrap_or_default();
    let old = cluster
        .inventory_members(&namespace, &name)
        .await
        .map_err(|e| format!("reading inventory {namespace}/{name}: {}", api_message(&e)))?;
    let new = inventory.member_refs();
    let union: BTreeSet<MemberRef> = old.union(&new).cloned().collect();

    cluster.apply_object(&with_members(&inventory.inventory, &union), &namespace).await?;
    for (_, member) in &inventory.members {
        cluster.apply_object(member, &namespace).await?;
    }
    for gone in old.difference(&new) {
        if cluster.prune_member(gone, &inventory.id).await? {
            tracing::info!(object = %gone, inventory = %inventory.id, "pruned an object that left its inventory");
        }
    }
    if union != new {
        cluster.apply_object(&with_members(&inventory.inventory, &new), &namespace).await?;
    }
    Ok(())
}

/// The inventory object with its data replaced by one empty-valued key per member.
fn with_members(inventory: &DynamicObject, members: &BTreeSet<MemberRef>) -> DynamicObject {
    let mut object = inventory.clone();
    let data: serde_json::Map<String, serde_json::Value> =
        members.iter().map(|m| (m.key(), serde_json::Value::String(String::new()))).collect();
    if let Some(fields) = object.data.as_object_mut() {
        fields.insert("data".into(), serde_json::Value::Object(data));
    } else {
        object.data = serde_json::json!({ "data": data });
    }
    object
}

/// Delete the workspace's namespace, guarded by the same namespace rule as applies.
pub async fn terminate_workspace(
    cluster: &Cluster,
    policy: &ApplyPolicy,
    key: &WorkspaceKey,
) -> Result<(), ApplyError> {
    let namespace = &key.namespace;
    match namespace_ownership(cluster, policy, namespace).await? {
        Namespace::Missing => Ok(()),
        Namespace::Ours => cluster
            .delete_namespace(namespace)
            .await
            .map_err(|e| (ErrorType::Kubernetes, format!("deleting namespace {namespace}: {}", api_message(&e)))),
    }
}
