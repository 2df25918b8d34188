//! Shared-namespace mode (GitLab's `shared_namespace`): every workspace lives in one namespace
//! the operator made, and the agent holds no namespace rights. What keeps one workspace's
//! config off another workspace's objects there, decided without I/O.

use super::kinds::NAMESPACE_WIDE_KINDS;
use crate::agent::sync::workspace::WorkspaceKey;
use crate::protocol::ImagePullSecret;
use crate::protocol::inventory::INVENTORY_ID_LABEL;
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use std::collections::BTreeMap;

/// The label the agent puts on every inventory it writes: the workspace it belongs to.
pub const WORKSPACE_LABEL: &str = "wsync.dev/workspace";

/// Where the agent's workspaces live: chosen by the operator at install, never by the control
/// plane, whose prerequisites must agree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NamespaceMode {
    /// A namespace per workspace, created and deleted by the agent.
    #[default]
    PerWorkspace,
    /// One namespace for all of them, which the agent never creates, labels or deletes.
    Shared(String),
}

impl NamespaceMode {
    pub fn from_flag(shared: Option<&str>) -> Self {
        match shared.filter(|s| !s.is_empty()) {
            Some(namespace) => Self::Shared(namespace.to_string()),
            None => Self::PerWorkspace,
        }
    }

    /// Whether an object of this kind may live in a workspace's namespace in this mode.
    pub fn may_hold(&self, group: &str, kind: &str) -> bool {
        !(matches!(self, Self::Shared(_)) && group.is_empty() && NAMESPACE_WIDE_KINDS.contains(&kind))
    }

    pub fn shared(&self) -> Option<&str> {
        match self {
            Self::Shared(namespace) => Some(namespace),
            Self::PerWorkspace => None,
        }
    }

    /// The control plane's `shared_namespace` must be the mode the agent was installed in.
    pub fn check_served(&self, served: &str) -> Result<(), String> {
        match (self, served) {
            (Self::PerWorkspace, "") => Ok(()),
            (Self::Shared(ours), served) if ours == served => Ok(()),
            (Self::PerWorkspace, served) => Err(format!(
                "the control plane serves shared_namespace {served:?}, but this agent makes a namespace per \
                 workspace; install it with manifests/overlays/shared-namespace (--shared-namespace {served})"
            )),
            (Self::Shared(ours), "") => Err(format!(
                "this agent runs every workspace in {ours:?} (--shared-namespace), but the control plane \
                 serves no shared_namespace; set shared_namespace in the agent's config"
            )),
            (Self::Shared(ours), served) => Err(format!(
                "the control plane serves shared_namespace {served:?}, but this agent runs every workspace \
                 in {ours:?} (--shared-namespace)"
            )),
        }
    }

    /// A workspace's namespace and name, as the mode needs them.
    pub fn check_workspace(&self, key: &WorkspaceKey) -> Result<(), String> {
        let Self::Shared(shared) = self else { return Ok(()) };
        if key.namespace() != shared {
            return Err(format!(
                "refused: the workspace's namespace {:?} is not the shared namespace {shared:?}",
                key.namespace()
            ));
        }
        if !is_label_value(key.name()) {
            return Err(format!(
                "refused: the workspace name {:?} is not a label value (63 characters at most), which \
                 shared-namespace mode needs to tell its inventories apart",
                key.name()
            ));
        }
        Ok(())
    }

    /// What a shared namespace refuses of an object: anything that reaches every workspace in
    /// it, and an inventory whose id is not its own name (ids are how prune tells owners apart).
    pub fn check_object(&self, gvk: &GroupVersionKind, object: &DynamicObject) -> Result<(), String> {
        if self.shared().is_none() {
            return Ok(());
        }
        let core = gvk.group.is_empty();
        if core && NAMESPACE_WIDE_KINDS.contains(&gvk.kind.as_str()) {
            return Err("it would bind every workspace in the shared namespace".into());
        }
        if core && gvk.kind == "ConfigMap" {
            let id = object.metadata.labels.as_ref().and_then(|l| l.get(INVENTORY_ID_LABEL));
            if id.is_some_and(|id| Some(id) != object.metadata.name.as_ref()) {
                return Err("in a shared namespace an inventory's id must be its ConfigMap's name".into());
            }
        }
        Ok(())
    }

