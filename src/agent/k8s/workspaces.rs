//! The workspace Deployments: one watch feeding the index, a paged LIST for the full resync,
//! a GET to read one again, and what holds a terminating workspace's namespace.

use super::Cluster;
use super::watch::{Followed, follow};
use crate::agent::objects::WorkspaceDeployment;
use crate::agent::sync::index::SharedIndex;
use crate::agent::sync::workspace::{DeploymentProjection, WorkspaceKey};
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;

/// LIST page size for the full resync's rebuild of the index.
const LIST_PAGE_SIZE: u32 = 500;

impl Cluster {
    /// One paged LIST of this agent's Deployments, projected.
    pub async fn list_workspaces(&self) -> Result<Vec<DeploymentProjection>, kube::Error> {
        let api: Api<WorkspaceDeployment> = self.config.workspaces_api(&self.client);
        let mut params = ListParams::default().labels(&self.config.workspace_selector()).limit(LIST_PAGE_SIZE);
        let mut projected = Vec::new();
        loop {
            let page = api.list(&params).await?;
            projected.extend(page.items.into_iter().filter_map(DeploymentProjection::from_deployment));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(projected),
            }
        }
    }

    /// One workspace's Deployment read again, projected; None when it is gone or no longer
    /// carries this agent's label.
    pub async fn get_workspace(&self, key: &WorkspaceKey) -> Result<Option<DeploymentProjection>, kube::Error> {
        let api: Api<WorkspaceDeployment> = Api::namespaced(self.client.clone(), key.namespace());
        let deployment = api.get_opt(key.name()).await?.filter(|d| self.config.is_ours(&d.metadata));
        Ok(deployment.and_then(DeploymentProjection::from_deployment))
    }

    /// Feed the index from one watch on this agent's Deployments, in all namespaces. Runs until
    /// dropped.
    pub async fn watch_workspaces(&self, index: SharedIndex) {
        let api: Api<WorkspaceDeployment> = self.config.workspaces_api(&self.client);
        let config = watcher::Config::default().labels(&self.config.workspace_selector());
        follow(api, config, "workspace", DeploymentProjection::from_deployment, |event| {
            let changed = match event {
                Followed::Applied(projection) => index.lock().upsert(projection),
                Followed::Deleted(d) => {
                    let key = WorkspaceKey::new(d.namespace().unwrap_or_default(), d.name_any());
                    index.lock().remove(&key)
                }
                Followed::Listed(listed) => {
                    tracing::debug!(workspaces = listed.len(), "workspace watch (re)listed");
                    index.lock().replace_all(listed);
                    true
                }
            };
            if changed {
                index.notify();
            }
        })
        .await
    }

    /// What holds a namespace that is being deleted: its conditions that are True (what
    /// content or finalizers remain), and its finalizers. None when it is gone.
    pub async fn namespace_holdup(&self, namespace: &str) -> Result<Option<String>, kube::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let Some(ns) = api.get_opt(namespace).await? else { return Ok(None) };
        let mut reasons: Vec<String> = ns
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .filter(|c| c.status == "True")
            .map(|c| format!("{}: {}", c.type_, c.message.as_deref().unwrap_or_default()))
            .collect();
        let finalizers: Vec<&String> = ns.metadata.finalizers.iter().flatten().collect();
        if !finalizers.is_empty() {
            reasons.push(format!("metadata.finalizers: {finalizers:?}"));
        }
        if reasons.is_empty() {
            reasons.push("the namespace controller has reported nothing yet".into());
        }
        Ok(Some(reasons.join("; ")))
    }
}
