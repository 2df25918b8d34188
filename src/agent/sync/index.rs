//! The agent's own index of workspace Deployments, fed by one watcher (DESIGN §2).
//!
//! It keeps a dirty set: the keys whose resourceVersion may differ from the acknowledged one.
//! A partial cycle reads only those, so an idle cycle is O(1) however many workspaces exist.
//! A clean entry keeps only its key and version: its info was sent and is not read again.

use super::workspace::{DeploymentProjection, WorkspaceKey, is_older};
use crate::runtime::LockExt;
use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

#[derive(Debug, Default)]
pub struct WorkspaceIndex {
    entries: HashSet<Entry>,
    dirty: HashSet<WorkspaceKey>,
}

/// An index entry, found by the key it carries, so that no second copy of the key is kept.
#[derive(Debug)]
struct Entry(Arc<DeploymentProjection>);

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for Entry {}

impl Hash for Entry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key().hash(state);
    }
}

impl Borrow<WorkspaceKey> for Entry {
    fn borrow(&self) -> &WorkspaceKey {
        self.0.key()
    }
}

impl WorkspaceIndex {
    /// Insert or update one Deployment. Returns true when the index changed.
    pub fn upsert(&mut self, deployment: DeploymentProjection) -> bool {
        if let Some(current) = self.get(deployment.key())
            && (current.resource_version() == deployment.resource_version()
                || is_older(deployment.resource_version(), current.resource_version()))
        {
            return false;
        }
        self.store_dirty(deployment);
        true
    }

    fn store_dirty(&mut self, deployment: DeploymentProjection) {
        self.dirty.insert(deployment.key().clone());
        self.entries.replace(Entry(Arc::new(deployment)));
    }

    /// A deleted Deployment is no longer reported; the control plane learns of it otherwise.
    pub fn remove(&mut self, key: &WorkspaceKey) -> bool {
        self.dirty.remove(key);
        self.entries.remove(key)
    }

    /// Replace everything with a fresh LIST, as a restart would, and mark every entry dirty.
    /// An entry whose watched version is newer than the listed one keeps the newer version.
    pub fn replace_all(&mut self, listed: Vec<DeploymentProjection>) {
        let mut previous = std::mem::take(&mut self.entries);
        self.dirty.clear();
        for deployment in listed {
            let newest = match previous.take(deployment.key()) {
                Some(current) if is_older(deployment.resource_version(), current.0.resource_version()) => current,
                _ => Entry(Arc::new(deployment)),
            };
            self.dirty.insert(newest.0.key().clone());
            self.entries.insert(newest);
        }
    }

    /// Replace an entry with a Deployment read just now, even at the same version (whose info
    /// the index had dropped), and mark it dirty. A key the watch has removed meanwhile stays
    /// removed.
    pub fn refresh(&mut self, deployment: DeploymentProjection) {
        match self.get(deployment.key()) {
            Some(current) if !is_older(deployment.resource_version(), current.resource_version()) => {}
            _ => return,
        }
        self.store_dirty(deployment);
    }

    /// Entries changed since they were last acknowledged, in a stable order.
    pub fn dirty(&self) -> Vec<Arc<DeploymentProjection>> {
        let mut dirty: Vec<_> = self.dirty.iter().filter_map(|key| self.get(key).cloned()).collect();
        dirty.sort_by(|a, b| a.key().cmp(b.key()));
        dirty
    }

    /// Once the control plane holds exactly this version, forget the key's dirtiness and keep
    /// only the key and version: the info is not read again until the Deployment changes.
    pub fn mark_clean_if(&mut self, key: &WorkspaceKey, acknowledged: &str) {
        let Some(current) = self.get(key).filter(|d| d.resource_version() == acknowledged) else {
            return;
        };
        if current.info().is_some() {
            let reported = Entry(Arc::new(current.reported()));
            self.entries.replace(reported);
        }
        self.dirty.remove(key);
        // After a full cycle every key was dirty; keep no table sized for all of them.
        if let Some(capacity) = crate::allocator::drained_capacity(self.dirty.len(), self.dirty.capacity()) {
            self.dirty.shrink_to(capacity);
        }
    }

    pub fn mark_dirty(&mut self, key: &WorkspaceKey) {
        if self.entries.contains(key) {
            self.dirty.insert(key.clone());
        }
    }

    /// Copy every entry into fresh allocations and drop the old ones. After a full cycle the
    /// entries sit among the cycle's freed transients and keep their pages resident; the
    /// allocator places fresh copies in its lowest free slots, so the entries end up packed
    /// and the pages the old ones held empty out (BENCHMARKS.md, agent memory). At 10,000
    /// workspaces a few MB copied, a few ms.
    pub fn compact(&mut self) {
        let entries = std::mem::take(&mut self.entries);
        self.entries = entries.into_iter().map(|Entry(d)| Entry(Arc::new(DeploymentProjection::clone(&d)))).collect();
        self.dirty = self.dirty.iter().cloned().collect();
    }

    pub fn get(&self, key: &WorkspaceKey) -> Option<&Arc<DeploymentProjection>> {
        self.entries.get(key).map(|entry| &entry.0)
    }

