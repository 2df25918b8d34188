//! The LIST a full resync takes of what the agent applied, by the agent's label, for the
//! drift check (`apply::drift`). Secrets are never listed: the agent reads no Secret outside
//! its own namespace, so a config's Secrets are applied every full resync.

use super::{ApiCalls, KindQuery};
use crate::agent::apply::drift::LiveObjects;
use crate::agent::error::api_message;
use crate::agent::k8s::is_status;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::Scope;

/// Objects a page: bounded memory whatever the number of workspaces.
const PAGE: u32 = 500;

impl ApiCalls {
    /// Every object labelled with the agent's id, of each (group, kind), in `namespace` or in
    /// all. A kind that cannot be listed whole is left out, and its objects are applied.
    pub async fn live_objects(&self, kinds: &[(String, String)], namespace: Option<&str>) -> LiveObjects {
        let mut live = LiveObjects::new(self.config.field_manager.as_str());
        let selector = format!("{}={}", self.config.workspace_label_key, self.config.agent_id);
        for (group, kind) in kinds {
            match self.list_kind(group, kind, namespace, &selector, &mut live).await {
                Ok(()) => live.listed_whole(group, kind),
                // Not granted (a shared namespace takes no quota): expected, and said once at start.
                Err(error) if is_status(&error, 403) => {
                    tracing::debug!(group, kind, error = %api_message(&error), "may not list for the drift check; every object of this kind is applied")
                }
                Err(error) => {
                    tracing::warn!(group, kind, error = %api_message(&error), "could not list for the drift check; every object of this kind is applied")
                }
            }
        }
        live
    }

    async fn list_kind(
        &self,
        group: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: &str,
        live: &mut LiveObjects,
    ) -> Result<(), kube::Error> {
        let query = KindQuery::Recommended { group: group.to_string(), kind: kind.to_string() };
        let (resource, capabilities) = self.resolve(&query).await?;
        if capabilities.scope != Scope::Namespaced {
            // The apply policy refuses cluster-scoped kinds; none was applied.
            return Ok(());
        }
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        let mut params = ListParams::default().labels(selector).limit(PAGE);
        loop {
            let page = api.list(&params).await?;
            for object in &page.items {
                live.observe(group, kind, &serde_json::to_value(object).map_err(kube::Error::SerdeError)?);
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(()),
            }
        }
    }
}
