//! What a tunnel stream may reach of one workspace, read from the cluster when a stream asks
//! (`policy::dial` judges): its Deployment, its namespace, its Services and its Pods. Reads
//! only, with the rights the agent already has.

use super::Cluster;
use crate::agent::policy::dial::WorkspaceEndpoints;
use crate::agent::sync::workspace::WorkspaceKey;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, ListParams};

impl Cluster {
    /// None when the workspace's Deployment does not exist. A Deployment without the agent's
    /// label, or in a namespace that is not the agent's, is read as not ours.
    pub async fn workspace_endpoints(&self, key: &WorkspaceKey) -> Result<Option<WorkspaceEndpoints>, kube::Error> {
        let namespace = key.namespace();
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), namespace);
        let Some(deployment) = deployments.get_opt(key.name()).await? else { return Ok(None) };
        let namespace_ours = match self.config.namespace_mode.shared() {
            Some(shared) => shared == namespace,
            None => {
                let namespaces: Api<Namespace> = Api::all(self.client.clone());
                namespaces.get_opt(namespace).await?.is_some_and(|n| self.config.is_ours(&n.metadata))
            }
        };
        let ours = namespace_ours && self.config.is_ours(&deployment.metadata);
        if !ours {
            return Ok(Some(WorkspaceEndpoints::read(key.clone(), false, &deployment, &[], &[])));
        }
        let selector = deployment.spec.as_ref().and_then(|s| s.selector.match_labels.as_ref());
        let selector: Vec<String> = selector.into_iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
        if selector.is_empty() {
            // A Deployment must select its Pods: without a selector there is nothing to reach.
            return Ok(Some(WorkspaceEndpoints::read(key.clone(), true, &deployment, &[], &[])));
        }
        let services: Api<Service> = Api::namespaced(self.client.clone(), namespace);
        // The agent's own Services alone: in a shared namespace another agent's would name
        // ports of their own.
        let services = services.list(&ListParams::default().labels(&self.config.workspace_selector())).await?.items;
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pods = pods.list(&ListParams::default().labels(&selector.join(","))).await?.items;
        Ok(Some(WorkspaceEndpoints::read(key.clone(), true, &deployment, &services, &pods)))
    }
}
