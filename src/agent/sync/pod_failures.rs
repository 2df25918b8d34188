//! Why a workspace's Pods are failing (issue #21): the kubelet's back-off states, a
//! container's config, the scheduler. The Pod watch keeps only the failing Pods, by name.

use super::deployment_failure::WorkloadFailure;
use super::workspace::WorkspaceKey;
use crate::protocol::failure_reason::FailureReason;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::PodStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use std::collections::{BTreeMap, HashMap};

/// A failing Pod of a workspace, as the Pod watch keeps it: healthy Pods are not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFailure {
    pub workspace: WorkspaceKey,
    pub failure: WorkloadFailure,
    /// It counts from then on (an unschedulable Pod's grace; an autoscaler may add a node).
    pub counts_from: Option<Timestamp>,
}

/// The workspace Deployment a Pod belongs to: its ReplicaSet's name without the Pod's
/// `pod-template-hash`, which is how the deployment controller names ReplicaSets.
pub fn owning_deployment(owners: &[OwnerReference], labels: &BTreeMap<String, String>) -> Option<String> {
    let replica_set = owners.iter().find(|o| o.kind == "ReplicaSet" && o.controller == Some(true))?;
    let hash = labels.get("pod-template-hash")?;
    replica_set.name.strip_suffix(hash.as_str())?.strip_suffix('-').map(str::to_string)
}

/// What a Pod's status says is failing. The kubelet's back-off states count at once (a first
/// ErrImagePull or a first crash do not); an unschedulable Pod counts after `grace`.
pub fn from_pod(workspace: WorkspaceKey, status: &PodStatus, grace: SignedDuration) -> Option<PodFailure> {
    let failure = |failure, counts_from| Some(PodFailure { workspace: workspace.clone(), failure, counts_from });
    let containers = status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten());
    for container in containers {
        let Some(waiting) = container.state.as_ref().and_then(|s| s.waiting.as_ref()) else { continue };
        let said = waiting.message.as_deref().unwrap_or("no message");
        let name = &container.name;
        match waiting.reason.as_deref().unwrap_or_default() {
            "ImagePullBackOff" => {
                let detail = format!("image {:?} could not be pulled: {said}", container.image);
                return failure(WorkloadFailure::new(FailureReason::ImagePull, &detail), None);
            }
            "CrashLoopBackOff" => {
                let last = container.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                let exit = last.map_or("exited".to_string(), |t| {
                    format!("{} (exit {})", t.reason.as_deref().unwrap_or("exited"), t.exit_code)
                });
                let restarts = match container.restart_count {
                    1 => "once".to_string(),
                    n => format!("{n} times"),
                };
                let mut detail = format!("container {name:?} {exit}, restarted {restarts}");
                // What it said as it ended: a cloner's Git error, a postStart command's output.
                if let Some(said) = last.and_then(|t| t.message.as_deref()).map(str::trim).filter(|m| !m.is_empty()) {
                    detail = format!("{detail}: {}", tail(said, MAX_SAID_BYTES));
                }
                return failure(WorkloadFailure::new(FailureReason::CrashLoop, &detail), None);
            }
            reason if reason.starts_with("PostStartHookError") => {
                // The kubelet's reason holds the hook's error output after the exit status.
                let output = reason.split_once(": ").map_or(said, |(_, rest)| rest);
                let output = output.find("exited with ").map_or(output, |at| &output[at..]);
                let detail = format!("container {name:?}'s postStart hook {}", tail(output.trim(), MAX_SAID_BYTES));
                return failure(WorkloadFailure::new(FailureReason::PostStartHook, &detail), None);
            }
            "CreateContainerConfigError" | "CreateContainerError" => {
                let detail = format!("container {name:?} could not be created: {said}");
                return failure(WorkloadFailure::new(FailureReason::ContainerConfig, &detail), None);
            }
            _ => {}
        }
    }
    let unscheduled =
        status.conditions.iter().flatten().find(|c| {
            c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
        })?;
    let since = unscheduled.last_transition_time.as_ref().map_or(Timestamp::UNIX_EPOCH, |t| t.0);
    let detail = format!("no node takes the Pod: {}", unscheduled.message.as_deref().unwrap_or("no message"));
    failure(WorkloadFailure::new(FailureReason::Unschedulable, &detail), since.checked_add(grace).ok())
}

/// How much of what a container said the report keeps: its end, where the cause is.
const MAX_SAID_BYTES: usize = 360;

/// The last `max` bytes of `text` (on a character boundary), marked when cut.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start = start.saturating_add(1);
    }
    format!("…{}", &text[start..])
}

/// The failing Pods of this agent's workspaces, by `namespace/pod`.
#[derive(Debug, Default)]
pub struct PodFailures {
    by_pod: HashMap<Box<str>, PodFailure>,
    /// Whether the watch has listed once: until then no Pod's absence means anything.
    listed: bool,
}

impl PodFailures {
    /// A Pod's state: failing, or not (then it is dropped). Returns the workspace whose
    /// failure may have changed.
    pub fn set(&mut self, pod: Box<str>, failure: Option<PodFailure>) -> Option<WorkspaceKey> {
        match failure {
            Some(failure) => {
                let workspace = failure.workspace.clone();
                let changed = self.by_pod.insert(pod, failure.clone()).is_none_or(|old| old != failure);
                changed.then_some(workspace)
            }
            None => self.by_pod.remove(&pod).map(|old| old.workspace),
        }
    }

    /// Whether the Pods are known: the watch has listed them at least once.
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// A relist: the failing Pods now. Returns the workspaces whose failure may have changed.
    pub fn replace(&mut self, failing: Vec<(Box<str>, PodFailure)>) -> Vec<WorkspaceKey> {
        self.listed = true;
        let old = std::mem::take(&mut self.by_pod);
        let mut changed: Vec<WorkspaceKey> = old.values().map(|f| f.workspace.clone()).collect();
        for (pod, failure) in failing {
            if old.get(&pod) != Some(&failure) {
                changed.push(failure.workspace.clone());
            }
            self.by_pod.insert(pod, failure);
        }
        changed.sort();
        changed.dedup();
        changed
    }

    /// The failure that counts now for each workspace with one: the first of its failing
    /// Pods, by name. One pass, so that a cycle looks each dirty workspace up in it.
    pub fn counting(&self, now: Timestamp) -> HashMap<&WorkspaceKey, &WorkloadFailure> {
        let mut first: HashMap<&WorkspaceKey, (&str, &WorkloadFailure)> = HashMap::new();
        for (pod, failure) in self.by_pod.iter().filter(|(_, f)| f.counts_from.is_none_or(|from| from <= now)) {
            let entry = first.entry(&failure.workspace).or_insert((pod, &failure.failure));
            if **pod < *entry.0 {
                *entry = (pod, &failure.failure);
            }
        }
        first.into_iter().map(|(workspace, (_, failure))| (workspace, failure)).collect()
    }

    /// Workspaces with a failure that began to count in (`since`, `now`]: a grace just ended.
    pub fn counting_since(&self, since: Timestamp, now: Timestamp) -> Vec<WorkspaceKey> {
        self.by_pod
            .values()
            .filter(|f| f.counts_from.is_some_and(|from| since < from && from <= now))
            .map(|f| f.workspace.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests;
