use super::*;

#[test]
fn escapes_everything_a_person_could_inject() {
    assert_eq!(
        escape("<script>alert('x')</script> & \""),
        "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;"
    );
}

#[test]
fn orphans_are_shown_with_their_two_fates_and_escaped() {
    let orphan = Orphan {
        namespace: "old-ns".into(),
        name: "<b>old</b>".into(),
        deployment_resource_version: Some("7".into()),
        actual_state: crate::protocol::ActualState::Running,
        first_seen: 0,
        last_seen: 60_000,
    };
    let orphans = [orphan];
    let view = AgentView {
        agent: "a1",
        workspaces: &[],
        more: None,
        orphans: &orphans,
        nav: Nav { csrf: "t0k\"", who: "root", admin: true },
        settings: "<x>",
        history: &[],
    };
    let page = agent_page(&view, 120_000);
    assert!(page.contains("<h2>Orphans</h2>"));
    assert!(page.contains("/agents/a1/orphans/old-ns/%3Cb%3Eold%3C%2Fb%3E/adopt"), "{page}");
    assert!(page.contains("/terminate\"") && !page.contains("<b>old</b>"));
    let forms = page.matches("<form method=\"post\"").count();
    assert_eq!(page.matches("name=\"csrf\" value=\"t0k&quot;\"").count(), forms, "every form carries the CSRF token");
    let view = AgentView { orphans: &[], more: Some("w-99"), ..view };
    let page = agent_page(&view, 0);
    assert!(!page.contains("Orphans"), "no section without orphans");
    assert!(page.contains("href=\"/agents/a1?after=w-99\""), "a next page when more follow");
    assert!(!page.contains("<script"));
    assert!(page.contains("<pre>&lt;x&gt;</pre>"), "the settings, escaped");
    let mut workspace: Workspace = serde_json::from_value(serde_json::json!({
        "agent_id": "a1", "name": "ws", "namespace": "n", "image": "i", "cpu": null, "memory": null, "env": {},
        "desired_state": "Running", "actual_state": "Error", "desired_state_updated_at": 0,
        "actual_state_updated_at": 0, "deployment_resource_version": null, "responded_to_agent_at": null,
        "force_include_all_resources": false, "last_reported_at": null, "created_at": 0,
        "error": {"error_type": "kubernetes", "message": "now", "first_seen": 9, "last_seen": 9, "desired_state": "Running"},
    }))
    .unwrap();
    let record = |message: &str, first_seen| ErrorRecord {
        name: "ws".into(),
        error_type: "kubernetes".into(),
        message: message.into(),
        first_seen,
    };
    let history = [record("now", 9), record("<i>before</i>", 5)];
    let workspaces = [workspace.clone()];
    let view = AgentView { workspaces: &workspaces, history: &history, more: None, ..view };
    let page = agent_page(&view, 10);
    assert!(page.contains("Earlier errors (1)") && page.contains("&lt;i&gt;before&lt;/i&gt;"), "{page}");
    workspace.error = None;
    let workspaces = [workspace];
    let page = agent_page(&AgentView { workspaces: &workspaces, ..view }, 10);
    assert!(page.contains("Earlier errors (2)"), "the history stays when the error is gone: {page}");
}

#[test]
fn relative_times() {
    assert_eq!(ago(120_000, Some(60_000)), "1m ago");
    assert_eq!(ago(5_000, None), "never");
}
