//! One sync cycle's decisions, free of I/O (DESIGN §2, "One cycle").
//!
//! `plan` decides what to send; `settle` turns the control plane's answer into ledger updates
//! and the work to do in the cluster.

use super::answer::{Answer, MAX_INFOS_PER_ANSWER};
use super::deployment_failure::WorkloadFailure;
use super::error_tracker::{ApplyVersion, Recorded};
use super::ledger::{Ledger, MAX_TRACKED_TERMINATIONS};
use super::pod_failures::PodFailures;
use super::workspace::{DeploymentProjection, WorkspaceKey};
use crate::protocol::{
    ActualState, DesiredState, ImagePullSecret, ReconcileRequest, ReconcileResponse, TerminationProgress, UpdateType,
    WorkspaceAgentInfo,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// What a cycle sends, and what it must remember to settle the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CyclePlan {
    pub request: ReconcileRequest,
    /// The error versions sent, so that only those are cleared on acknowledgement.
    pub sent_errors: Vec<(WorkspaceKey, ApplyVersion)>,
    /// Dirty entries the control plane already holds at their version (after a watch re-list,
    /// say): nothing to send, only to mark clean.
    pub already_acknowledged: Vec<Arc<DeploymentProjection>>,
    /// Workspaces reported again after a recovery (`Ledger::report_again`).
    pub reported_again: Vec<WorkspaceKey>,
}

/// Dirty entries to report whose info the index dropped once the control plane held their
/// version (it must hear of them again since): to read again before planning.
pub fn to_reread(dirty: &[Arc<DeploymentProjection>], ledger: &Ledger) -> Vec<WorkspaceKey> {
    dirty
        .iter()
        .filter(|d| d.info().is_none() && !ledger.holds(d.key(), d.resource_version()))
        .map(|d| d.key().clone())
        .collect()
}

/// Observe what each dirty workspace's Deployment and Pods say of its workload, before the
/// plan reads the pending errors: the workspaces whose failure began or ended, and what that
/// was. A Pod's change or an ended grace marks its workspace dirty.
pub fn observe_workloads(
    dirty: &[Arc<DeploymentProjection>],
    pods: &PodFailures,
    ledger: &mut Ledger,
    now: jiff::Timestamp,
) -> Vec<(WorkspaceKey, Recorded, Option<WorkloadFailure>)> {
    let counting = pods.counting(now);
    let mut changed = Vec::new();
    for deployment in dirty {
        // Before the Pod watch has listed, no failure seen is no news: a failure restored from
        // the status stays until the Pods say otherwise.
        if !pods.listed() && deployment.failure().is_none() {
            continue;
        }
        let failure = deployment.failure().or_else(|| counting.get(deployment.key()).copied());
        let seen = failure.map(|f| (f.reason, &*f.message));
        let recorded = ledger.errors_mut().observe_workload(deployment.key(), seen, now);
        if matches!(recorded, Recorded::Failed | Recorded::Recovered) {
            changed.push((deployment.key().clone(), recorded, failure.cloned()));
        }
    }
    changed
}

