//! An answer past the agent's bounds (issue #37): what is tracked, and what is said.

use super::super::*;
use crate::agent::sync::answer::{Answer, MAX_INFOS_PER_ANSWER, decode};
use crate::agent::sync::ledger::MAX_TRACKED_TERMINATIONS;

/// One answer of 100,000 Terminated infos for workspaces that do not exist: read in linear
/// time up to its bound, at most MAX_TRACKED_TERMINATIONS tracked (the status stays writable),
/// no acknowledgement kept for a workspace never reported, and the excess said in a condition.
#[test]
fn an_answer_past_the_bounds_tracks_what_fits_and_says_what_waits() {
    let mut ledger = Ledger::restore(None);
    let plan = plan(UpdateType::Full, &[], &ledger, &HashSet::new());
    let infos: Vec<String> = (0..100_000)
        .map(|i| {
            format!(
                r#"{{"name":"ws","namespace":"gone-{i}","desired_state":"Terminated","actual_state":"Running","config_to_apply":"","deployment_resource_version":"{i}"}}"#
            )
        })
        .collect();
    let body = format!(r#"{{"workspace_rails_infos":[{}]}}"#, infos.join(","));
    let mut answer = decode(body.as_bytes()).expect("decodes");
    let settled = settle(&mut ledger, &plan, &mut answer, false, |_, _, _| false);
    assert_eq!(ledger.terminations().len(), MAX_TRACKED_TERMINATIONS);
    assert_eq!(settled.actions.len(), MAX_TRACKED_TERMINATIONS);
    assert!(ledger.acknowledged().is_empty());
    let said = settled.limited.expect("the excess is said");
    let waiting = MAX_INFOS_PER_ANSWER - MAX_TRACKED_TERMINATIONS;
    assert!(said.contains(&format!("{} infos past", 100_000 - MAX_INFOS_PER_ANSWER)), "{said}");
    assert!(said.contains(&format!("{waiting} terminations wait")), "{said}");
    let status = ledger.to_status(0, &[], jiff::Timestamp::now());
    let limited = status.conditions.iter().find(|c| c.type_ == crate::crd::CONDITION_ANSWER_LIMITED);
    assert!(limited.is_some_and(|c| c.message == said));
    let bytes = serde_json::to_vec(&status).expect("json").len();
    assert!(bytes < crate::agent::sync::status::STATUS_BUDGET_BYTES, "{bytes} bytes");

    let quiet = ReconcileResponse { workspace_rails_infos: vec![], settings: None };
    let settled = settle(&mut ledger, &plan, &mut Answer::from(quiet), false, |_, _, _| false);
    assert!(settled.limited.is_none() && ledger.fields.answer_limited.is_none(), "said while it holds only");
}
