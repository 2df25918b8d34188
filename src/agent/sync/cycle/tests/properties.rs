//! A model of the agent's sync state against the pure decision code: for any interleaving of
//! partial cycles, full cycles, acknowledgements, Deployment changes, restarts and apply
//! outcomes, the control plane shows an error after a cycle exactly while the latest apply's
//! outcome is a failure, with that failure's message (issue 35).
//!
//! The agent's side is the real `plan`, `settle`, `clean_after_answer`, error tracker and
//! ledger round trip through the status as last written; the glue `actions.rs` adds (a
//! recovery reported again, a failure retried, the status written at once on a new failure or
//! a recovery, and at each cycle's end) is played as it plays it. The control plane keeps what Rails
//! keeps: an error while reports carry one, cleared by a report without.

use super::*;
use crate::agent::error::ApplyError;
use crate::agent::sync::error_tracker::FollowUp;
use proptest::prelude::*;
use std::collections::BTreeSet;

const WORKSPACES: usize = 2;

#[derive(Debug, Clone)]
enum Step {
    /// `full`, or forced full after a restart. The control plane acknowledges what it is sent
    /// when `acknowledge`, returns every returned workspace's config when `with_config`.
    Cycle { full: bool, acknowledge: bool, with_config: bool },
    /// The control plane's desired config of a workspace changes.
    NewConfig(usize),
    /// Someone scales or annotates the workspace's Deployment.
    DeploymentChanged(usize),
    /// The workspace's apply in flight ends (nothing when none is).
    Finish(usize, Outcome),
    /// The retry loop tries the failing apply again (nothing when none is retrying).
    Retry(usize, Outcome),
    /// kill -9 and start: in-flight applies and retry loops are gone; the ledger comes back
    /// from the status.
    Restart,
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Applied,
    Failed(u8),
}

impl Outcome {
    fn result(self) -> Result<(), ApplyError> {
        match self {
            Outcome::Applied => Ok(()),
            Outcome::Failed(n) => Err(ApplyError::applier(format!("failure {n}"))),
        }
    }

    fn message(self) -> Option<String> {
        self.result().err().map(|e| e.message)
    }
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![Just(Outcome::Applied), (0u8..2).prop_map(Outcome::Failed)]
}

fn step() -> impl Strategy<Value = Step> {
    let ws = 0..WORKSPACES;
    prop_oneof![
        4 => (any::<bool>(), prop::bool::weighted(0.8), any::<bool>())
            .prop_map(|(full, acknowledge, with_config)| Step::Cycle { full, acknowledge, with_config }),
        1 => ws.clone().prop_map(Step::NewConfig),
        1 => ws.clone().prop_map(Step::DeploymentChanged),
        3 => (ws.clone(), outcome()).prop_map(|(w, o)| Step::Finish(w, o)),
        3 => (ws, outcome()).prop_map(|(w, o)| Step::Retry(w, o)),
        1 => Just(Step::Restart),
    ]
}

/// One workspace as the model sees it: the cluster, the agent's tasks, the truth, and what
/// the control plane holds.
#[derive(Debug, Default, Clone)]
struct Workspace {
    resource_version: u32,
    /// The config the control plane wants applied now.
    desired_config: u32,
    /// Its config was never returned since it changed.
    config_unsent: bool,
    /// The agent's apply task: in flight under a version, or retrying a failed config.
    in_flight: Option<(ApplyVersion, u32)>,
    retrying: Option<u32>,
    /// The latest finished apply's failure: what the control plane must show.
    truth: Option<String>,
    shown: Option<String>,
    /// The resourceVersion the control plane holds.
    held_version: Option<String>,
}

struct Model {
    ledger: Ledger,
    /// The status as last written: what a restart restores.
    persisted: crate::crd::WorkspaceSyncStatusStatus,
    dirty: BTreeSet<usize>,
    workspaces: Vec<Workspace>,
    must_be_full: bool,
}

fn key(w: usize) -> WorkspaceKey {
    WorkspaceKey::new(format!("ns-{w}"), "ws")
}

impl Model {
    fn new() -> Self {
        let workspaces = (0..WORKSPACES).map(|_| Workspace { config_unsent: true, ..Default::default() }).collect();
        let ledger = Ledger::restore(None);
        Self { ledger, persisted: Default::default(), dirty: (0..WORKSPACES).collect(), workspaces, must_be_full: true }
    }

    fn run(&mut self, step: &Step) {
        match *step {
            Step::Cycle { full, acknowledge, with_config } => self.cycle(full, acknowledge, with_config),
            Step::NewConfig(w) => {
                self.workspaces[w].desired_config += 1;
                self.workspaces[w].config_unsent = true;
            }
            Step::DeploymentChanged(w) => {
                self.workspaces[w].resource_version += 1;
                self.dirty.insert(w);
            }
            Step::Finish(w, outcome) => {
                let Some((version, config)) = self.workspaces[w].in_flight.take() else { return };
                let recorded =
                    self.ledger.errors_mut().record(&key(w), version, outcome.result(), Timestamp::UNIX_EPOCH);
                assert_ne!(recorded, Recorded::Stale, "{version} was the newest apply");
                self.persist_as_actions_do(recorded);
                self.workspaces[w].truth = outcome.message();
                match outcome {
                    Outcome::Applied => self.report_again(w, recorded),
                    Outcome::Failed(_) => self.workspaces[w].retrying = Some(config),
                }
            }
            Step::Retry(w, outcome) => {
                let Some(config) = self.workspaces[w].retrying else { return };
                let retried = self.ledger.errors().retryable(&key(w));
                let retried = retried.expect("a failing apply with nothing newer in flight is retryable");
                let recorded =
                    self.ledger.errors_mut().record_retry(&key(w), retried, outcome.result(), Timestamp::UNIX_EPOCH);
                assert_ne!(recorded, Recorded::Stale, "the retry of the failure that holds");
                self.persist_as_actions_do(recorded);
                self.workspaces[w].truth = outcome.message();
                if matches!(outcome, Outcome::Applied) {
                    self.workspaces[w].retrying = None;
                    self.report_again(w, recorded);
                } else {
                    self.workspaces[w].retrying = Some(config);
                }
            }
            Step::Restart => {
                self.ledger = Ledger::restore(Some(&self.persisted));
                for workspace in &mut self.workspaces {
                    workspace.in_flight = None;
                    workspace.retrying = None;
                }
                self.must_be_full = true;
            }
        }
    }