/// Build the infos: every changed Deployment the control plane has not acknowledged, every
/// tracked termination, and every pending error. One info per workspace.
pub fn plan(
    update_type: UpdateType,
    dirty: &[Arc<DeploymentProjection>],
    ledger: &Ledger,
    namespace_gone: &HashSet<WorkspaceKey>,
) -> CyclePlan {
    let mut infos: BTreeMap<WorkspaceKey, WorkspaceAgentInfo> = BTreeMap::new();
    fn entry<'a>(
        infos: &'a mut BTreeMap<WorkspaceKey, WorkspaceAgentInfo>,
        key: &WorkspaceKey,
    ) -> &'a mut WorkspaceAgentInfo {
        infos.entry(key.clone()).or_insert_with(|| WorkspaceAgentInfo {
            name: key.name().to_string(),
            namespace: key.namespace().to_string(),
            ..Default::default()
        })
    }
    let (mut already_acknowledged, mut reported_again) = (Vec::new(), Vec::new());
    for deployment in dirty {
        let key = deployment.key();
        if ledger.holds(key, deployment.resource_version()) {
            already_acknowledged.push(deployment.clone());
        } else if let Some(info) = deployment.info() {
            entry(&mut infos, key).latest_k8s_deployment_info = Some(info.clone());
            if ledger.must_report_again(key) {
                reported_again.push(key.clone());
            }
        }
        // Without its info (a re-read that failed) it stays dirty and is read next cycle.
    }
    for key in ledger.terminations().keys() {
        let progress = if namespace_gone.contains(key) {
            TerminationProgress::Terminated
        } else {
            TerminationProgress::Terminating
        };
        entry(&mut infos, key).termination_progress = Some(progress);
    }
    let mut sent_errors = Vec::new();
    for (key, held) in ledger.errors().pending() {
        entry(&mut infos, key).error_details = Some(held.failure.details());
        sent_errors.push((key.clone(), held.version));
    }
    // A failure that still holds, acknowledged or not, an apply's or the workload's, goes
    // with every report of its workspace, partial or full, so that a report without
    // error_details never clears it on the control plane. A terminating workspace's Pods and
    // config are going anyway.
    let unexplained = |info: &WorkspaceAgentInfo| info.error_details.is_none() && info.termination_progress.is_none();
    for (key, info) in infos.iter_mut().filter(|(_, info)| unexplained(info)) {
        if let Some(held) = ledger.errors().holding(key) {
            info.error_details = Some(held.failure.details());
        }
    }
    CyclePlan {
        request: ReconcileRequest { update_type, workspace_agent_infos: infos.into_values().collect() },
        sent_errors,
        already_acknowledged,
        reported_again,
    }
}

/// Work for the cluster, decided from one returned info.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkspaceAction {
    Apply {
        key: WorkspaceKey,
        config: String,
        image_pull_secrets: Vec<ImagePullSecret>,
        version: ApplyVersion,
    },
    Terminate {
        key: WorkspaceKey,
    },
    /// An info the agent refused to act on: recorded as the workspace's error, nothing sent.
    Refuse {
        key: WorkspaceKey,
        reason: String,
        version: ApplyVersion,
    },
}

