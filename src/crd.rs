//! The `WorkspaceSyncStatus` custom resource: where an agent's sync stands (DESIGN §2).
//!
//! One object per agent, named after the agent id. The status is the agent's durable ledger:
//! acknowledged versions, terminations and pending errors survive restarts and full resyncs.
//! Per-workspace maps and lists are atomic, so `managedFields` stays one entry long.

use crate::protocol::{ErrorType, TerminationProgress};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const API_GROUP: &str = "wsync.dev";
/// Annotation that requests a full resync whenever its value changes.
pub const RESYNC_REQUESTED_ANNOTATION: &str = "wsync.dev/resync-requested";

pub const CONDITION_READY: &str = "Ready";
pub const CONDITION_SYNCED: &str = "Synced";
/// Present (True) while the control plane's last settings were refused and older ones hold.
pub const CONDITION_SETTINGS_REJECTED: &str = "SettingsRejected";
/// Present (True) while a termination has run past `--termination-timeout`.
pub const CONDITION_TERMINATION_STUCK: &str = "TerminationStuck";
/// Present (True) only while pending errors beyond the status's size budget were left out.
pub const CONDITION_LEDGER_TRUNCATED: &str = "LedgerTruncated";
/// The reason of the Warning Event an agent emits on its WorkspaceSyncStatus when it cannot
/// write it; `kubectl wsync status` reads it.
pub const EVENT_STATUS_WRITE_FAILED: &str = "StatusWriteFailed";
/// Present (True) while the last answer held more than the agent takes from one answer.
pub const CONDITION_ANSWER_LIMITED: &str = "AnswerLimited";

// Each printcolumn repeats `type_`, which clippy mistakes for a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[kube(
    group = "wsync.dev",
    version = "v1alpha1",
    kind = "WorkspaceSyncStatus",
    namespaced,
    shortname = "wss",
    status = "WorkspaceSyncStatusStatus",
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Workspaces", type_ = "integer", json_path = ".status.workspaces"),
    printcolumn(name = "Errors", type_ = "integer", json_path = ".status.errorCount"),
    printcolumn(name = "Reason", type_ = "string", json_path = r#".status.conditions[?(@.type=="Synced")].reason"#),
    printcolumn(name = "Last Full Sync", type_ = "date", json_path = ".status.lastFullSyncTime"),
    printcolumn(name = "Last Partial Sync", type_ = "date", json_path = ".status.lastPartialSyncTime"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSyncStatusSpec {
    pub agent_id: String,
    /// When true the agent applies and deletes nothing, but still reports.
    #[serde(default)]
    pub paused: bool,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceSyncStatusStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_full_sync_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_full_sync_time: Option<Time>,
    /// Refreshed at most once a minute, so that an idle agent does not write every cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_partial_sync_time: Option<Time>,
    /// The last value of the `wsync.dev/resync-requested` annotation that a full cycle handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_resync_request: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_reconciliation_interval_seconds: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_reconciliation_interval_seconds: Option<u64>,
    /// Orders applies across restarts: bumped once per agent start.
    #[serde(default)]
    pub epoch: u64,
    /// Acknowledged Deployment resourceVersion per workspace, `"<namespace>/<name>": "<rv>"`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub acknowledged: BTreeMap<String, String>,
    /// Termination progress per workspace, `"<namespace>/<name>": Terminating|Terminated`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("x-kubernetes-map-type" = "atomic"))]
    pub terminations: BTreeMap<String, TerminationProgress>,
    /// Failures that still hold: those the control plane has not acknowledged yet, and those
    /// it has (`acknowledged: true`), kept until an apply of the workspace succeeds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub pending_errors: Vec<PendingErrorRecord>,
    /// Distinct error messages, referred to by index from `pendingErrors`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub error_messages: Vec<String>,
    #[serde(default)]
    pub workspaces: u64,
    /// Failures the control plane has not acknowledged yet.
    #[serde(default)]
    pub pending_error_count: u64,
    /// Failures that hold, acknowledged or not: the `Errors` column.
    #[serde(default)]
    pub error_count: u64,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingErrorRecord {
    /// `"<namespace>/<name>"`
    pub workspace: String,
    #[serde(rename = "type")]
    pub error_type: ErrorType,
    /// `"<epoch>.<sequence>"` of the apply that produced it.
    pub version: String,
    pub first_seen: Time,
    /// Index into `status.errorMessages`.
    pub message: u32,
    /// The control plane has acknowledged it: it goes with every report of the workspace,
    /// but is no longer sent as new.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub acknowledged: bool,
}

impl WorkspaceSyncStatus {
    pub fn resync_request(&self) -> Option<&str> {
        self.metadata.annotations.as_ref()?.get(RESYNC_REQUESTED_ANNOTATION).map(String::as_str)
    }

    pub fn paused(&self) -> bool {
        self.spec.paused
    }
}

/// The CRD as YAML, as `wsync crd` prints it and `crds/` holds it.
pub fn crd_yaml() -> Result<String, serde_saphyr::SerializeError> {
    use kube::CustomResourceExt;
    crate::yaml::to_string(&WorkspaceSyncStatus::crd())
}
