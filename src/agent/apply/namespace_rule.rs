//! The namespace rule's reads (DESIGN §2, "Trust": where): what the cluster holds of a
//! namespace when a write is decided, judged by `policy::namespace_rule`.

use super::Applier;
use crate::agent::error::{ApplyError, api_message};
use crate::agent::policy::namespace_rule::{Found, Namespace, judge};
use crate::agent::policy::pull_secrets;
use crate::protocol::ImagePullSecret;
use std::collections::BTreeSet;

impl Applier {
    /// The namespace rule, shared by apply and termination: never a protected namespace, and
    /// only one that is new or already carries this agent's label.
    pub(super) async fn namespace_ownership(&self, namespace: &str) -> Result<Namespace, ApplyError> {
        if self.policy.protected_namespace(namespace) {
            return Err(ApplyError::kubernetes(format!("refused: namespace {namespace} is protected")));
        }
        if let Some(record) = self.calls.cached_own_namespace(namespace) {
            let found = Found { ours: true, copied: record.copied.as_deref(), labels_current: record.labels_current };
            return judge(namespace, Some(found), "").map_err(ApplyError::kubernetes);
        }
        let meta = self
            .calls
            .namespace_meta(namespace)
            .await
            .map_err(|e| ApplyError::kubernetes(format!("namespace {namespace}: {}", api_message(&e))))?;
        let config = self.calls.config();
        let found = meta.as_ref().map(|meta| Found {
            ours: config.is_ours(meta),
            copied: meta.annotations.as_ref().and_then(|a| a.get(pull_secrets::COPIED_ANNOTATION)).map(String::as_str),
            labels_current: config.pod_security_labels_current(meta),
        });
        let label = format!("{}={}", config.workspace_label_key, config.agent_id);
        judge(namespace, found, &label).map_err(ApplyError::kubernetes)
    }

    /// The namespace rule for a write decided long after the workspace's apply (a pull secret
    /// copied again): the namespace must still be the agent's. The cache follows the agent's
    /// label by watch, so a namespace whose label was taken off, or that was deleted and made
    /// again by someone else, is read again and refused.
    pub(super) async fn still_ours(&self, namespace: &str) -> Result<(), ApplyError> {
        match self.namespace_ownership(namespace).await? {
            Namespace::Ours { .. } => Ok(()),
            Namespace::Missing => Err(ApplyError::kubernetes(format!("namespace {namespace} is gone"))),
        }
    }

    /// Create the namespace if it is missing, and set its Pod Security labels if they are
    /// not current; returns the pull secrets already copied into it.
    pub(super) async fn ensure_own_namespace(&self, namespace: &str) -> Result<BTreeSet<ImagePullSecret>, ApplyError> {
        let (copied, labels_current) = match self.namespace_ownership(namespace).await? {
            Namespace::Ours { copied, labels_current } => (copied, labels_current),
            Namespace::Missing => {
                let created = self.calls.create_namespace(namespace).await.map_err(|e| {
                    ApplyError::kubernetes(format!("creating namespace {namespace}: {}", api_message(&e)))
                })?;
                if created {
                    return Ok(BTreeSet::new());
                }
                // Someone created it since it was read: the rule judges what is there now.
                match self.namespace_ownership(namespace).await? {
                    Namespace::Ours { copied, labels_current } => (copied, labels_current),
                    Namespace::Missing => {
                        return Err(ApplyError::kubernetes(format!(
                            "namespace {namespace} was created and deleted by someone else meanwhile; the next cycle tries again"
                        )));
                    }
                }
            }
        };
        if !labels_current {
            self.calls
                .assert_namespace_labels(namespace)
                .await
                .map_err(|e| ApplyError::kubernetes(format!("labelling namespace {namespace}: {}", api_message(&e))))?;
            tracing::info!(namespace, "set the Pod Security labels of a workspace namespace");
        }
        Ok(copied)
    }
}

#[cfg(test)]
mod verifier;
