//! The WorkspaceSyncStatus's status, rendered from the ledger (DESIGN §2): conditions, the
//! per-workspace maps within the size budget, and the fields of [`StatusFields`]. Whatever the
//! status shows is either in the ledger's per-workspace maps (counted by its revision) or in
//! `StatusFields` (in `ledger`), which the change check compares whole.

use super::error_tracker::Held;
use super::ledger::{Ledger, StatusFields};
use super::outcome::SyncOutcome;
use super::workspace::WorkspaceKey;
use crate::crd::{
    CONDITION_ANSWER_LIMITED, CONDITION_LEDGER_TRUNCATED, CONDITION_READY, CONDITION_SETTINGS_REJECTED,
    CONDITION_SYNCED, CONDITION_TERMINATION_STUCK, PendingErrorRecord, WorkspaceSyncStatusStatus,
};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::{HashMap, HashSet};

/// What the status may take (DESIGN: < 1 MiB at 10,000 workspaces; the apiserver refuses
/// requests over 1.5 MiB). A pathological error set beyond it keeps only the newest errors.
pub const STATUS_BUDGET_BYTES: usize = 900 * 1024;
/// An error record without its workspace name and message, serialized.
const PENDING_ERROR_RECORD_BYTES: usize = 140;

/// Everything a status renders from, cheaply comparable: equal keys render equal statuses, so
/// an idle cycle tells its status is unchanged without rendering 10,000 entries.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderKey {
    revision: u64,
    workspaces: usize,
    fields: StatusFields,
}

impl Ledger {
    /// Everything the status renders, cheaply comparable: equal keys render equal statuses.
    pub fn render_key(&self, workspaces: usize) -> RenderKey {
        RenderKey { revision: self.revision(), workspaces, fields: self.fields.clone() }
    }

    /// Render the ledger as the CRD status. Conditions keep their transition time while their
    /// status holds, so an unchanged ledger renders byte-identical and is not written again.
    pub fn to_status(
        &self,
        workspaces: usize,
        previous_conditions: &[Condition],
        now: Timestamp,
    ) -> WorkspaceSyncStatusStatus {
        let mut messages: Vec<String> = Vec::new();
        let mut message_index: HashMap<&str, u32> = HashMap::new();
        let mut pending_errors = Vec::new();
        let held = self.errors().held();
        let total_held = held.len();
        let kept = self.newest_within_budget(held);
        let truncated = kept.len() < total_held;
        for (key, held) in kept {
            let failure = &held.failure;
            let index = *message_index.entry(failure.message.as_str()).or_insert_with(|| {
                messages.push(failure.message.clone());
                (messages.len() - 1) as u32
            });
            pending_errors.push(PendingErrorRecord {
                workspace: key.to_string(),
                error_type: failure.error_type,
                version: held.version.to_string(),
                first_seen: Time(failure.first_seen),
                message: index,
                acknowledged: held.acknowledged,
            });
        }
        let ready = if self.fields.outcome.ok {
            SyncOutcome { ok: true, reason: "Ready".into(), message: "the agent is syncing".into() }
        } else {
            self.fields.outcome.clone()
        };
        let mut conditions = vec![
            condition(CONDITION_READY, &ready, previous_conditions, now),
            condition(CONDITION_SYNCED, &self.fields.outcome, previous_conditions, now),
        ];
        if truncated {
            let message = format!(
                "the status holds the newest {} of {total_held} errors; the others are still sent to the \
                 control plane, but would not survive a restart",
                pending_errors.len()
            );
            let outcome = SyncOutcome { ok: true, reason: "ErrorBudgetExceeded".into(), message };
            conditions.push(condition(CONDITION_LEDGER_TRUNCATED, &outcome, previous_conditions, now));
        }
        if let Some(reason) = &self.fields.rejected_settings {
            let message = format!("kept the last good settings: the control plane sent {reason}");
            let outcome = SyncOutcome { ok: true, reason: "SettingsOutOfBounds".into(), message };
            conditions.push(condition(CONDITION_SETTINGS_REJECTED, &outcome, previous_conditions, now));
        }
        if let Some(message) = &self.fields.answer_limited {
            let outcome = SyncOutcome { ok: true, reason: "AnswerPastBounds".into(), message: message.clone() };
            conditions.push(condition(CONDITION_ANSWER_LIMITED, &outcome, previous_conditions, now));
        }
        if let Some(first) = self.fields.stuck_terminations.first() {
            let more = self.fields.stuck_terminations.len().saturating_sub(1);
            let others = if more > 0 { format!(" and {more} more") } else { String::new() };
            let message = format!(
                "workspace {first}{others} still terminating past --termination-timeout; the agent keeps trying \
                 (each workspace's error says what holds its namespace)"
            );
            let outcome = SyncOutcome { ok: true, reason: "NamespaceNotDeleted".into(), message };
            conditions.push(condition(CONDITION_TERMINATION_STUCK, &outcome, previous_conditions, now));
        }
        WorkspaceSyncStatusStatus {
            conditions,
            last_full_sync_time: self.fields.last_full_sync.map(Time),
            next_full_sync_time: self.fields.next_full_sync.map(Time),
            last_partial_sync_time: self.fields.last_partial_sync.map(Time),
            last_handled_resync_request: self.fields.last_handled_resync.clone(),
            full_reconciliation_interval_seconds: Some(self.fields.settings.full_reconciliation_interval_seconds),
            partial_reconciliation_interval_seconds: Some(self.fields.settings.partial_reconciliation_interval_seconds),
            epoch: self.errors().epoch(),
            acknowledged: self.acknowledged().iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            terminations: self.terminations().iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            pending_error_count: self.errors().pending_count() as u64,
            error_count: total_held as u64,
            pending_errors,
            error_messages: messages,
            workspaces: workspaces as u64,
        }
    }
}

