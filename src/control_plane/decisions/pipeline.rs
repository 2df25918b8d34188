//! One reconcile request, as Rails handles it (DESIGN §3): validate → persist actual state and
//! acknowledged versions → lifecycle rules → find workspaces to return → build the response →
//! stamp `responded_to_agent_at` and clear `force_include_all_resources`. Pure: the store runs
//! it inside one transaction (store/), so an acknowledgement reaches the agent only after its
//! commit.

use super::config_builder::{self, WorkspaceSpec};
use super::rules::{self, Lifecycle, Selection};
use crate::control_plane::model::{Agent, ErrorRecord, Orphan, Workspace, WorkspaceError};
use crate::names::{is_dns_subdomain, is_namespace_name};
use crate::protocol::{
    ActualState, DesiredState, ReconcileRequest, ReconcileResponse, Settings, WorkspaceAgentInfo, WorkspaceRailsInfo,
};
use std::collections::{BTreeSet, HashMap, HashSet};

#[derive(Debug, Clone)]
pub struct PipelineConfig {
    pub settings: Settings,
    pub lifecycle: Lifecycle,
    pub label_key: String,
}

/// Reject what Rails' validation would: every info names its workspace and namespace. Both
/// must be what Kubernetes names a Deployment and a namespace: they come from the cluster, so
/// an agent that sends anything else is broken or hostile, and an orphan's name ends up in the
/// page's links and in adopted rows. The names are not echoed: they are the agent's to choose.
pub fn validate(request: &ReconcileRequest) -> Result<(), String> {
    for (index, info) in request.workspace_agent_infos.iter().enumerate() {
        if info.name.is_empty() {
            return Err(format!("workspace_agent_infos[{index}]: name is required"));
        }
        if info.namespace.is_empty() {
            return Err(format!("workspace_agent_infos[{index}]: namespace is required"));
        }
        if !is_dns_subdomain(&info.name) {
            return Err(format!("workspace_agent_infos[{index}]: name is not a Kubernetes object name"));
        }
        if !is_namespace_name(&info.namespace) {
            return Err(format!("workspace_agent_infos[{index}]: namespace is not a Kubernetes namespace name"));
        }
    }
    Ok(())
}

/// What one report changes on a workspace row.
/// Returns the error it reported, when that is a new one.
fn apply_report(workspace: &mut Workspace, info: &WorkspaceAgentInfo, now: i64) -> Option<ErrorRecord> {
    let deployment = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.facts());
    let actual = rules::reported_state(info, deployment.as_ref());
    if actual != workspace.actual_state {
        workspace.actual_state = actual;
        workspace.actual_state_updated_at = now;
    }
    if let Some(rv) = deployment.and_then(|d| d.metadata?.resource_version) {
        workspace.deployment_resource_version = Some(rv);
    }
    workspace.last_reported_at = Some(now);
    match &info.error_details {
        Some(details) => {
            let error_type = details.error_type.as_str().to_string();
            // An agent's message is kept at the agent's own cap, whatever it sends.
            let message = crate::protocol::cap_message(&details.error_message);
            let same = workspace.error.as_ref().is_some_and(|e| e.error_type == error_type && e.message == message);
            let first_seen = if same { workspace.error.as_ref().map_or(now, |e| e.first_seen) } else { now };
            let record = (!same).then(|| ErrorRecord {
                name: workspace.name.clone(),
                error_type: error_type.clone(),
                message: message.clone(),
                first_seen,
            });
            workspace.error = Some(WorkspaceError {
                error_type,
                message,
                first_seen,
                last_seen: now,
                desired_state: workspace.desired_state,
            });
            record
        }
        // Reported without an error: the apply that failed has since succeeded.
        None => {
            workspace.error = None;
            None
        }
    }
}

/// What one reconcile decided: the answer, and the workspaces whose rows must be saved.
pub struct Decision {
    pub response: ReconcileResponse,
    /// Indices into the workspaces handed to [`decide`], ascending.
    pub touched: Vec<usize>,
    /// Reported workspaces this control plane does not know, to record (first and last seen
    /// are both `now`; the store keeps the first).
    pub orphans: Vec<Orphan>,
    /// Errors reported for the first time, for the workspaces' histories.
    pub new_errors: Vec<ErrorRecord>,
}

