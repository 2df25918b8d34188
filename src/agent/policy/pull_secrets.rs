//! Image pull secrets copied into workspace namespaces (DESIGN §2, "One cycle", step 4), as
//! pure decisions: which copies a workspace needs, which to delete, and which sources changed.
//!
//! The copies a namespace holds are recorded in an annotation on the namespace itself, so a
//! restarted agent still knows what to remove when a secret leaves the agent's configuration.

use crate::agent::sync::workspace::WorkspaceKey;
use crate::protocol::ImagePullSecret;
use std::collections::{BTreeMap, BTreeSet};

/// On a workspace namespace: the sources of the pull secrets copied into it, `ns/name,…`.
pub const COPIED_ANNOTATION: &str = "wsync.dev/image-pull-secrets";
/// On a copy: the source it was copied from, `ns/name`.
pub const SOURCE_ANNOTATION: &str = "wsync.dev/copied-from";
/// The only Secret types copied: registry credentials, nothing else a Secret might hold.
pub const DOCKER_CONFIG_TYPES: &[&str] = &["kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg"];

pub fn source_ref(secret: &ImagePullSecret) -> String {
    format!("{}/{}", secret.namespace, secret.name)
}

/// Read the namespace annotation; entries that don't parse are ignored.
pub fn parse_copied(annotation: Option<&str>) -> BTreeSet<ImagePullSecret> {
    annotation
        .unwrap_or_default()
        .split(',')
        .filter_map(|entry| {
            let (namespace, name) = entry.trim().split_once('/')?;
            (!namespace.is_empty() && !name.is_empty())
                .then(|| ImagePullSecret { name: name.into(), namespace: namespace.into() })
        })
        .collect()
}

pub fn render_copied(copied: &BTreeSet<ImagePullSecret>) -> String {
    copied.iter().map(source_ref).collect::<Vec<_>>().join(",")
}

/// What to do in one workspace namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    pub wanted: BTreeSet<ImagePullSecret>,
    /// Copies whose source is no longer wanted (each copy is named as its source).
    pub delete: Vec<ImagePullSecret>,
}

impl CopyPlan {
    /// Whether the namespace annotation must be rewritten.
    pub fn changes_record(&self, copied: &BTreeSet<ImagePullSecret>) -> bool {
        self.wanted != *copied
    }
}

/// Decide the copies for a namespace. Two wanted sources with one name would collide there.
pub fn plan_copies(wanted: &[ImagePullSecret], copied: &BTreeSet<ImagePullSecret>) -> Result<CopyPlan, String> {
    let mut by_name: BTreeMap<&str, &ImagePullSecret> = BTreeMap::new();
    for secret in wanted {
        if let Some(other) = by_name.insert(secret.name.as_str(), secret)
            && other != secret
        {
            return Err(format!(
                "image pull secrets {} and {} would both be copied as {}",
                source_ref(other),
                source_ref(secret),
                secret.name
            ));
        }
    }
    let mut names = BTreeSet::new();
    let delete = copied
        .iter()
        .filter(|old| !by_name.contains_key(old.name.as_str()) && names.insert(old.name.as_str()))
        .cloned()
        .collect();
    Ok(CopyPlan { wanted: wanted.iter().cloned().collect(), delete })
}

/// Which workspaces hold a copy of which source, and the source's resourceVersion at the last
/// copy, so that a changed source is copied again. Derived state: a full cycle re-applies every
/// workspace and so rebuilds it.
#[derive(Debug, Default)]
pub struct CopyTracker {
    sources: BTreeMap<ImagePullSecret, TrackedSource>,
}

#[derive(Debug, Default)]
struct TrackedSource {
    resource_version: Option<String>,
    holders: BTreeSet<WorkspaceKey>,
}

impl CopyTracker {
    /// The workspace now holds exactly `wanted`, copied at the given resourceVersions.
    pub fn copied(&mut self, key: &WorkspaceKey, wanted: &[(ImagePullSecret, Option<String>)]) {
        self.forget(key);
        for (source, resource_version) in wanted {
            let tracked = self.sources.entry(source.clone()).or_default();
            tracked.resource_version = resource_version.clone();
            tracked.holders.insert(key.clone());
        }
    }

    pub fn forget(&mut self, key: &WorkspaceKey) {
        for tracked in self.sources.values_mut() {
            tracked.holders.remove(key);
        }
        self.sources.retain(|_, tracked| !tracked.holders.is_empty());
    }

    pub fn clear(&mut self) {
        self.sources.clear();
    }

    pub fn sources(&self) -> Vec<ImagePullSecret> {
        self.sources.keys().cloned().collect()
    }

    /// Given a source's current resourceVersion (None: it is gone), the workspaces whose copy
    /// is out of date. Records the new version.
    pub fn stale_holders(&mut self, source: &ImagePullSecret, current: Option<&str>) -> Vec<WorkspaceKey> {
        let Some(tracked) = self.sources.get_mut(source) else { return Vec::new() };
        if tracked.resource_version.as_deref() == current {
            return Vec::new();
        }
        tracked.resource_version = current.map(str::to_string);
        tracked.holders.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(namespace: &str, name: &str) -> ImagePullSecret {
        ImagePullSecret { name: name.into(), namespace: namespace.into() }
    }

    #[test]
    fn the_record_round_trips_and_ignores_garbage() {
        let copied: BTreeSet<_> = [secret("default", "regcred"), secret("infra", "mirror")].into();
        assert_eq!(parse_copied(Some(&render_copied(&copied))), copied);
        assert_eq!(parse_copied(Some("nonsense,/x,y/, infra/mirror")), [secret("infra", "mirror")].into());
        assert!(parse_copied(None).is_empty());
    }

    #[test]
    fn copies_whose_source_left_are_deleted_and_a_name_collision_is_an_error() {
        let copied: BTreeSet<_> = [secret("default", "regcred"), secret("infra", "old")].into();
        let plan = plan_copies(&[secret("default", "regcred")], &copied).expect("plan");
        assert_eq!(plan.delete, vec![secret("infra", "old")]);
        assert!(plan.changes_record(&copied));
        let same = plan_copies(&[secret("default", "regcred"), secret("infra", "old")], &copied).expect("plan");
        assert!(same.delete.is_empty() && !same.changes_record(&copied));
        // A source that moved namespaces keeps its copy's name: nothing to delete.
        let moved = plan_copies(&[secret("other", "old")], &[secret("infra", "old")].into()).expect("plan");
        assert!(moved.delete.is_empty());
        let error = plan_copies(&[secret("a", "regcred"), secret("b", "regcred")], &BTreeSet::new()).unwrap_err();
        assert!(error.contains("a/regcred and b/regcred"), "{error}");
    }

    #[test]
    fn a_changed_source_names_every_holder_once() {
        let mut tracker = CopyTracker::default();
        let regcred = secret("default", "regcred");
        let (one, two) = (WorkspaceKey::new("ns-1", "ws"), WorkspaceKey::new("ns-2", "ws"));
        tracker.copied(&one, &[(regcred.clone(), Some("1".into()))]);
        tracker.copied(&two, &[(regcred.clone(), Some("1".into()))]);
        assert!(tracker.stale_holders(&regcred, Some("1")).is_empty());
        assert_eq!(tracker.stale_holders(&regcred, Some("2")), vec![one.clone(), two.clone()]);
        assert!(tracker.stale_holders(&regcred, Some("2")).is_empty(), "recorded");
        tracker.forget(&one);
        tracker.copied(&two, &[]);
        assert!(tracker.sources().is_empty(), "a source nobody holds is dropped");
    }
}