    /// `actions::follow_up` writes the status at once for a new failure and a recovery; every
    /// cycle writes it at its end.
    fn persist_as_actions_do(&mut self, recorded: Recorded) {
        if matches!(recorded.follow_up(), FollowUp::PersistAndWarn | FollowUp::PersistAndReportAgain) {
            self.persist();
        }
    }

    fn persist(&mut self) {
        self.persisted = self.ledger.to_status(WORKSPACES, &[], Timestamp::UNIX_EPOCH);
    }

    /// `actions::report_again`: a recovery makes the control plane hear of the workspace.
    fn report_again(&mut self, w: usize, recorded: Recorded) {
        if recorded.follow_up() == FollowUp::PersistAndReportAgain {
            self.ledger.report_again(&key(w));
            self.dirty.insert(w);
        }
    }

    fn deployment(&self, w: usize) -> Arc<DeploymentProjection> {
        super::deployment(key(w).namespace(), "ws", &self.workspaces[w].resource_version.to_string())
    }

    fn cycle(&mut self, full: bool, acknowledge: bool, with_config: bool) {
        let full = full || std::mem::take(&mut self.must_be_full);
        let update_type = if full { UpdateType::Full } else { UpdateType::Partial };
        if full {
            self.ledger.reset_for_full();
            self.dirty = (0..WORKSPACES).collect();
        }
        let dirty: Vec<_> = self.dirty.iter().map(|&w| self.deployment(w)).collect();
        let plan = plan(update_type, &dirty, &self.ledger, &HashSet::new());
        let response = self.control_plane(&plan, full, acknowledge, with_config);
        let workspaces = self.workspaces.clone();
        let carries = |k: &WorkspaceKey, config: &str, _: &[ImagePullSecret]| {
            let Some(w) = (0..WORKSPACES).find(|&w| key(w) == *k) else { return false };
            let running = workspaces[w].in_flight.map(|(_, c)| c).or(workspaces[w].retrying);
            running.is_some_and(|c| c.to_string() == config)
        };
        let settled = settle(&mut self.ledger, &plan, &mut Answer::from(response), false, carries);
        let clean: Vec<(WorkspaceKey, String)> =
            clean_after_answer(&settled, &plan, &self.ledger).map(|(k, rv)| (k.clone(), rv.to_string())).collect();
        for (k, rv) in clean {
            let w = (0..WORKSPACES).find(|&w| key(w) == k).expect("a modelled workspace");
            if self.workspaces[w].resource_version.to_string() == rv {
                self.dirty.remove(&w);
            }
        }
        for action in settled.actions {
            let WorkspaceAction::Apply { key: k, config, version, .. } = action else { continue };
            let w = (0..WORKSPACES).find(|&w| key(w) == k).expect("a modelled workspace");
            let config: u32 = config.parse().expect("a modelled config");
            // The newer intent aborts the older apply or its retries (`Intents`).
            self.workspaces[w].in_flight = Some((version, config));
            self.workspaces[w].retrying = None;
        }
        self.persist();
        for (w, workspace) in self.workspaces.iter().enumerate() {
            assert_eq!(workspace.shown, workspace.truth, "workspace {w} after a {update_type:?} cycle");
        }
    }

    /// Rails' part: persist each report (an error while reported, cleared by a report
    /// without), return what it would, acknowledge what it was sent.
    fn control_plane(
        &mut self,
        plan: &CyclePlan,
        full: bool,
        acknowledge: bool,
        with_config: bool,
    ) -> ReconcileResponse {
        let mut infos = Vec::new();
        for (w, workspace) in self.workspaces.iter_mut().enumerate() {
            let reported = plan.request.workspace_agent_infos.iter().find(|i| i.namespace == key(w).namespace());
            if let Some(info) = reported {
                workspace.shown = info.error_details.as_ref().map(|e| e.error_message.clone());
                if let Some(rv) = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.resource_version()) {
                    workspace.held_version = Some(rv);
                }
            }
            let returned = full || reported.is_some() || workspace.config_unsent;
            if !returned || (reported.is_some() && !acknowledge) {
                continue;
            }
            let send_config = full || with_config || workspace.config_unsent;
            workspace.config_unsent &= !send_config;
            infos.push(WorkspaceRailsInfo {
                name: "ws".into(),
                namespace: key(w).namespace().into(),
                desired_state: DesiredState::Running,
                actual_state: if workspace.shown.is_some() { ActualState::Error } else { ActualState::Running },
                deployment_resource_version: workspace.held_version.clone(),
                config_to_apply: if send_config { workspace.desired_config.to_string() } else { String::new() },
                image_pull_secrets: vec![],
            });
        }
        ReconcileResponse { workspace_rails_infos: infos, settings: None }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_control_plane_shows_an_error_exactly_while_the_latest_apply_failed(
        steps in prop::collection::vec(step(), 1..60)
    ) {
        let mut model = Model::new();
        for step in &steps {
            model.run(step);
        }
    }
}
