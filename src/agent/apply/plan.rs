//! What an apply may do, decided before anything is sent (DESIGN §2, "Applier"): the apply
//! policy, and the grouping of a config into cli-utils compatible inventories. Free of I/O.

use crate::protocol::inventory::{INVENTORY_ID_LABEL, MemberRef, OWNING_INVENTORY_ANNOTATION};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use std::collections::{BTreeMap, BTreeSet};

/// The kinds a workspace needs, as `Kind` for the core group or `group/Kind`.
pub const DEFAULT_ALLOWED_KINDS: &[&str] =
    &["ConfigMap", "Secret", "Service", "PersistentVolumeClaim", "ServiceAccount", "apps/Deployment"];

/// Groups that are never applied, whatever the allow-list says.
const NEVER_ALLOWED_GROUPS: &[&str] = &["rbac.authorization.k8s.io"];

#[derive(Debug, Clone)]
pub struct ApplyPolicy {
    allowed_kinds: BTreeSet<String>,
    agent_namespace: String,
}

impl ApplyPolicy {
    pub fn new(allowed_kinds: impl IntoIterator<Item = impl Into<String>>, agent_namespace: impl Into<String>) -> Self {
        Self {
            allowed_kinds: allowed_kinds.into_iter().map(Into::into).collect(),
            agent_namespace: agent_namespace.into(),
        }
    }

    fn allows(&self, group: &str, kind: &str) -> bool {
        let name = if group.is_empty() { kind.to_string() } else { format!("{group}/{kind}") };
        !NEVER_ALLOWED_GROUPS.contains(&group) && self.allowed_kinds.contains(&name)
    }

    /// Namespaces the agent never writes to or deletes, whatever the control plane says.
    pub fn protected_namespace(&self, namespace: &str) -> bool {
        namespace.starts_with("kube-") || namespace == "default" || namespace == self.agent_namespace
    }

    pub fn allowed_kinds(&self) -> Vec<&str> {
        self.allowed_kinds.iter().map(String::as_str).collect()
    }
}

/// One inventory and the members it lists, ready to apply in order.
#[derive(Debug, Clone)]
pub struct InventoryApply {
    pub id: String,
    pub inventory: DynamicObject,
    pub members: Vec<(MemberRef, DynamicObject)>,
}

impl InventoryApply {
    pub fn member_refs(&self) -> BTreeSet<MemberRef> {
        self.members.iter().map(|(r, _)| r.clone()).collect()
    }
}

fn describe(gvk: &GroupVersionKind, namespace: &str, name: &str) -> String {
    MemberRef { namespace: namespace.into(), name: name.into(), group: gvk.group.clone(), kind: gvk.kind.clone() }
        .to_string()
}

/// Check a whole stream against the policy and group it into inventories. Any refusal refuses
/// the whole stream, so a refused config changes nothing. `namespaced` answers from discovery.
pub fn plan(
    objects: Vec<DynamicObject>,
    namespace: &str,
    policy: &ApplyPolicy,
    namespaced: impl Fn(&GroupVersionKind) -> bool,
) -> Result<Vec<InventoryApply>, String> {
    if policy.protected_namespace(namespace) {
        return Err(format!("refused: the workspace namespace {namespace:?} is protected"));
    }
    let mut inventories: BTreeMap<String, InventoryApply> = BTreeMap::new();
    let mut members = Vec::new();
    for mut object in objects {
        let types = object.types.clone().ok_or("an object without apiVersion/kind")?;
        let gvk = GroupVersionKind::try_from(&types).map_err(|e| e.to_string())?;
        let name = object.name_any();
        let object_namespace = object.namespace().unwrap_or_else(|| namespace.to_string());
        let what = describe(&gvk, &object_namespace, &name);
        if NEVER_ALLOWED_GROUPS.contains(&gvk.group.as_str()) {
            return Err(format!("refused {what}: RBAC kinds are never applied"));
        }
        if !policy.allows(&gvk.group, &gvk.kind) {
            return Err(format!(
                "refused {what}: kind not in the allowed kinds ({})",
                policy.allowed_kinds().join(", ")
            ));
        }
        if !namespaced(&gvk) {
            return Err(format!("refused {what}: cluster-scoped objects are never applied"));
        }
        if object_namespace != namespace {
            return Err(format!("refused {what}: outside the workspace's namespace {namespace}"));
        }
        object.metadata.namespace = Some(object_namespace.clone());
        let inventory_id = (gvk.group.is_empty() && gvk.kind == "ConfigMap")
            .then(|| object.labels().get(INVENTORY_ID_LABEL).cloned())
            .flatten();
        match inventory_id {
            Some(id) => {
                let inventory = InventoryApply { id: id.clone(), inventory: object, members: Vec::new() };
                if inventories.insert(id.clone(), inventory).is_some() {
                    return Err(format!("refused {what}: inventory id {id:?} appears twice"));
                }
            }
            None => {
                let owner = object.annotations().get(OWNING_INVENTORY_ANNOTATION).cloned().ok_or_else(|| {
                    format!("refused {what}: no {OWNING_INVENTORY_ANNOTATION} annotation, so it could never be pruned")
                })?;
                let member = MemberRef { namespace: object_namespace, name, group: gvk.group, kind: gvk.kind };
                members.push((owner, member, object));
            }
        }
    }
    for (owner, member, object) in members {
        let what = member.to_string();
        let inventory = inventories
            .get_mut(&owner)
            .ok_or_else(|| format!("refused {what}: its owning inventory {owner:?} is not in the config"))?;
        inventory.members.push((member, object));
    }
    Ok(inventories.into_values().collect())
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

#[cfg(test)]
mod tests;