/// The whole reconcile over an agent's workspaces as loaded, without I/O: persist the reports,
/// apply the lifecycle rules, select what to return and build its config. `workspaces` is
/// updated in place; the caller saves the touched ones in the transaction it loaded them in.
pub fn decide(
    workspaces: &mut [Workspace],
    agent: &Agent,
    request: &ReconcileRequest,
    config: &PipelineConfig,
    now: i64,
) -> Result<Decision, String> {
    let index: HashMap<(String, String), usize> =
        workspaces.iter().enumerate().map(|(i, w)| ((w.namespace.clone(), w.name.clone()), i)).collect();
    let mut reported = HashSet::new();
    let mut touched = BTreeSet::new();
    let mut orphans = Vec::new();
    let mut new_errors = Vec::new();
    let mut infos = Vec::new();
    for info in &request.workspace_agent_infos {
        // A workspace this control plane does not know is an orphan: recorded for the operator,
        // and its version acknowledged so that the agent stops sending it. Never any config.
        let Some(&i) = index.get(&(info.namespace.clone(), info.name.clone())) else {
            if info.termination_progress.is_none() {
                let deployment = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.facts());
                let rv = deployment.as_ref().and_then(|d| d.metadata.as_ref()?.resource_version.clone());
                infos.push(WorkspaceRailsInfo {
                    name: info.name.clone(),
                    namespace: info.namespace.clone(),
                    desired_state: DesiredState::Running,
                    actual_state: ActualState::Unknown,
                    deployment_resource_version: rv.clone(),
                    config_to_apply: String::new(),
                    image_pull_secrets: Vec::new(),
                });
                orphans.push(Orphan {
                    namespace: info.namespace.clone(),
                    name: info.name.clone(),
                    deployment_resource_version: rv,
                    actual_state: rules::reported_state(info, deployment.as_ref()),
                    first_seen: now,
                    last_seen: now,
                });
            }
            continue;
        };
        new_errors.extend(apply_report(&mut workspaces[i], info, now));
        reported.insert(i);
        touched.insert(i);
    }
    apply_lifecycle(workspaces, agent, config, now, &mut touched);

    for (i, workspace) in workspaces.iter_mut().enumerate() {
        let selection = Selection {
            desired: workspace.desired_state,
            actual: workspace.actual_state,
            desired_updated_at: workspace.desired_state_updated_at,
            actual_updated_at: workspace.actual_state_updated_at,
            responded_to_agent_at: workspace.responded_to_agent_at,
            force_include_all_resources: workspace.force_include_all_resources,
        };
        if !selection.returned(request.update_type, reported.contains(&i)) {
            continue;
        }
        let config_to_apply = if selection.include_config(request.update_type) {
            config_builder::build(
                &WorkspaceSpec {
                    workspace,
                    label_key: &config.label_key,
                    image_pull_secrets: &agent.image_pull_secrets,
                },
                workspace.desired_state,
                selection.resources(request.update_type),
            )
            .map_err(|e| format!("building the config of {}: {e}", workspace.name))?
        } else {
            String::new()
        };
        infos.push(WorkspaceRailsInfo {
            name: workspace.name.clone(),
            namespace: workspace.namespace.clone(),
            desired_state: workspace.desired_state,
            actual_state: workspace.actual_state,
            deployment_resource_version: workspace.deployment_resource_version.clone(),
            config_to_apply,
            image_pull_secrets: agent.image_pull_secrets.clone(),
        });
        workspace.responded_to_agent_at = Some(now);
        workspace.force_include_all_resources = false;
        touched.insert(i);
    }
    Ok(Decision {
        response: ReconcileResponse { workspace_rails_infos: infos, settings: Some(config.settings) },
        touched: touched.into_iter().collect(),
        orphans,
        new_errors,
    })
}

/// The lifecycle rules, with terminations bounded by [`Lifecycle::termination_budget`]: the
/// longest-stopped go first, the rest wait for a later reconcile, and the wait is logged.
fn apply_lifecycle(
    workspaces: &mut [Workspace],
    agent: &Agent,
    config: &PipelineConfig,
    now: i64,
    touched: &mut BTreeSet<usize>,
) {
    let mut changes: Vec<(usize, DesiredState)> = workspaces
        .iter()
        .enumerate()
        .filter_map(|(i, w)| {
            rules::next_desired(w.desired_state, w.actual_state, w.desired_state_updated_at, now, &config.lifecycle)
                .map(|desired| (i, desired))
        })
        .collect();
    changes.sort_by_key(|&(i, _)| workspaces[i].desired_state_updated_at);
    let budget = config.lifecycle.termination_budget(workspaces.len());
    let mut terminations = 0usize;
    let mut deferred = 0usize;
    for (i, desired) in changes {
        if desired == DesiredState::Terminated {
            if terminations >= budget {
                deferred += 1;
                continue;
            }
            terminations += 1;
        }
        let workspace = &mut workspaces[i];
        tracing::info!(agent = %agent.id, workspace = %workspace.name, from = ?workspace.desired_state, to = ?desired, "desired state changed by the lifecycle rules");
        workspace.desired_state = desired;
        workspace.desired_state_updated_at = now;
        touched.insert(i);
    }
    if deferred > 0 {
        tracing::warn!(agent = %agent.id, terminated = terminations, waiting = deferred, budget,
            "the lifecycle rules would terminate more workspaces than one reconcile may; the rest wait \
             (a clock that jumped ahead? see --lifecycle-max-terminated-percent)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::UpdateType;

    fn report(name: &str, namespace: &str) -> ReconcileRequest {
        let info = WorkspaceAgentInfo { name: name.into(), namespace: namespace.into(), ..Default::default() };
        ReconcileRequest { update_type: UpdateType::Full, workspace_agent_infos: vec![info] }
    }

    #[test]
    fn a_report_names_what_kubernetes_would_name() {
        assert!(validate(&report("ws-1", "wsync-a1-ws-1")).is_ok());
        assert!(validate(&report("web.v2", "team-a")).is_ok(), "a Deployment's name may hold dots");
        for (name, namespace) in [
            ("", "ns"),
            ("ws", ""),
            ("ws", "../../b/workspaces/prod/terminate?"),
            ("a/b", "ns"),
            ("..", "ns"),
            ("ws", "team.a"),
            ("WS", "ns"),
            ("ws\u{1b}[2J", "ns"),
            ("ws", &"n".repeat(64)),
            (&"w".repeat(254), "ns"),
        ] {
            let refused = validate(&report(name, namespace)).expect_err(name);
            assert!(refused.starts_with("workspace_agent_infos[0]: "), "{refused}");
            assert!(refused.ends_with(" is required") || refused.ends_with(" name"), "nothing echoed: {refused}");
        }
    }
}
