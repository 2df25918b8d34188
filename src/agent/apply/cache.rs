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

#[derive(Debug, Clone)]
struct CachedInventory {
    resource_version: Box<str>,
    /// The members' inventory keys (`MemberRef::key`), one per line, in order.
    members: Box<str>,
}

impl CachedInventory {
    fn new(resource_version: &str, members: &BTreeSet<MemberRef>) -> Self {
        let members: Vec<String> = members.iter().map(MemberRef::key).collect();
        Self { resource_version: resource_version.into(), members: members.join("\n").into() }
    }

    fn members(&self) -> BTreeSet<MemberRef> {
        self.members.lines().filter_map(MemberRef::parse).collect()
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

    pub fn inventory(&self, namespace: &str, name: &str) -> Option<BTreeSet<MemberRef>> {
        let inner = self.lock();
        inner.inventories.get(&inventory_key(namespace, name)).map(CachedInventory::members)
    }

    /// Record an inventory's members, unless the cache already holds a newer version.
    pub fn set_inventory(&self, namespace: &str, name: &str, resource_version: &str, members: BTreeSet<MemberRef>) {
        let mut inner = self.lock();
        let key = inventory_key(namespace, name);
        if let Some(current) = inner.inventories.get(&key)
            && is_older(resource_version, &current.resource_version)
        {
            return;
        }
        inner.inventories.insert(key, CachedInventory::new(resource_version, &members));
    }

    pub fn forget_inventory(&self, namespace: &str, name: &str) {
        self.lock().inventories.remove(&inventory_key(namespace, name));
    }

    pub fn replace_inventories(
        &self,
        all: impl IntoIterator<Item = ((String, String), (String, BTreeSet<MemberRef>))>,
    ) {
        self.lock().inventories = all
            .into_iter()
            .map(|((namespace, name), (resource_version, members))| {
                (inventory_key(&namespace, &name), CachedInventory::new(&resource_version, &members))
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

    fn member(name: &str) -> MemberRef {
        MemberRef { namespace: "ns".into(), name: name.into(), group: "apps".into(), kind: "Deployment".into() }
    }

    #[test]
    fn an_older_watch_event_never_overwrites_the_applier_s_own_write() {
        let cache = ApplyCache::default();
        cache.set_inventory("ns", "inv", "20", [member("new")].into());
        cache.set_inventory("ns", "inv", "15", [member("old")].into());
        assert_eq!(cache.inventory("ns", "inv"), Some([member("new")].into()));
        cache.set_inventory("ns", "inv", "21", BTreeSet::new());
        assert_eq!(cache.inventory("ns", "inv"), Some(BTreeSet::new()));
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
        cache.set_inventory("ns", "inv", "1", members.clone());
        assert_eq!(cache.inventory("ns", "inv"), Some(members));
    }

    #[test]
    fn compaction_keeps_the_inventories() {
        let cache = ApplyCache::default();
        cache.set_inventory("ns", "inv", "7", [member("a"), member("b")].into());
        cache.compact();
        assert_eq!(cache.inventory("ns", "inv"), Some([member("a"), member("b")].into()));
        cache.set_inventory("ns", "inv", "6", BTreeSet::new());
        assert_eq!(cache.sizes().1, 1);
        assert_eq!(cache.inventory("ns", "inv"), Some([member("a"), member("b")].into()), "the version came along");
    }

    #[test]
    fn a_forgotten_namespace_takes_its_inventories_along() {
        let cache = ApplyCache::default();
        let record = OwnNamespace { copied: Some("default/regcred".into()), labels_current: true };
        cache.set_own_namespace("ns", record.clone());
        cache.set_inventory("ns", "inv", "1", [member("a")].into());
        assert_eq!(cache.own_namespace("ns"), Some(record));
        cache.set_inventory("ns2", "inv", "1", [member("b")].into());
        cache.forget_namespace("ns");
        assert_eq!(cache.own_namespace("ns"), None);
        assert_eq!(cache.inventory("ns", "inv"), None);
        assert!(cache.inventory("ns2", "inv").is_some(), "only that namespace's");
    }
}
