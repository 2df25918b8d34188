//! The Pods of this agent's workspaces: one watch by the agent's label, keeping only the
//! failing ones (`sync::pod_failures`). A change to a workspace's failure marks it dirty, so
//! that the next cycle observes it.

use super::Cluster;
use super::watch::{Followed, follow};
use crate::agent::objects::WorkspacePod;
use crate::agent::sync::index::SharedIndex;
use crate::agent::sync::pod_failures::{PodFailure, PodFailures, from_pod, owning_deployment};
use crate::agent::sync::workspace::WorkspaceKey;
use crate::runtime::LockExt;
use jiff::SignedDuration;
use kube::ResourceExt;
use kube::runtime::watcher;
use std::sync::{Arc, Mutex};

impl Cluster {
    /// Feed `failures` from one watch on this agent's Pods. Runs until dropped.
    pub async fn watch_pods(&self, failures: Arc<Mutex<PodFailures>>, index: SharedIndex, grace: SignedDuration) {
        let api = self.config.workspaces_api::<WorkspacePod>(&self.client);
        let config = watcher::Config::default().labels(&self.config.workspace_selector());
        let project = |pod: WorkspacePod| Some((pod_key(&pod), failure_of(&pod, grace)));
        let changed = |workspaces: Vec<WorkspaceKey>| {
            if workspaces.is_empty() {
                return;
            }
            let mut dirty = index.lock();
            for workspace in &workspaces {
                dirty.mark_dirty(workspace);
            }
            drop(dirty);
            index.notify();
        };
        follow(api, config, "pod", project, |event| match event {
            Followed::Listed(all) => {
                let failing = all.into_iter().filter_map(|(pod, failure)| Some((pod, failure?))).collect();
                changed(failures.lock_unpoisoned().replace(failing));
            }
            Followed::Applied((pod, failure)) => {
                changed(failures.lock_unpoisoned().set(pod, failure).into_iter().collect());
            }
            Followed::Deleted(pod) => {
                changed(failures.lock_unpoisoned().set(pod_key(&pod), None).into_iter().collect());
            }
        })
        .await
    }
}

fn pod_key(pod: &WorkspacePod) -> Box<str> {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any()).into()
}

/// None for a healthy Pod, or one that belongs to no workspace Deployment; a Pod that is
/// going away fails nothing.
fn failure_of(pod: &WorkspacePod, grace: SignedDuration) -> Option<PodFailure> {
    if pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let owners = pod.metadata.owner_references.as_deref().unwrap_or_default();
    let deployment = owning_deployment(owners, pod.labels())?;
    let workspace = WorkspaceKey::new(pod.namespace().unwrap_or_default(), deployment);
    from_pod(workspace, pod.status.as_ref()?, grace)
}
