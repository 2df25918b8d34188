//! What the applier reads before it writes: the agent's own namespaces, and the members each
//! inventory lists. Watches keep them (DESIGN §2, "Applier": caches, not one GET per object);
//! the applier's own writes go in at once, so the next apply never reads an older view. A miss
//! falls back to a GET, so a lagging watch costs a read, never a wrong decision.

use super::apply_plan::MemberRef;
use super::workspace::is_older;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard};

#[derive(Debug, Default)]
struct Inner {
    /// The agent's own namespaces → the copied-pull-secrets record on each.
    namespaces: HashMap<String, Option<String>>,
    /// (namespace, name) → (resourceVersion, members).
    inventories: HashMap<(String, String), (String, BTreeSet<MemberRef>)>,
}

#[derive(Debug, Default)]
pub struct ApplyCache {
    inner: Mutex<Inner>,
}

impl ApplyCache {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Some(record) when the namespace is known to be the agent's own.
    pub fn own_namespace(&self, name: &str) -> Option<Option<String>> {
        self.lock().namespaces.get(name).cloned()
    }

    pub fn set_own_namespace(&self, name: &str, record: Option<String>) {
        self.lock().namespaces.insert(name.to_string(), record);
    }

    pub fn forget_namespace(&self, name: &str) {
        let mut inner = self.lock();
        inner.namespaces.remove(name);
        inner.inventories.retain(|(namespace, _), _| namespace != name);
    }

    pub fn replace_namespaces(&self, all: impl IntoIterator<Item = (String, Option<String>)>) {
        self.lock().namespaces = all.into_iter().collect();
    }

    pub fn inventory(&self, namespace: &str, name: &str) -> Option<BTreeSet<MemberRef>> {
        let inner = self.lock();
        inner.inventories.get(&(namespace.to_string(), name.to_string())).map(|(_, members)| members.clone())
    }

    /// Record an inventory's members, unless the cache already holds a newer version.
    pub fn set_inventory(&self, namespace: &str, name: &str, resource_version: &str, members: BTreeSet<MemberRef>) {
        let mut inner = self.lock();
        let key = (namespace.to_string(), name.to_string());
        if let Some((current, _)) = inner.inventories.get(&key)
            && is_older(resource_version, current)
        {
            return;
        }
        inner.inventories.insert(key, (resource_version.to_string(), members));
    }

    pub fn forget_inventory(&self, namespace: &str, name: &str) {
        self.lock().inventories.remove(&(namespace.to_string(), name.to_string()));
    }

    pub fn replace_inventories(
        &self,
        all: impl IntoIterator<Item = ((String, String), (String, BTreeSet<MemberRef>))>,
    ) {
        self.lock().inventories = all.into_iter().collect();
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
    fn a_forgotten_namespace_takes_its_inventories_along() {
        let cache = ApplyCache::default();
        cache.set_own_namespace("ns", Some("default/regcred".into()));
        cache.set_inventory("ns", "inv", "1", [member("a")].into());
        assert_eq!(cache.own_namespace("ns"), Some(Some("default/regcred".into())));
        cache.forget_namespace("ns");
        assert_eq!(cache.own_namespace("ns"), None);
        assert_eq!(cache.inventory("ns", "inv"), None);
    }
}
