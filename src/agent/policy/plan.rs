//! What an apply may do, decided before anything is sent (DESIGN §2, "Applier"): the apply
//! policy, and the grouping of a config into cli-utils compatible inventories. Free of I/O.

use super::field_policy::FieldPolicy;
use super::kinds::NEVER_ALLOWED_GROUPS;
use super::pod_security::PodSecurityLevel;
use super::pull_secrets::{DOCKER_CONFIG_TYPES, source_ref};
use super::shared_namespace::NamespaceMode;
use crate::protocol::ImagePullSecret;
use crate::protocol::inventory::{INVENTORY_ID_LABEL, MemberRef, OWNING_INVENTORY_ANNOTATION};
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone)]
pub struct ApplyPolicy {
    allowed_kinds: BTreeSet<String>,
    agent_namespace: String,
    fields: FieldPolicy,
    /// The only Secrets the agent ever reads: the operator's, never the control plane's choice.
    pull_secret_sources: BTreeSet<ImagePullSecret>,
    namespace_mode: NamespaceMode,
}

impl ApplyPolicy {
    pub fn new(allowed_kinds: impl IntoIterator<Item = impl Into<String>>, agent_namespace: impl Into<String>) -> Self {
        Self {
            allowed_kinds: allowed_kinds.into_iter().map(Into::into).collect(),
            agent_namespace: agent_namespace.into(),
            fields: FieldPolicy::default(),
            pull_secret_sources: BTreeSet::new(),
            namespace_mode: NamespaceMode::PerWorkspace,
        }
    }

    pub fn with_namespace_mode(mut self, mode: NamespaceMode) -> Self {
        self.namespace_mode = mode;
        self
    }

    pub fn namespace_mode(&self) -> &NamespaceMode {
        &self.namespace_mode
    }

    pub fn with_pull_secret_sources(mut self, sources: impl IntoIterator<Item = ImagePullSecret>) -> Self {
        self.pull_secret_sources = sources.into_iter().collect();
        self
    }

    pub fn with_pod_security(mut self, level: PodSecurityLevel) -> Self {
        self.fields.pod_security = level;
        self
    }

    pub fn with_service_types(mut self, types: impl IntoIterator<Item = String>) -> Self {
        self.fields.service_types = types.into_iter().collect();
        self
    }

    /// Refuse, by name and before anything is read, a pull secret the operator did not allow.
    pub fn check_pull_secrets(&self, wanted: &[ImagePullSecret]) -> Result<(), String> {
        let refused: Vec<String> = wanted.iter().filter(|s| !self.allows_pull_secret(s)).map(source_ref).collect();
        if refused.is_empty() {
            return Ok(());
        }
        let allowed: Vec<String> = self.pull_secret_sources.iter().map(source_ref).collect();
        let allowed = if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") };
        Err(format!(
            "refused image pull secret {}: not an allowed source (--image-pull-secret-source: {allowed})",
            refused.join(", ")
        ))
    }

    /// Whether a copy the agent made earlier may stay: its source is still allowed.
    pub fn allows_pull_secret(&self, source: &ImagePullSecret) -> bool {
        self.pull_secret_sources.contains(source)
    }

    /// A source's type, checked after it is read: only docker-config Secrets are copied.
    pub fn check_pull_secret_type(source: &ImagePullSecret, type_: Option<&str>) -> Result<(), String> {
        match type_ {
            Some(t) if DOCKER_CONFIG_TYPES.contains(&t) => Ok(()),
            other => Err(format!(
                "refused image pull secret {}: its type {:?} is not one of {}",
                source_ref(source),
                other.unwrap_or("Opaque"),
                DOCKER_CONFIG_TYPES.join(", ")
            )),
        }
    }

    pub fn allows(&self, group: &str, kind: &str) -> bool {
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

    /// The allowed kinds a full resync lists for its drift check, as (group, kind): all but
    /// Secrets, which the agent never reads outside its own namespace.
    pub fn listable_kinds(&self) -> Vec<(String, String)> {
        self.allowed_kinds
            .iter()
            .map(|name| match name.split_once('/') {
                Some((group, kind)) => (group.to_string(), kind.to_string()),
                None => (String::new(), name.clone()),
            })
            .filter(|(group, kind)| !(group.is_empty() && kind == "Secret"))
            .filter(|(group, _)| !NEVER_ALLOWED_GROUPS.contains(&group.as_str()))
            .filter(|(group, kind)| self.namespace_mode.may_hold(group, kind))
            .collect()
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
    let in_config: BTreeSet<(String, String)> =
        objects.iter().filter_map(|o| Some((o.types.as_ref()?.kind.clone(), o.metadata.name.clone()?))).collect();
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
        policy.fields.check(&gvk, &object, &in_config).map_err(|reason| format!("refused {what}: {reason}"))?;
        policy.namespace_mode.check_object(&gvk, &object).map_err(|reason| format!("refused {what}: {reason}"))?;
        super::defaults::fill_list_map_keys(&gvk, &mut object.data);
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
        if is_the_inventory(&member, inventory.inventory.metadata.name.as_deref().unwrap_or_default()) {
            return Err(format!("refused {what}: a member of inventory {owner:?} cannot be the inventory itself"));
        }
        inventory.members.push((member, object));
    }
    for inventory in inventories.values_mut() {
        inventory.members.sort_by_key(|(member, _)| apply_rank(&member.kind));
    }
    Ok(inventories.into_values().collect())
}

/// The order Helm, kubectl and cli-utils apply kinds in (Helm's install order), not the
/// config's: what a Pod needs (its ServiceAccount, Secrets, claims, the quota that bounds it)
/// exists before the workload that creates it. GitLab sends the Deployment first.
const APPLY_ORDER: &[&str] = &[
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "PersistentVolumeClaim",
    "Service",
    "Pod",
    "ReplicaSet",
    "Deployment",
    "StatefulSet",
    "Job",
    "CronJob",
    "Ingress",
];

/// Where a kind goes in [`APPLY_ORDER`]; kinds it does not name go last, in the config's order.
fn apply_rank(kind: &str) -> usize {
    APPLY_ORDER.iter().position(|k| *k == kind).unwrap_or(APPLY_ORDER.len())
}

/// The members a live inventory lists that its apply may keep, and so prune: those in its
/// own namespace, of allowed kinds, other than the inventory itself. The rest (anyone who can
/// write the ConfigMap can add names) are dropped from it and never deleted.
pub fn prunable(
    listed: BTreeSet<MemberRef>,
    inventory: &DynamicObject,
    policy: &ApplyPolicy,
) -> (BTreeSet<MemberRef>, Vec<MemberRef>) {
    let namespace = inventory.metadata.namespace.as_deref().unwrap_or_default();
    prunable_in(listed, namespace, inventory.metadata.name.as_deref().unwrap_or_default(), policy)
}

/// [`prunable`], for the inventory ConfigMap `name` in `namespace`.
pub fn prunable_in(
    listed: BTreeSet<MemberRef>,
    namespace: &str,
    name: &str,
    policy: &ApplyPolicy,
) -> (BTreeSet<MemberRef>, Vec<MemberRef>) {
    let (kept, dropped): (BTreeSet<_>, BTreeSet<_>) = listed
        .into_iter()
        .partition(|m| m.namespace == namespace && policy.allows(&m.group, &m.kind) && !is_the_inventory(m, name));
    (kept, dropped.into_iter().collect())
}

/// Whether a member names the inventory's own ConfigMap.
fn is_the_inventory(member: &MemberRef, inventory: &str) -> bool {
    member.group.is_empty() && member.kind == "ConfigMap" && member.name == inventory
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
