//! What `kubectl wsync` shows, from a WorkspaceSyncStatus and the live Deployments: rows,
//! and the tables kubectl would print. Pure: the plugin's calls live in its `mod.rs`.

use crate::crd::WorkspaceSyncStatus;
use crate::protocol::TerminationProgress;
use crate::terminal::table;
use jiff::Timestamp;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// One agent's state, as its WorkspaceSyncStatus holds it.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AgentStatus {
    pub agent: String,
    pub synced: String,
    pub reason: String,
    pub message: String,
    pub paused: bool,
    pub partial_interval_seconds: Option<u64>,
    pub full_interval_seconds: Option<u64>,
    pub last_full_sync: Option<String>,
    pub next_full_sync: Option<String>,
    pub workspaces: u64,
    /// Failures that hold, acknowledged by the control plane or not.
    pub errors: u64,
    /// Of those, the ones the control plane has not acknowledged yet.
    pub pending_errors: u64,
    pub terminating: usize,
    pub epoch: u64,
}

/// One workspace, from the ledger and the cluster.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceRow {
    pub agent: String,
    pub namespace: String,
    pub name: String,
    /// The Deployment's resourceVersion in the cluster; None when it has none.
    pub resource_version: Option<String>,
    /// The version the control plane acknowledged.
    pub acknowledged: Option<String>,
    /// `in sync`, `behind` (the control plane has not seen the cluster's version), or
    /// `gone` (acknowledged, no longer in the cluster).
    pub sync: &'static str,
    pub termination: Option<TerminationProgress>,
    pub error: Option<ErrorRow>,
}

/// One failure that holds; `acknowledged` once the control plane has it.
#[derive(Debug, Serialize, PartialEq, Clone)]
#[serde(rename_all = "camelCase")]
pub struct ErrorRow {
    pub agent: String,
    pub workspace: String,
    pub error_type: String,
    pub version: String,
    pub first_seen: String,
    pub age_seconds: i64,
    pub message: String,
    pub acknowledged: bool,
}

fn condition_of<'a>(
    wss: &'a WorkspaceSyncStatus,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    wss.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_)
}

pub fn agent_status(wss: &WorkspaceSyncStatus) -> AgentStatus {
    let status = wss.status.clone().unwrap_or_default();
    let synced = condition_of(wss, "Synced");
    AgentStatus {
        agent: wss.spec.agent_id.clone(),
        synced: synced.map_or("Unknown".into(), |c| c.status.clone()),
        reason: synced.map_or(String::new(), |c| c.reason.clone()),
        message: synced.map_or(String::new(), |c| c.message.clone()),
        paused: wss.spec.paused,
        partial_interval_seconds: status.partial_reconciliation_interval_seconds,
        full_interval_seconds: status.full_reconciliation_interval_seconds,
        last_full_sync: status.last_full_sync_time.map(|t| t.0.to_string()),
        next_full_sync: status.next_full_sync_time.map(|t| t.0.to_string()),
        workspaces: status.workspaces,
        errors: status.error_count,
        pending_errors: status.pending_error_count,
        terminating: status.terminations.values().filter(|p| **p == TerminationProgress::Terminating).count(),
        epoch: status.epoch,
    }
}

/// The agent's newest `StatusWriteFailed` Event: when it was said, and what.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWriteFailure {
    pub at: Timestamp,
    pub note: String,
}

/// A status the agent cannot write still shows its last success: an Event said since then
/// (newer than the status's last sync) is what holds now, and the status row says so.
pub fn with_status_write_failure(
    mut status: AgentStatus,
    wss: &WorkspaceSyncStatus,
    failure: Option<StatusWriteFailure>,
) -> AgentStatus {
    let Some(failure) = failure else { return status };
    let written = wss.status.as_ref().and_then(|s| {
        let partial = s.last_partial_sync_time.as_ref().map(|t| t.0);
        let full = s.last_full_sync_time.as_ref().map(|t| t.0);
        partial.max(full)
    });
    if written.is_none_or(|written| failure.at > written) {
        status.synced = "False".into();
        status.reason = "StatusWriteFailed".into();
        status.message = failure.note;
    }
    status
}

pub fn errors(wss: &WorkspaceSyncStatus, now: Timestamp) -> Vec<ErrorRow> {
    let Some(status) = &wss.status else { return Vec::new() };
    status
        .pending_errors
        .iter()
        .map(|e| ErrorRow {
            agent: wss.spec.agent_id.clone(),
            workspace: e.workspace.clone(),
            error_type: format!("{:?}", e.error_type).to_lowercase(),
            version: e.version.clone(),
            first_seen: e.first_seen.0.to_string(),
            age_seconds: now.duration_since(e.first_seen.0).as_secs().max(0),
            message: status
                .error_messages
                .get(usize::try_from(e.message).unwrap_or(usize::MAX))
                .map_or_else(|| "(message missing from the status)".into(), Clone::clone),
            acknowledged: e.acknowledged,
        })
        .collect()
}