    /// What a shared namespace refuses of a workspace's objects: any that would select or make
    /// Pods other than its own ([`super::pod_selection`]). Each refusal names its object.
    pub fn check_pod_selection(&self, objects: &[DynamicObject], key: &WorkspaceKey) -> Result<(), String> {
        if self.shared().is_none() {
            return Ok(());
        }
        for object in objects {
            let Some(gvk) = object.types.as_ref().and_then(|types| GroupVersionKind::try_from(types).ok()) else {
                continue;
            };
            super::pod_selection::check(&gvk, object, key.name()).map_err(|reason| {
                let name = object.metadata.name.as_deref().unwrap_or_default();
                format!("refused {} {name}: {reason}", gvk.kind)
            })?;
        }
        Ok(())
    }

    /// An inventory that exists may be written for the workspace it belongs to only.
    pub fn check_inventory_owner(
        &self,
        inventory: &str,
        stamp: Option<&str>,
        key: &WorkspaceKey,
    ) -> Result<(), String> {
        match (self, stamp) {
            (Self::PerWorkspace, _) => Ok(()),
            (Self::Shared(_), Some(owner)) if owner == key.name() => Ok(()),
            (Self::Shared(_), owner) => Err(format!(
                "refused inventory {inventory}: it belongs to {}",
                owner.map_or("no workspace of this agent".to_string(), |o| format!("workspace {o}"))
            )),
        }
    }
}

impl NamespaceMode {
    /// In a shared namespace, label an inventory with the agent and the workspace it is
    /// written for, so that its owner can be checked and its workspace's inventories listed.
    pub fn stamp(&self, inventory: &mut DynamicObject, key: &WorkspaceKey, agent_labels: &BTreeMap<String, String>) {
        if self.shared().is_none() {
            return;
        }
        let labels = inventory.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.extend(agent_labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        labels.insert(WORKSPACE_LABEL.to_string(), key.name().to_string());
    }

    /// In a shared namespace the agent copies no Secret: a pull secret must already be there.
    pub fn check_pull_secrets(&self, wanted: &[ImagePullSecret]) -> Result<(), String> {
        let Self::Shared(shared) = self else { return Ok(()) };
        let elsewhere: Vec<String> =
            wanted.iter().filter(|s| &s.namespace != shared).map(super::pull_secrets::source_ref).collect();
        if elsewhere.is_empty() {
            return Ok(());
        }
        Err(format!(
            "refused image pull secret {}: in a shared namespace the agent copies no Secret; keep it in {shared}",
            elsewhere.join(", ")
        ))
    }
}

fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && value.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && value.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn shared() -> NamespaceMode {
        NamespaceMode::Shared("workspaces".into())
    }

    fn object(api_version: &str, kind: &str, name: &str, body: serde_json::Value) -> (GroupVersionKind, DynamicObject) {
        let mut value = json!({ "apiVersion": api_version, "kind": kind, "metadata": { "name": name } });
        if let (Some(target), Some(extra)) = (value.as_object_mut(), body.as_object()) {
            for (k, v) in extra {
                if k == "labels" {
                    target["metadata"]["labels"] = v.clone();
                } else {
                    target.insert(k.clone(), v.clone());
                }
            }
        }
        let object: DynamicObject = serde_json::from_value(value).unwrap();
        let gvk = GroupVersionKind::try_from(object.types.as_ref().unwrap()).unwrap();
        (gvk, object)
    }