impl Ledger {
    /// The errors the status can hold within its size budget, the unacknowledged and then the
    /// newest kept first, in
    /// the tracker's stable order. Sizes are estimated from the serialized form.
    fn newest_within_budget<'a>(
        &self,
        mut held: Vec<(&'a WorkspaceKey, &'a Held)>,
    ) -> Vec<(&'a WorkspaceKey, &'a Held)> {
        let key_bytes = |key: &WorkspaceKey| key.namespace().len() + key.name().len() + 8;
        let fixed = 4096
            + self.acknowledged().iter().map(|(key, rv)| key_bytes(key) + rv.len() + 4).sum::<usize>()
            + self.terminations().keys().map(|key| key_bytes(key) + 16).sum::<usize>();
        let mut left = STATUS_BUDGET_BYTES.saturating_sub(fixed);
        // Unacknowledged first (the control plane has not seen them), then the newest.
        held.sort_by(|a, b| {
            (a.1.acknowledged.cmp(&b.1.acknowledged))
                .then_with(|| b.1.failure.first_seen.cmp(&a.1.failure.first_seen))
                .then_with(|| a.0.cmp(b.0))
        });
        let mut messages: HashSet<&str> = HashSet::new();
        let mut kept = Vec::new();
        for entry in held {
            let message = entry.1.failure.message.as_str();
            let cost = PENDING_ERROR_RECORD_BYTES
                + key_bytes(entry.0)
                + if messages.contains(message) { 0 } else { message.len() + 4 };
            if cost > left {
                break;
            }
            left -= cost;
            messages.insert(message);
            kept.push(entry);
        }
        kept.sort_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.version.cmp(&b.1.version)));
        kept
    }
}