/// Every workspace the ledger or the cluster knows, `deployments` being `"<namespace>/<name>"`
/// → resourceVersion of the agent's labelled Deployments.
pub fn workspaces(
    wss: &WorkspaceSyncStatus,
    deployments: &BTreeMap<String, String>,
    now: Timestamp,
) -> Vec<WorkspaceRow> {
    let status = wss.status.clone().unwrap_or_default();
    let errors: BTreeMap<String, ErrorRow> = errors(wss, now).into_iter().map(|e| (e.workspace.clone(), e)).collect();
    let keys: BTreeSet<&String> = deployments
        .keys()
        .chain(status.acknowledged.keys())
        .chain(status.terminations.keys())
        .chain(errors.keys())
        .collect();
    keys.into_iter()
        .map(|key| {
            let (namespace, name) = key.split_once('/').unwrap_or(("", key));
            let live = deployments.get(key);
            let acknowledged = status.acknowledged.get(key);
            let sync = match (live, acknowledged) {
                (Some(live), Some(seen)) if live == seen => "in sync",
                (Some(_), _) => "behind",
                (None, Some(_)) => "gone",
                (None, None) => "-",
            };
            WorkspaceRow {
                agent: wss.spec.agent_id.clone(),
                namespace: namespace.to_string(),
                name: name.to_string(),
                resource_version: live.cloned(),
                acknowledged: acknowledged.cloned(),
                sync,
                termination: status.terminations.get(key).copied(),
                error: errors.get(key).cloned(),
            }
        })
        .collect()
}

/// `5s`, `3m`, `2h`, `4d`: an age as kubectl prints one.
pub fn age(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

pub fn status_table(statuses: &[AgentStatus], wide: bool) -> String {
    let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let interval = |v: Option<u64>| v.map_or("-".into(), |s| format!("{s}s"));
    let mut header = vec!["AGENT", "SYNCED", "REASON", "WORKSPACES", "ERRORS", "TERMINATING", "LAST FULL SYNC"];
    if wide {
        header.extend(["NEXT FULL SYNC", "PENDING ERRORS", "PARTIAL", "FULL", "PAUSED", "EPOCH", "MESSAGE"]);
    }
    let rows: Vec<Vec<String>> = statuses
        .iter()
        .map(|s| {
            let mut row = vec![
                s.agent.clone(),
                s.synced.clone(),
                s.reason.clone(),
                s.workspaces.to_string(),
                s.errors.to_string(),
                s.terminating.to_string(),
                or_dash(&s.last_full_sync),
            ];
            if wide {
                row.extend([
                    or_dash(&s.next_full_sync),
                    s.pending_errors.to_string(),
                    interval(s.partial_interval_seconds),
                    interval(s.full_interval_seconds),
                    s.paused.to_string(),
                    s.epoch.to_string(),
                    s.message.clone(),
                ]);
            }
            row
        })
        .collect();
    table(&header, &rows)
}

pub fn workspaces_table(rows: &[WorkspaceRow], wide: bool) -> String {
    let mut header = vec!["NAMESPACE", "NAME", "SYNC", "TERMINATION", "ERROR"];
    if wide {
        header.extend(["AGENT", "RESOURCE VERSION", "ACKNOWLEDGED"]);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|w| {
            let error = w.error.as_ref().map_or("-".into(), |e| format!("{} ago: {}", age(e.age_seconds), e.message));
            let termination = w.termination.map_or("-".into(), |t| format!("{t:?}"));
            let mut row = vec![w.namespace.clone(), w.name.clone(), w.sync.to_string(), termination, error];
            if wide {
                let or_dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
                row.extend([w.agent.clone(), or_dash(&w.resource_version), or_dash(&w.acknowledged)]);
            }
            row
        })
        .collect();
    table(&header, &cells)
}

pub fn errors_table(rows: &[ErrorRow], wide: bool) -> String {
    let mut header = vec!["WORKSPACE", "TYPE", "AGE", "MESSAGE"];
    if wide {
        header.extend(["AGENT", "VERSION", "FIRST SEEN", "ACKNOWLEDGED"]);
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|e| {
            let mut row = vec![e.workspace.clone(), e.error_type.clone(), age(e.age_seconds), e.message.clone()];
            if wide {
                row.extend([e.agent.clone(), e.version.clone(), e.first_seen.clone(), e.acknowledged.to_string()]);
            }
            row
        })
        .collect();
    table(&header, &cells)
}

#[cfg(test)]
mod tests;
