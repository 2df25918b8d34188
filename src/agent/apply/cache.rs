//! What the applier reads before it writes: the agent's own namespaces, and the members each
//! inventory lists. Watches keep them (DESIGN §2, "Applier": caches, not one GET per object);
//! the applier's own writes go in at once, so the next apply never reads an older view. A miss
//! falls back to a GET, so a lagging watch costs a read, never a wrong decision.

use crate::agent::sync::workspace::is_older;
use crate::protocol::inventory::MemberRef;
use crate::runtime::LockExt;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

/// What the applier needs to know of one of the agent's own namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnNamespace {
    /// The copied-pull-secrets record on it.
    pub copied: Option<String>,
    /// Whether it carries the Pod Security labels at the agent's level.
    pub labels_current: bool,
}

#[derive(Debug, Default)]
struct Inner {
    namespaces: HashMap<String, OwnNamespace>,
    /// "namespace/name" → the inventory's resourceVersion and members. One per workspace, so
    /// kept compact (BENCHMARKS.md, agent memory): three allocations, not the BTreeSet the
    /// applier works with, whose single node holds eleven members of four strings each.
    inventories: HashMap<Box<str>, CachedInventory>,
}

/// An inventory as it is in the cluster: the workspace it is labelled for, and its members.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveInventory {
    /// `shared_namespace::WORKSPACE_LABEL`, which the agent writes on every inventory.
    pub workspace: Option<String>,
    pub members: BTreeSet<MemberRef>,
}

#[derive(Debug, Clone)]
struct CachedInventory {
    resource_version: Box<str>,
    workspace: Option<Box<str>>,
    /// The members' inventory keys (`MemberRef::key`), one per line, in order.
    members: Box<str>,
}

impl CachedInventory {
    fn new(resource_version: &str, live: &LiveInventory) -> Self {
        let members: Vec<String> = live.members.iter().map(MemberRef::key).collect();
        Self {
            resource_version: resource_version.into(),
            workspace: live.workspace.as_deref().map(Into::into),
            members: members.join("\n").into(),
        }
    }

    fn live(&self) -> LiveInventory {
        LiveInventory {
            workspace: self.workspace.as_deref().map(str::to_string),
            members: self.members.lines().filter_map(MemberRef::parse).collect(),
        }
    }
}

fn inventory_key(namespace: &str, name: &str) -> Box<str> {
    format!("{namespace}/{name}").into()
}

#[derive(Debug, Default)]
pub struct ApplyCache {
    inner: Mutex<Inner>,
}

impl ApplyCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock_unpoisoned()
    }

    /// Some when the namespace is known to be the agent's own.
    pub fn own_namespace(&self, name: &str) -> Option<OwnNamespace> {
        self.lock().namespaces.get(name).cloned()
    }

    pub fn set_own_namespace(&self, name: &str, record: OwnNamespace) {
        self.lock().namespaces.insert(name.to_string(), record);
    }

    pub fn forget_namespace(&self, name: &str) {
        let mut inner = self.lock();
        inner.namespaces.remove(name);
        let prefix = format!("{name}/");
        inner.inventories.retain(|key, _| !key.starts_with(&prefix));
    }

    pub fn replace_namespaces(&self, all: impl IntoIterator<Item = (String, OwnNamespace)>) {
        self.lock().namespaces = all.into_iter().collect();
    }

    pub fn inventory(&self, namespace: &str, name: &str) -> Option<LiveInventory> {
        let inner = self.lock();
        inner.inventories.get(&inventory_key(namespace, name)).map(CachedInventory::live)
    }

    /// Record an inventory, unless the cache already holds a newer version.
    pub fn set_inventory(&self, namespace: &str, name: &str, resource_version: &str, live: LiveInventory) {
        let mut inner = self.lock();
        let key = inventory_key(namespace, name);
        if let Some(current) = inner.inventories.get(&key)
            && is_older(resource_version, &current.resource_version)
        {
            return;
        }
        inner.inventories.insert(key, CachedInventory::new(resource_version, &live));
    }

    pub fn forget_inventory(&self, namespace: &str, name: &str) {
        self.lock().inventories.remove(&inventory_key(namespace, name));
    }

    pub fn replace_inventories(&self, all: impl IntoIterator<Item = ((String, String), (String, LiveInventory))>) {
        self.lock().inventories = all
            .into_iter()
            .map(|((namespace, name), (resource_version, live))| {
                (inventory_key(&namespace, &name), CachedInventory::new(&resource_version, &live))
            })
            .collect();
    }

    /// Copy the cached inventories into fresh allocations, as `WorkspaceIndex::compact` does.
    pub fn compact(&self) {
        let mut inner = self.lock();
        inner.inventories = inner.inventories.iter().map(|(key, cached)| (key.clone(), cached.clone())).collect();
    }

    pub fn sizes(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.namespaces.len(), inner.inventories.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(members: impl IntoIterator<Item = MemberRef>) -> LiveInventory {
        LiveInventory { workspace: Some("ws".into()), members: members.into_iter().collect() }
    }

    fn member(name: &str) -> MemberRef {
        MemberRef { namespace: "ns".into(), name: name.into(), group: "apps".into(), kind: "Deployment".into() }
    }

    #[test]
    fn an_older_watch_event_never_overwrites_the_applier_s_own_write() {
        let cache = ApplyCache::default();
        cache.set_inventory("ns", "inv", "20", live([member("new")]));
        cache.set_inventory("ns", "inv", "15", live([member("old")]));
        assert_eq!(cache.inventory("ns", "inv"), Some(live([member("new")])));
        cache.set_inventory("ns", "inv", "21", live([]));
        assert_eq!(cache.inventory("ns", "inv"), Some(live([])));
    }

    #[test]
    fn cached_members_come_back_as_they_went_in() {
        let cache = ApplyCache::default();
        let members: BTreeSet<MemberRef> = [
            member("ws"),
            MemberRef {
                namespace: "ns".into(),
                name: "home".into(),
                group: String::new(),
                kind: "PersistentVolumeClaim".into(),
            },
            MemberRef {
                namespace: String::new(),
                name: "ws-reader".into(),
                group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
            },
        ]
        .into();
        cache.set_inventory("ns", "inv", "1", live(members.clone()));
        assert_eq!(cache.inventory("ns", "inv"), Some(live(members)));
    }

    #[test]
    fn compaction_keeps_the_inventories() {
        let cache = ApplyCache::default();
        cache.set_inventory("ns", "inv", "7", live([member("a"), member("b")]));
        cache.compact();
        assert_eq!(cache.inventory("ns", "inv"), Some(live([member("a"), member("b")])));
        cache.set_inventory("ns", "inv", "6", live([]));
        assert_eq!(cache.sizes().1, 1);
        assert_eq!(cache.inventory("ns", "inv"), Some(live([member("a"), member("b")])), "the version came along");
    }

    #[test]
    fn a_forgotten_namespace_takes_its_inventories_along() {
        let cache = ApplyCache::default();
        let record = OwnNamespace { copied: Some("default/regcred".into()), labels_current: true };
        cache.set_own_namespace("ns", record.clone());
        cache.set_inventory("ns", "inv", "1", live([member("a")]));
        assert_eq!(cache.own_namespace("ns"), Some(record));
        cache.set_inventory("ns2", "inv", "1", live([member("b")]));
        cache.forget_namespace("ns");
        assert_eq!(cache.own_namespace("ns"), None);
        assert_eq!(cache.inventory("ns", "inv"), None);
        assert!(cache.inventory("ns2", "inv").is_some(), "only that namespace's");
    }
}