    pub fn contains(&self, key: &WorkspaceKey) -> bool {
        self.entries.contains(key)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn dirty_len(&self) -> usize {
        self.dirty.len()
    }
}

/// The index shared between the watcher task and the sync loop, plus a change signal that
/// drives prompt partial cycles.
#[derive(Clone)]
pub struct SharedIndex {
    inner: Arc<Mutex<WorkspaceIndex>>,
    changes: watch::Sender<u64>,
}

impl Default for SharedIndex {
    fn default() -> Self {
        Self { inner: Default::default(), changes: watch::Sender::new(0) }
    }
}

impl SharedIndex {
    pub fn lock(&self) -> MutexGuard<'_, WorkspaceIndex> {
        self.inner.lock_unpoisoned()
    }

    /// Signal that the index changed. Signals sent while nobody listens merge into one.
    pub fn notify(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::sync::workspace::{ProjectedDeployment, ProjectedMeta, ProjectedSpec};

    fn deployment(ns: &str, name: &str, rv: &str) -> DeploymentProjection {
        DeploymentProjection::new(ProjectedDeployment {
            metadata: ProjectedMeta {
                name: name.into(),
                namespace: ns.into(),
                resource_version: rv.into(),
                generation: None,
                labels: Default::default(),
                annotations: Default::default(),
                creation_timestamp: None,
            },
            spec: ProjectedSpec { replicas: Some(1) },
            status: None,
        })
        .unwrap()
    }

    #[test]
    fn upsert_marks_dirty_and_acknowledgement_cleans() {
        let mut index = WorkspaceIndex::default();
        assert!(index.upsert(deployment("a", "ws", "1")));
        assert!(!index.upsert(deployment("a", "ws", "1")), "same version is no change");
        assert_eq!(index.dirty_len(), 1);
        index.mark_clean_if(&WorkspaceKey::new("a", "ws"), "0");
        assert_eq!(index.dirty_len(), 1, "an older acknowledgement leaves it dirty");
        index.mark_clean_if(&WorkspaceKey::new("a", "ws"), "1");
        assert_eq!(index.dirty_len(), 0);
        assert!(!index.upsert(deployment("a", "ws", "0")), "an older version never replaces a newer one");
    }

    #[test]
    fn an_acknowledged_entry_keeps_its_version_and_drops_its_info() {
        let mut index = WorkspaceIndex::default();
        let key = WorkspaceKey::new("a", "ws");
        index.upsert(deployment("a", "ws", "1"));
        index.mark_clean_if(&key, "0");
        assert!(index.get(&key).unwrap().info().is_some(), "kept while the control plane lacks it");
        index.mark_clean_if(&key, "1");
        let clean = index.get(&key).unwrap();
        assert_eq!((clean.resource_version(), clean.info()), ("1", None));
        assert!(!index.upsert(deployment("a", "ws", "1")), "the same version is still no change");
        assert!(index.upsert(deployment("a", "ws", "2")), "a new version brings its info");
        assert!(index.get(&key).unwrap().info().is_some());
    }

    #[test]
    fn a_refresh_restores_a_dropped_info_at_the_same_version() {
        let mut index = WorkspaceIndex::default();
        let key = WorkspaceKey::new("a", "ws");
        index.upsert(deployment("a", "ws", "5"));
        index.mark_clean_if(&key, "5");
        index.refresh(deployment("a", "ws", "4"));
        assert_eq!(index.get(&key).unwrap().info(), None, "an older read never replaces a newer entry");
        index.refresh(deployment("a", "ws", "5"));
        assert!(index.get(&key).unwrap().info().is_some());
        assert_eq!(index.dirty_len(), 1);
        index.remove(&key);
        index.refresh(deployment("a", "ws", "6"));
        assert!(!index.contains(&key), "a read that raced the watch's deletion brings nothing back");
    }

    #[test]
    fn replace_all_drops_the_missing_and_keeps_newer_watched_versions() {
        let mut index = WorkspaceIndex::default();
        index.upsert(deployment("a", "gone", "1"));
        index.upsert(deployment("a", "raced", "9"));
        index.replace_all(vec![deployment("a", "raced", "5"), deployment("b", "new", "3")]);
        assert_eq!(index.len(), 2);
        assert!(!index.contains(&WorkspaceKey::new("a", "gone")));
        assert_eq!(index.get(&WorkspaceKey::new("a", "raced")).unwrap().resource_version(), "9");
        assert_eq!(index.dirty_len(), 2, "a rebuilt index is all dirty");
    }

    #[test]
    fn compaction_keeps_entries_and_dirtiness() {
        let mut index = WorkspaceIndex::default();
        index.upsert(deployment("a", "clean", "1"));
        index.upsert(deployment("a", "dirty", "2"));
        index.mark_clean_if(&WorkspaceKey::new("a", "clean"), "1");
        let before = index.get(&WorkspaceKey::new("a", "dirty")).unwrap().clone();
        index.compact();
        assert_eq!(index.len(), 2);
        let after = index.get(&WorkspaceKey::new("a", "dirty")).unwrap();
        assert_eq!(**after, *before);
        assert!(!Arc::ptr_eq(after, &before), "a fresh copy");
        assert_eq!(
            index.dirty().iter().map(|d| d.key().clone()).collect::<Vec<_>>(),
            vec![WorkspaceKey::new("a", "dirty")]
        );
    }

    #[test]
    fn removal_clears_dirtiness() {
        let mut index = WorkspaceIndex::default();
        index.upsert(deployment("a", "ws", "1"));
        assert!(index.remove(&WorkspaceKey::new("a", "ws")));
        assert!(index.dirty().is_empty());
    }
}
