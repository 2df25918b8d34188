//! Warning Events about a workspace, on its Deployment or on the WorkspaceSyncStatus.

use super::Cluster;
use crate::agent::error::api_message;
use crate::agent::sync::error_tracker::cap_message_to;
use crate::agent::sync::outcome::failure_event_note;
use crate::agent::sync::workspace::WorkspaceKey;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::runtime::events::{Event, EventType};

/// The Event API caps a note at 1 KiB.
const MAX_EVENT_NOTE_BYTES: usize = 1024;

impl Cluster {
    /// A workspace's failure, as a Warning Event on its Deployment when it exists, else on the
    /// WorkspaceSyncStatus. `on_deployment` is whether the index holds the Deployment.
    pub async fn warn_workspace(
        &self,
        key: &WorkspaceKey,
        on_deployment: bool,
        reason: &str,
        action: &str,
        message: &str,
    ) {
        let deployment = match on_deployment {
            true => self.deployment_reference(key).await,
            false => None,
        };
        let note = failure_event_note(key, message, deployment.is_some());
        let regarding = deployment.unwrap_or_else(|| self.ledger_reference());
        self.warn_event(&regarding, key, reason, action, &note).await;
    }

    /// A Warning Event about the agent itself, on its WorkspaceSyncStatus.
    pub async fn warn_agent(&self, reason: &str, action: &str, note: &str) {
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(cap_message_to(note, MAX_EVENT_NOTE_BYTES)),
            action: action.into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &self.ledger_reference()).await {
            tracing::warn!(error = %api_message(&error), reason, "could not emit an Event");
        }
    }

    /// Emit a Warning Event; failures to emit are logged, never fatal.
    /// The workspace's namespace goes in as the related object: kube's recorder merges events
    /// with the same regarding, related and reason into one series, and failures of different
    /// workspaces on the WorkspaceSyncStatus must stay apart.
    async fn warn_event(
        &self,
        regarding: &ObjectReference,
        workspace: &WorkspaceKey,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        let note = cap_message_to(note, MAX_EVENT_NOTE_BYTES);
        let related = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Namespace".into()),
            name: Some(workspace.namespace().to_string()),
            ..Default::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: Some(related),
        };
        if let Err(error) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(error = %api_message(&error), reason, "could not emit an Event");
        }
    }

    /// A workspace Deployment's reference, with its uid, if it exists.
    async fn deployment_reference(&self, key: &WorkspaceKey) -> Option<ObjectReference> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), key.namespace());
        let deployment = api.get_opt(key.name()).await.ok()??;
        Some(ObjectReference {
            api_version: Some("apps/v1".into()),
            kind: Some("Deployment".into()),
            name: Some(key.name().to_string()),
            namespace: Some(key.namespace().to_string()),
            uid: deployment.metadata.uid,
            ..Default::default()
        })
    }
}
