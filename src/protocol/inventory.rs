//! cli-utils inventories as both halves write them (DESIGN §2, "Applier"): an inventory is a
//! ConfigMap labelled with its id; each member names the id that owns it; the inventory's data
//! lists its members. Also the other labels and annotations both halves put on a workspace.

use std::fmt;

/// The label whose value is the agent id on every workspace object, unless configured.
pub const DEFAULT_WORKSPACE_LABEL_KEY: &str = "agent.gitlab.com/id";
/// On a member: also apply it in a partial reconciliation (GitLab's spelling).
pub const PARTIAL_RECONCILIATION_ANNOTATION: &str = "workspaces.gitlab.com/include-in-partial-reconciliation";

/// Marks a ConfigMap as an inventory; the value is the inventory id.
pub const INVENTORY_ID_LABEL: &str = "cli-utils.sigs.k8s.io/inventory-id";
/// On every member: the id (not the name) of the inventory that owns it.
pub const OWNING_INVENTORY_ANNOTATION: &str = "config.k8s.io/owning-inventory";

/// An inventory member, as cli-utils writes it in the inventory's data:
/// `<namespace>_<name>_<group>_<Kind>`, with an empty group for the core API.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberRef {
    pub namespace: String,
    pub name: String,
    pub group: String,
    pub kind: String,
}

impl MemberRef {
    pub fn key(&self) -> String {
        format!("{}_{}_{}_{}", self.namespace, self.name, self.group, self.kind)
    }

    /// Names, namespaces, groups and kinds never contain `_`, so the key splits cleanly.
    pub fn parse(key: &str) -> Option<Self> {
        let mut parts = key.splitn(4, '_');
        let (namespace, name, group, kind) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        (!name.is_empty() && !kind.is_empty() && !kind.contains('_')).then(|| Self {
            namespace: namespace.into(),
            name: name.into(),
            group: group.into(),
            kind: kind.into(),
        })
    }
}

impl fmt::Display for MemberRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let group = if self.group.is_empty() { String::new() } else { format!(".{}", self.group) };
        write!(f, "{}{group} {}/{}", self.kind, self.namespace, self.name)
    }
}
