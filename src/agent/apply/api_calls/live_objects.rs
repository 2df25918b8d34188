//! The LIST a full resync takes of what the agent applied, by the agent's label, for the
//! drift check (`policy::drift`). Secrets are never listed: the agent reads no Secret outside
//! its own namespace, so a config's Secrets are applied every full resync.

use super::{ApiCalls, KindQuery};
use crate::agent::error::api_message;
use crate::agent::k8s::is_status;
use crate::agent::policy::drift::LiveObjects;
use kube::Resource;
use kube::api::{DynamicObject, ListParams, ObjectList};
use kube::core::Request;
use kube::discovery::Scope;
use serde_json::Value;

/// Objects a page: bounded memory whatever the number of workspaces.
const PAGE: u32 = 500;

impl ApiCalls {
    /// Every object labelled with the agent's id, of each (group, kind), in `namespace` or in
    /// all. The kinds are listed side by side (at 10,000 workspaces two of them hold 10,000
    /// objects each); a kind that cannot be listed whole is left out, and its objects are applied.
    pub async fn live_objects(&self, kinds: &[(String, String)], namespace: Option<&str>) -> LiveObjects {
        let mut live = LiveObjects::new(self.config.field_manager.as_str());
        let selector = format!("{}={}", self.config.workspace_label_key, self.config.agent_id);
        let lists = kinds.iter().map(|(group, kind)| {
            let (mut part, selector) = (live.part(), selector.as_str());
            async move {
                let listed = self.list_kind(group, kind, namespace, selector, &mut part).await;
                (group, kind, part, listed)
            }
        });
        for (group, kind, part, listed) in futures::future::join_all(lists).await {
            match listed {
                Ok(()) => {
                    live.absorb(part);
                    live.listed_whole(group, kind);
                }
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

    /// One kind, page by page, each object read as plain JSON: the drift check needs nothing
    /// typed, and a DynamicObject would be turned back into JSON object by object.
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
        let request = Request::new(DynamicObject::url_path(&resource, namespace));
        let mut params = ListParams::default().labels(selector).limit(PAGE);
        loop {
            let mut list = request.list(&params).map_err(kube::Error::BuildRequest)?;
            list.extensions_mut().insert("list");
            let page: ObjectList<Value> = self.client.request(list).await?;
            for object in &page.items {
                live.observe(group, kind, object);
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(()),
            }
        }
    }
}

#[cfg(test)]
mod verifier;