impl WorkspaceAction {
    pub fn key(&self) -> &WorkspaceKey {
        match self {
            WorkspaceAction::Apply { key, .. }
            | WorkspaceAction::Terminate { key }
            | WorkspaceAction::Refuse { key, .. } => key,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settled {
    pub actions: Vec<WorkspaceAction>,
    /// (workspace, acknowledged resourceVersion)
    pub acknowledged: Vec<(WorkspaceKey, String)>,
    pub forgotten: Vec<WorkspaceKey>,
    /// Settings that failed validation, with the reason; the last good ones stay.
    pub rejected_settings: Option<String>,
    /// What the answer held past the agent's bounds, which waits for a later answer.
    pub limited: Option<String>,
}

/// Apply the control plane's answer to the ledger, and decide the work it asks for.
/// A paused agent records acknowledgements but applies and deletes nothing. The configs move
/// out of the answer into the actions (at 10,000 workspaces, 25 MB not held twice). A config
/// the workspace's apply in flight (or retrying) already carries (`in_flight`) starts nothing:
/// it is no newer intent.
pub fn settle(
    ledger: &mut Ledger,
    plan: &CyclePlan,
    answer: &mut Answer,
    paused: bool,
    in_flight: impl Fn(&WorkspaceKey, &str, &[ImagePullSecret]) -> bool,
) -> Settled {
    let mut settled = Settled::default();
    for key in &plan.reported_again {
        ledger.reported_again(key);
    }
    for refused in std::mem::take(&mut answer.refused) {
        let version = ledger.errors_mut().begin(&refused.key);
        settled.actions.push(WorkspaceAction::Refuse { key: refused.key, reason: refused.reason, version });
    }
    if let Some(reason) = answer.unreadable_settings.take() {
        ledger.fields.rejected_settings = Some(reason.clone());
        settled.rejected_settings = Some(reason);
    }
    let response = &mut answer.response;
    if let Some(settings) = response.settings {
        match settings.validate() {
            Ok(()) => {
                ledger.fields.settings = settings;
                ledger.fields.rejected_settings = None;
            }
            Err(reason) => {
                ledger.fields.rejected_settings = Some(reason.clone());
                settled.rejected_settings = Some(reason);
            }
        }
    }
    let sent_errors: HashMap<&WorkspaceKey, ApplyVersion> = plan.sent_errors.iter().map(|(k, v)| (k, *v)).collect();
    let mut deferred_terminations = 0usize;
    let reported: HashSet<WorkspaceKey> =
        plan.request.workspace_agent_infos.iter().map(|i| WorkspaceKey::new(&i.namespace, &i.name)).collect();
    for info in &mut response.workspace_rails_infos {
        let key = WorkspaceKey::new(&info.namespace, &info.name);
        // Only for a workspace the agent reported or already tracks: an answer cannot grow the
        // status with acknowledgements of workspaces it made up.
        let ours = reported.contains(&key) || ledger.acknowledged().contains_key(&key);
        if let Some(rv) = info.deployment_resource_version.as_ref().filter(|_| ours) {
            ledger.acknowledged_mut().insert(key.clone(), rv.clone());
            settled.acknowledged.push((key.clone(), rv.clone()));
        }
        if let Some(version) = sent_errors.get(&key) {
            ledger.errors_mut().acknowledge(&key, *version);
        }
        if info.desired_state == DesiredState::Terminated {
            if info.actual_state == ActualState::Terminated {
                ledger.forget(&key);
                settled.forgotten.push(key);
            } else if !ledger.terminations().contains_key(&key)
                && ledger.terminations().len() >= MAX_TRACKED_TERMINATIONS
            {
                deferred_terminations += 1;
            } else {
                ledger.terminations_mut().entry(key.clone()).or_insert(TerminationProgress::Terminating);
                if !paused {
                    settled.actions.push(WorkspaceAction::Terminate { key });
                }
            }
        } else if !info.config_to_apply.is_empty()
            && !paused
            && !in_flight(&key, &info.config_to_apply, &info.image_pull_secrets)
        {
            let version = ledger.errors_mut().begin(&key);
            settled.actions.push(WorkspaceAction::Apply {
                key,
                config: std::mem::take(&mut info.config_to_apply),
                image_pull_secrets: std::mem::take(&mut info.image_pull_secrets),
                version,
            });
        }
    }
    let limited = limits_reached(answer.unread_infos, deferred_terminations);
    ledger.fields.answer_limited.clone_from(&limited);
    settled.limited = limited;
    settled
}

/// What an answer held past the agent's bounds, said where a user looks; None within them.
fn limits_reached(unread_infos: usize, deferred_terminations: usize) -> Option<String> {
    let mut said = Vec::new();
    if unread_infos > 0 {
        said.push(format!(
            "the control plane's answer held {unread_infos} infos past the {MAX_INFOS_PER_ANSWER} the agent reads \
             from one answer; they wait for a later answer"
        ));
    }
    if deferred_terminations > 0 {
        said.push(format!(
            "{deferred_terminations} terminations wait: the agent tracks at most {MAX_TRACKED_TERMINATIONS} at once, \
             and starts them as others finish"
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// After a full cycle: drop ledger entries for workspaces that neither the cluster nor the
/// control plane still knows, so that the ledger never leaks.
pub fn prune_unknown(ledger: &mut Ledger, in_cluster: impl Fn(&WorkspaceKey) -> bool, response: &ReconcileResponse) {
    let returned: HashSet<WorkspaceKey> =
        response.workspace_rails_infos.iter().map(|i| WorkspaceKey::new(&i.namespace, &i.name)).collect();
    ledger.retain(|key| in_cluster(key) || returned.contains(key));
}

/// The index entries to mark clean after an answer: those acknowledged now, and those the
/// control plane already held, but only where the ledger still holds that version (an apply
/// that recovered meanwhile keeps its entry dirty). Checked under the ledger's lock.
pub fn clean_after_answer<'a>(
    settled: &'a Settled,
    plan: &'a CyclePlan,
    ledger: &'a Ledger,
) -> impl Iterator<Item = (&'a WorkspaceKey, &'a str)> {
    let acknowledged = settled.acknowledged.iter().map(|(key, rv)| (key, rv.as_str()));
    let already = plan.already_acknowledged.iter().map(|d| (d.key(), d.resource_version()));
    acknowledged.chain(already).filter(|(key, rv)| ledger.holds(key, rv))
}

/// Every full cycle, and every cycle that starts many applies, hands its memory back after.
pub fn releases_memory(update_type: UpdateType, actions: usize) -> bool {
    update_type == UpdateType::Full || actions >= crate::allocator::RELEASE_AFTER_ACTIONS
}

#[cfg(test)]
mod tests;
