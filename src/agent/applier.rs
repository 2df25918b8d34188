//! Applying one workspace's config, and terminating a workspace (DESIGN §2, "Applier").
//!
//! The order per inventory is cli-utils': write the inventory with old ∪ new members, apply
//! every new member with force, prune old members that left (only those it owns), then write
//! the inventory with the new members. Every Kubernetes call goes through `Cluster`.

use super::apply_plan::{self, ApplyPolicy, InventoryApply, MemberRef};
use super::cluster::{Cluster, api_message};
use super::pull_secrets;
use super::workspace::WorkspaceKey;
use crate::protocol::{ErrorType, ImagePullSecret};
use k8s_openapi::api::core::v1::Secret;
use kube::api::DynamicObject;
use kube::discovery::Scope;
use std::collections::{BTreeSet, HashMap};

pub type ApplyError = (ErrorType, String);

/// What an apply left in the workspace namespace besides its config.
#[derive(Debug, Default)]
pub struct Applied {
    /// The pull secrets copied, with each source's resourceVersion at the copy.
    pub pull_secrets: Vec<(ImagePullSecret, Option<String>)>,
}

/// Check the whole stream, then apply it. Nothing is sent for a stream the policy refuses.
pub async fn apply_workspace(
    cluster: &Cluster,
    policy: &ApplyPolicy,
    key: &WorkspaceKey,
    config: &str,
    pull_secrets: &[ImagePullSecret],
) -> Result<Applied, ApplyError> {
    let applier = |message: String| (ErrorType::Applier, message);
    let objects = crate::yaml::parse_objects(config).map_err(|e| applier(e.to_string()))?;
    let scopes = resolve_scopes(cluster, &objects).await.map_err(applier)?;
    let inventories = apply_plan::plan(objects, key.namespace(), policy, |gvk| {
        scopes.get(gvk).is_some_and(|scope| *scope == Scope::Namespaced)
    })
    .map_err(applier)?;
    let copy_plan = pull_secrets::plan_copies(pull_secrets, &BTreeSet::new()).map_err(applier)?;
    let copied = ensure_own_namespace(cluster, policy, key.namespace()).await?;
    // Before the config, so that the first Pod can pull its image.
    let pull_secrets = sync_pull_secrets(cluster, key.namespace(), &copy_plan.wanted, &copied).await?;
    for inventory in &inventories {
        apply_inventory(cluster, inventory).await.map_err(applier)?;
    }
    Ok(Applied { pull_secrets })
}

/// Copy every wanted pull secret into the namespace, delete the copies no longer wanted, and
/// record what the namespace holds.
async fn sync_pull_secrets(
    cluster: &Cluster,
    namespace: &str,
    wanted: &BTreeSet<ImagePullSecret>,
    copied: &BTreeSet<ImagePullSecret>,
) -> Result<Vec<(ImagePullSecret, Option<String>)>, ApplyError> {
    let kubernetes = |message: String| (ErrorType::Kubernetes, message);
    let wanted: Vec<ImagePullSecret> = wanted.iter().cloned().collect();
    let plan = pull_secrets::plan_copies(&wanted, copied).map_err(kubernetes)?;
    let mut done = Vec::new();
    for source in &wanted {
        let reference = pull_secrets::source_ref(source);
        let secret = cluster
            .get_secret(source)
            .await
            .map_err(|e| kubernetes(format!("image pull secret {reference}: {}", api_message(&e))))?
            .ok_or_else(|| kubernetes(format!("image pull secret {reference} does not exist")))?;
        copy_pull_secret(cluster, &secret, source, namespace).await?;
        done.push((source.clone(), secret.metadata.resource_version.clone()));
    }
    for name in &plan.delete {
        cluster
            .delete_copied_secret(namespace, name)
            .await
            .map_err(|e| kubernetes(format!("deleting the copied pull secret {name}: {}", api_message(&e))))?;
    }
    if plan.changes_record(copied) {
        let record = Some(pull_secrets::render_copied(&plan.wanted)).filter(|r| !r.is_empty());
        cluster
            .annotate_namespace(namespace, pull_secrets::COPIED_ANNOTATION, record.as_deref())
            .await
            .map_err(|e| kubernetes(format!("namespace {namespace}: {}", api_message(&e))))?;
    }
    Ok(done)
}

/// Copy one pull secret into a workspace namespace.
pub async fn copy_pull_secret(
    cluster: &Cluster,
    secret: &Secret,
    source: &ImagePullSecret,
    namespace: &str,
) -> Result<(), ApplyError> {
    cluster.copy_secret(secret, source, namespace).await.map_err(|e| {
        let reference = pull_secrets::source_ref(source);
        (ErrorType::Kubernetes, format!("copying image pull secret {reference}: {}", api_message(&e)))
    })
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
    /// With the pull secrets copied into it.
    Ours(BTreeSet<ImagePullSecret>),
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
    if let Some(record) = cluster.cached_own_namespace(namespace) {
        return Ok(Namespace::Ours(pull_secrets::parse_copied(record.as_deref())));
    }
    let meta = cluster
        .namespace_meta(namespace)
        .await
        .map_err(|e| kubernetes(format!("namespace {namespace}: {}", api_message(&e))))?;
    let config = cluster.config();
    match meta {
        None => Ok(Namespace::Missing),
        Some(meta) if config.is_ours(&meta) => {
            let record = meta.annotations.as_ref().and_then(|a| a.get(pull_secrets::COPIED_ANNOTATION));
            Ok(Namespace::Ours(pull_secrets::parse_copied(record.map(String::as_str))))
        }
        Some(_) => Err(kubernetes(format!(
            "refused: namespace {namespace} exists and is not labelled {}={}",
            config.workspace_label_key, config.agent_id
        ))),
    }
}

/// Create the namespace if it is missing; returns the pull secrets already copied into it.
async fn ensure_own_namespace(
    cluster: &Cluster,
    policy: &ApplyPolicy,
    namespace: &str,
) -> Result<BTreeSet<ImagePullSecret>, ApplyError> {
    match namespace_ownership(cluster, policy, namespace).await? {
        Namespace::Ours(copied) => Ok(copied),
        Namespace::Missing => cluster
            .ensure_namespace(namespace)
            .await
            .map(|()| BTreeSet::new())
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

    let mut written = cluster.apply_object(&with_members(&inventory.inventory, &union), &namespace).await?;
    for (_, member) in &inventory.members {
        cluster.apply_object(member, &namespace).await?;
    }
    for gone in old.difference(&new) {
        if cluster.prune_member(gone, &inventory.id).await? {
            tracing::info!(object = %gone, inventory = %inventory.id, "pruned an object that left its inventory");
        }
    }
    if union != new {
        written = cluster.apply_object(&with_members(&inventory.inventory, &new), &namespace).await?;
    }
    cluster.remember_inventory(&namespace, &name, &written, new);
    Ok(())
}

/// The inventory object with its data replaced by one empty-valued key per member.
pub fn with_members(inventory: &DynamicObject, members: &BTreeSet<MemberRef>) -> DynamicObject {
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
    let namespace = key.namespace();
    match namespace_ownership(cluster, policy, namespace).await? {
        Namespace::Missing => Ok(()),
        Namespace::Ours(_) => cluster
            .delete_namespace(namespace)
            .await
            .map_err(|e| (ErrorType::Kubernetes, format!("deleting namespace {namespace}: {}", api_message(&e)))),
    }
}