fn condition(type_: &str, outcome: &SyncOutcome, previous: &[Condition], now: Timestamp) -> Condition {
    let status = if outcome.ok { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: outcome.reason.clone(),
        message: outcome.message.clone(),
        last_transition_time: since,
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::error::ApplyError;
    use crate::protocol::{TerminationProgress, UpdateType};
    use std::collections::BTreeSet;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(second).expect("a time")
    }

    fn fail(ledger: &mut Ledger, name: &str, message: &str) {
        let key = WorkspaceKey::new("ns", name);
        let version = ledger.errors_mut().begin(&key);
        ledger.errors_mut().record(&key, version, Err(ApplyError::applier(message)), at(0));
    }

    /// A ledger whose status sets every field.
    fn full() -> Ledger {
        let mut ledger = Ledger::restore(None);
        ledger.acknowledged_mut().insert(WorkspaceKey::new("ns", "ws"), "1".into());
        ledger.terminations_mut().insert(WorkspaceKey::new("ns", "gone"), TerminationProgress::Terminating);
        fail(&mut ledger, "ws", "boom");
        ledger.cycle_succeeded(UpdateType::Full, at(1), Some("first"));
        ledger.cycle_succeeded(UpdateType::Partial, at(1), None);
        ledger
    }

    type Change = fn(&mut Ledger, &mut usize);

    /// Each field the status shows, and a change to the ledger that shows in it. A field added
    /// to the status fails this test until it has a change here; a change the render key does
    /// not see (a field kept outside `StatusFields` and the revision) fails it too.
    const CHANGES: &[(&str, Change)] = &[
        ("conditions", |l, _| l.fields.outcome = SyncOutcome { ok: false, reason: "R".into(), message: "m".into() }),
        ("lastFullSyncTime", |l, _| l.fields.last_full_sync = Some(at(5))),
        ("nextFullSyncTime", |l, _| l.fields.next_full_sync = Some(at(5))),
        ("lastPartialSyncTime", |l, _| l.fields.last_partial_sync = Some(at(5))),
        ("lastHandledResyncRequest", |l, _| l.fields.last_handled_resync = Some("second".into())),
        ("fullReconciliationIntervalSeconds", |l, _| l.fields.settings.full_reconciliation_interval_seconds += 1),
        ("partialReconciliationIntervalSeconds", |l, _| l.fields.settings.partial_reconciliation_interval_seconds += 1),
        ("acknowledged", |l, _| {
            l.acknowledged_mut().insert(WorkspaceKey::new("ns", "ws"), "2".into());
        }),
        ("terminations", |l, _| {
            l.terminations_mut().insert(WorkspaceKey::new("ns", "other"), TerminationProgress::Terminated);
        }),
        ("pendingErrors", |l, _| fail(l, "other", "boom")),
        ("errorMessages", |l, _| fail(l, "ws", "another")),
        ("workspaces", |_, workspaces| *workspaces += 1),
        ("pendingErrorCount", |l, _| fail(l, "other", "boom")),
        ("errorCount", |l, _| fail(l, "other", "boom")),
    ];
    /// Fields set once, when the ledger is restored.
    const FIXED_AT_RESTORE: &[&str] = &["epoch"];

    #[test]
    fn whatever_the_status_shows_is_seen_by_the_render_key() {
        let base = full();
        let render = |ledger: &Ledger, workspaces| {
            serde_json::to_value(ledger.to_status(workspaces, &[], at(9))).expect("serializes")
        };
        let before = render(&base, 1);
        let shown: BTreeSet<&str> = before.as_object().expect("an object").keys().map(String::as_str).collect();
        let covered: BTreeSet<&str> =
            CHANGES.iter().map(|(field, _)| *field).chain(FIXED_AT_RESTORE.iter().copied()).collect();
        assert_eq!(shown, covered, "every field the status shows has a change in CHANGES");
        for (field, change) in CHANGES {
            let (mut ledger, mut workspaces) = (base.clone(), 1);
            change(&mut ledger, &mut workspaces);
            assert_ne!(render(&ledger, workspaces)[field], before[*field], "{field}: the change shows");
            assert_ne!(ledger.render_key(workspaces), base.render_key(1), "{field}: the render key sees it");
        }
    }
}
