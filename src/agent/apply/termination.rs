//! Terminating a workspace. With a namespace per workspace, its namespace is deleted; in a
//! shared namespace, every member of the workspace's inventories is pruned, then the
//! inventories, and the workspace is gone once none of its inventories is left.

use super::Applier;
use crate::agent::error::{ApplyError, api_message};
use crate::agent::policy::namespace_rule::Namespace;
use crate::agent::policy::plan;
use crate::agent::sync::workspace::WorkspaceKey;

impl Applier {
    /// Delete the workspace's namespace, or in a shared namespace its objects, guarded by the
    /// same rules as applies.
    pub async fn terminate(&self, key: &WorkspaceKey) -> Result<(), ApplyError> {
        self.forget(key);
        if self.policy.namespace_mode().shared().is_some() {
            return self.terminate_in_shared_namespace(key).await;
        }
        let namespace = key.namespace();
        match self.namespace_ownership(namespace).await? {
            Namespace::Missing => Ok(()),
            Namespace::Ours { .. } => self
                .calls
                .delete_namespace(namespace)
                .await
                .map_err(|e| ApplyError::kubernetes(format!("deleting namespace {namespace}: {}", api_message(&e)))),
        }
    }

    /// One pass: prune what each of the workspace's inventories owns; an inventory none of
    /// whose members was left to delete goes too. Objects held by finalizers keep their
    /// inventory for the next pass, which each cycle's answer asks for.
    async fn terminate_in_shared_namespace(&self, key: &WorkspaceKey) -> Result<(), ApplyError> {
        self.policy.namespace_mode().check_workspace(key).map_err(ApplyError::refused)?;
        let namespace = key.namespace();
        let inventories = self.workspace_inventories(key).await?;
        for (name, live) in inventories {
            let (members, _) = plan::prunable_in(live.members, namespace, &name, &self.policy);
            let mut left = 0usize;
            for member in &members {
                if self.calls.prune_member(member, &name).await.map_err(ApplyError::kubernetes)? {
                    left = left.saturating_add(1);
                }
            }
            if left == 0 {
                self.calls.delete_inventory(namespace, &name).await.map_err(|e| {
                    ApplyError::kubernetes(format!("deleting inventory {namespace}/{name}: {}", api_message(&e)))
                })?;
                tracing::info!(workspace = %key.name(), inventory = %name, "deleted a terminated workspace's inventory");
            } else {
                tracing::info!(workspace = %key.name(), inventory = %name, left, "a terminated workspace's objects are still being deleted");
            }
        }
        Ok(())
    }

    /// Whether a terminating workspace is gone: its namespace, or in a shared namespace all
    /// of its inventories.
    pub async fn termination_done(&self, key: &WorkspaceKey) -> Result<bool, kube::Error> {
        match self.policy.namespace_mode().shared() {
            Some(_) => Ok(self.calls.workspace_inventories(key.namespace(), key.name()).await?.is_empty()),
            None => Ok(self.calls.namespace_meta(key.namespace()).await?.is_none()),
        }
    }

    /// In a shared namespace, what a termination still waits for: the members its inventories
    /// list. None when nothing is left.
    pub async fn shared_termination_holdup(&self, key: &WorkspaceKey) -> Result<Option<String>, kube::Error> {
        let inventories = self.calls.workspace_inventories(key.namespace(), key.name()).await?;
        if inventories.is_empty() {
            return Ok(None);
        }
        let waiting: Vec<String> = inventories
            .iter()
            .map(|(name, live)| {
                let members: Vec<String> = live.members.iter().map(ToString::to_string).collect();
                format!("inventory {name} still lists [{}]", members.join(", "))
            })
            .collect();
        Ok(Some(waiting.join("; ")))
    }

    async fn workspace_inventories(
        &self,
        key: &WorkspaceKey,
    ) -> Result<Vec<(String, super::LiveInventory)>, ApplyError> {
        self.calls.workspace_inventories(key.namespace(), key.name()).await.map_err(|e| {
            ApplyError::kubernetes(format!("listing the inventories of workspace {}: {}", key.name(), api_message(&e)))
        })
    }
}