    #[test]
    fn the_control_plane_cannot_switch_the_mode() {
        let per = NamespaceMode::PerWorkspace;
        assert!(per.check_served("").is_ok());
        assert!(per.check_served("workspaces").unwrap_err().contains("manifests/overlays/shared-namespace"));
        assert!(shared().check_served("workspaces").is_ok());
        assert!(shared().check_served("").unwrap_err().contains("serves no shared_namespace"));
        assert!(shared().check_served("kube-system").unwrap_err().contains("\"kube-system\""));
        assert_eq!(NamespaceMode::from_flag(Some("")), per);
    }

    #[test]
    fn a_workspace_outside_the_shared_namespace_or_with_a_long_name_is_refused() {
        assert!(shared().check_workspace(&WorkspaceKey::new("workspaces", "alice")).is_ok());
        let elsewhere = shared().check_workspace(&WorkspaceKey::new("team-b", "alice")).unwrap_err();
        assert!(elsewhere.contains("not the shared namespace"), "{elsewhere}");
        let long = "a".repeat(64);
        assert!(shared().check_workspace(&WorkspaceKey::new("workspaces", &long)).is_err());
        assert!(NamespaceMode::PerWorkspace.check_workspace(&WorkspaceKey::new("any", &long)).is_ok());
    }

    #[test]
    fn namespace_wide_objects_are_refused_in_a_shared_namespace_only() {
        for kind in ["ResourceQuota", "LimitRange"] {
            let (gvk, o) = object("v1", kind, "alice", json!({}));
            assert!(shared().check_object(&gvk, &o).unwrap_err().contains("every workspace"));
            assert!(NamespaceMode::PerWorkspace.check_object(&gvk, &o).is_ok());
        }
    }

    #[test]
    fn an_inventory_is_named_by_its_id_and_written_for_its_own_workspace() {
        let labels = json!({ "labels": { INVENTORY_ID_LABEL: "bob-workspace-inventory" } });
        let (gvk, o) = object("v1", "ConfigMap", "alice-workspace-inventory", labels);
        assert!(shared().check_object(&gvk, &o).unwrap_err().contains("its ConfigMap's name"));
        let alice = WorkspaceKey::new("workspaces", "alice");
        assert!(shared().check_inventory_owner("i", Some("alice"), &alice).is_ok());
        assert!(shared().check_inventory_owner("i", Some("bob"), &alice).unwrap_err().contains("workspace bob"));
        assert!(shared().check_inventory_owner("i", None, &alice).is_err());
        assert!(NamespaceMode::PerWorkspace.check_inventory_owner("i", Some("bob"), &alice).is_ok());
    }

    #[test]
    fn inventories_are_stamped_with_their_workspace_in_a_shared_namespace_only() {
        let alice = WorkspaceKey::new("workspaces", "alice");
        let agent = BTreeMap::from([("agent.gitlab.com/id".to_string(), "7".to_string())]);
        let labels = json!({ "labels": { WORKSPACE_LABEL: "bob" } });
        let (_, mut inventory) = object("v1", "ConfigMap", "alice-workspace-inventory", labels);
        let mut unstamped = inventory.clone();
        shared().stamp(&mut inventory, &alice, &agent);
        let labels = inventory.metadata.labels.unwrap();
        assert_eq!((labels[WORKSPACE_LABEL].as_str(), labels["agent.gitlab.com/id"].as_str()), ("alice", "7"));
        NamespaceMode::PerWorkspace.stamp(&mut unstamped, &alice, &agent);
        assert_eq!(unstamped.metadata.labels.unwrap()[WORKSPACE_LABEL], "bob", "left as sent");
    }

    #[test]
    fn pull_secrets_must_already_be_in_the_shared_namespace() {
        let secret = |namespace: &str| ImagePullSecret { namespace: namespace.into(), name: "regcred".into() };
        assert!(shared().check_pull_secrets(&[secret("workspaces")]).is_ok());
        let refused = shared().check_pull_secrets(&[secret("workspaces"), secret("registry")]).unwrap_err();
        assert!(refused.contains("registry/regcred") && !refused.contains("workspaces/regcred"), "{refused}");
        assert!(NamespaceMode::PerWorkspace.check_pull_secrets(&[secret("registry")]).is_ok());
    }
}
