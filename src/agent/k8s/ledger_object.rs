//! The agent's own WorkspaceSyncStatus: the ledger's durable copy. Checked, created when
//! missing (another replica may win the race), and its status server-side applied whole.

use super::{Cluster, is_status};
use crate::agent::error::{Error, Result};
use crate::crd::{WorkspaceSyncStatus, WorkspaceSyncStatusSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};

impl Cluster {
    pub fn ledger_api(&self) -> Api<WorkspaceSyncStatus> {
        Api::namespaced(self.client.clone(), &self.config.agent_namespace)
    }

    /// Fail clearly when the CRD is missing, rather than retrying forever.
    pub async fn check_crd(&self) -> Result<()> {
        match self.ledger_api().list(&ListParams::default().limit(1)).await {
            Ok(_) => Ok(()),
            Err(e) if is_status(&e, 404) => Err(Error::CrdMissing),
            Err(e) => Err(e.into()),
        }
    }

    /// The agent's own `WorkspaceSyncStatus`, and whether it was created just now.
    pub async fn ensure_ledger_object(&self) -> Result<(WorkspaceSyncStatus, bool)> {
        let api = self.ledger_api();
        if let Some(existing) = api.get_opt(&self.config.agent_id).await? {
            return Ok((existing, false));
        }
        let object = WorkspaceSyncStatus {
            metadata: ObjectMeta { name: Some(self.config.agent_id.clone()), ..Default::default() },
            spec: WorkspaceSyncStatusSpec { agent_id: self.config.agent_id.clone(), paused: false },
            status: None,
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(created) => Ok((created, true)),
            // Another replica won the race; theirs is as good as ours.
            Err(e) if is_status(&e, 409) => Ok((api.get(&self.config.agent_id).await?, false)),
            Err(e) => Err(e.into()),
        }
    }

    /// Server-side apply the whole status under the agent's field manager, given as its
    /// serialized JSON (rendered once, also to compare with what was last written).
    pub async fn write_status(&self, status: &serde_json::value::RawValue) -> Result<()> {
        #[derive(Debug, serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct StatusPatch<'a> {
            api_version: &'a str,
            kind: &'a str,
            status: &'a serde_json::value::RawValue,
        }
        let patch = StatusPatch {
            api_version: &WorkspaceSyncStatus::api_version(&()),
            kind: &WorkspaceSyncStatus::kind(&()),
            status,
        };
        let params = PatchParams::apply(&self.config.field_manager).force();
        self.ledger_api().patch_status(&self.config.agent_id, &params, &Patch::Apply(&patch)).await?;
        Ok(())
    }

    /// The reference Events about the agent itself hang on.
    pub fn ledger_reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(WorkspaceSyncStatus::api_version(&()).into()),
            kind: Some(WorkspaceSyncStatus::kind(&()).into()),
            name: Some(self.config.agent_id.clone()),
            namespace: Some(self.config.agent_namespace.clone()),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod verifier;
