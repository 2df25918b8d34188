use super::*;
use crate::crd::{PendingErrorRecord, WorkspaceSyncStatusSpec, WorkspaceSyncStatusStatus};
use crate::protocol::ErrorType;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_second(seconds).expect("a time")
}

fn wss(status: WorkspaceSyncStatusStatus) -> WorkspaceSyncStatus {
    let mut wss = WorkspaceSyncStatus::new("7", WorkspaceSyncStatusSpec { agent_id: "7".into(), paused: false });
    wss.status = Some(status);
    wss
}

fn ledger() -> WorkspaceSyncStatusStatus {
    WorkspaceSyncStatusStatus {
        acknowledged: [("ns-a/a", "10"), ("ns-b/b", "20"), ("ns-c/c", "30")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        terminations: [("ns-d/d".to_string(), TerminationProgress::Terminating)].into(),
        pending_errors: vec![
            PendingErrorRecord {
                workspace: "ns-b/b".into(),
                error_type: ErrorType::Applier,
                version: "1.4".into(),
                first_seen: Time(at(1_000)),
                message: 0,
                acknowledged: false,
            },
            // A hand-edited status: the index points nowhere.
            PendingErrorRecord {
                workspace: "ns-e/e".into(),
                error_type: ErrorType::Kubernetes,
                version: "1.5".into(),
                first_seen: Time(at(1_000)),
                message: 9,
                acknowledged: true,
            },
        ],
        error_messages: vec!["quota \u{1b}[2Jexceeded".into()],
        workspaces: 4,
        pending_error_count: 1,
        error_count: 2,
        ..Default::default()
    }
}

#[test]
fn each_workspace_is_in_sync_behind_or_gone_with_its_termination_and_error() {
    let live: BTreeMap<String, String> =
        [("ns-a/a", "10"), ("ns-b/b", "21"), ("ns-f/f", "5")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
    let rows = workspaces(&wss(ledger()), &live, at(1_090));
    let summary: Vec<(&str, &str, Option<TerminationProgress>, bool)> =
        rows.iter().map(|r| (r.name.as_str(), r.sync, r.termination, r.error.is_some())).collect();
    assert_eq!(
        summary,
        vec![
            ("a", "in sync", None, false),
            ("b", "behind", None, true),
            ("c", "gone", None, false),
            ("d", "-", Some(TerminationProgress::Terminating), false),
            ("e", "-", None, true),
            ("f", "behind", None, false),
        ]
    );
    let b = rows[1].error.as_ref().expect("b's error");
    assert_eq!((b.error_type.as_str(), b.age_seconds), ("applier", 90));
    assert_eq!(b.message, "quota \u{1b}[2Jexceeded", "the data as it is, for JSON and YAML");
    let shown = workspaces_table(&rows, true);
    assert!(
        shown.contains("quota \\u{1b}[2Jexceeded") && !shown.contains('\u{1b}'),
        "no escape sequence reaches the terminal"
    );
    assert_eq!(rows[4].error.as_ref().map(|e| e.message.as_str()), Some("(message missing from the status)"));
}

#[test]
fn every_cell_of_a_hand_edited_status_is_printable() {
    let mut status = ledger();
    // A workspace key with a bidirectional override, which would show the name reversed.
    status.acknowledged.insert("ns-z/\u{202E}evil".into(), "1".into());
    let rows = workspaces(&wss(status), &BTreeMap::new(), at(1_000));
    let shown = workspaces_table(&rows, false);
    assert!(!shown.contains('\u{202E}') && shown.contains("\\u{202e}evil"), "{shown}");
}

#[test]
fn tables_align_their_columns_and_wide_adds_some() {
    let rows = errors(&wss(ledger()), at(1_300));
    let text = errors_table(&rows, false);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "WORKSPACE   TYPE         AGE   MESSAGE");
    assert!(lines[1].starts_with("ns-b/b      applier      5m    quota"), "{text}");
    let wide = errors_table(&rows, true);
    assert!(
        wide.lines().next().is_some_and(|h| h.contains("AGENT   VERSION   FIRST SEEN") && h.ends_with("ACKNOWLEDGED"))
    );
}

#[test]
fn status_counts_what_the_ledger_holds() {
    let status = agent_status(&wss(ledger()));
    assert_eq!((status.workspaces, status.errors, status.pending_errors, status.terminating), (4, 2, 1, 1));
    assert_eq!(status.synced, "Unknown", "no condition yet");
    assert_eq!(age(59), "59s");
    assert_eq!(age(3_599), "59m");
    assert_eq!(age(90_000), "25h");
    assert_eq!(age(400_000), "4d");
}
