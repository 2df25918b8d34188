//! A real headless Chromium at the front door.

use super::support::browser::{Browser, ForeignSite};
use super::{control_plane_with_a_workspace, desired, sqlite};

/// A real browser signs in, presses Stop and sees it; a page of another origin, loaded in the
/// same browser (same site: cookies go with it), changes nothing and shows the refusal.
#[tokio::test(flavor = "multi_thread")]
async fn a_browser_signs_in_and_presses_stop_and_a_foreign_page_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = control_plane_with_a_workspace(&sqlite(&dir), &dir);
    let url = control_plane.url.clone();
    let mut browser = Browser::launch();
    browser.goto(&format!("{url}/agents/a1"));
    assert!(browser.location().contains("/sign-in?next=/agents/a1"), "{}", browser.location());
    browser.act(&format!(
        "document.querySelector('input[name=token]').value = '{}'; document.querySelector('form').submit()",
        control_plane.admin_token
    ));
    assert_eq!(browser.location(), format!("{url}/agents/a1"));
    assert!(browser.text().contains("Workspaces of agent a1"), "{}", browser.text());
    let cookie = browser.eval("document.cookie");
    assert_eq!(cookie, "", "the session cookie is HttpOnly: no script reads it");

    browser.act("document.querySelector('form[action=\"/agents/a1/workspaces/ws/stop\"] button').click()");
    let row = browser.eval("document.querySelector('tbody tr').innerText");
    assert!(row.as_str().is_some_and(|r| r.contains("Stopped")), "the row shows the new desired state: {row}");
    assert_eq!(desired(&control_plane), "Stopped");

    // A foreign page posts the page's own form to the control plane, and tries the API.
    let foreign = ForeignSite::serve(format!(
        "<!doctype html><body><form method=post action=\"{url}/agents/a1/workspaces/ws/terminate\">\
         <input name=csrf value=guess></form><script>\
         fetch('{url}/api/v1/agents/a1/workspaces/ws/start', {{method: 'POST', mode: 'no-cors', credentials: 'include', \
         headers: {{'Content-Type': 'text/plain'}}, body: '{{}}'}}).finally(() => document.forms[0].submit());\
         </script></body>"
    ));
    browser.goto(&foreign.url);
    browser.wait_until("the refusal is shown", "document.body.innerText.includes('cross-origin request refused')");
    assert!(browser.location().starts_with(&url), "the browser landed on the control plane's answer");
    assert_eq!(desired(&control_plane), "Stopped", "neither the form nor the fetch changed anything");
}

/// The orphans section's buttons, pressed in a real browser: an agent reports two workspaces
/// this control plane does not know; one is adopted with its image, the other terminated.
#[tokio::test(flavor = "multi_thread")]
async fn a_browser_adopts_one_orphan_and_terminates_another() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = control_plane_with_a_workspace(&sqlite(&dir), &dir);
    let rotated = control_plane.cli(&["agents", "rotate-token", "a1", "-o", "json"]);
    let token = serde_json::from_str::<serde_json::Value>(&rotated).unwrap()["token"].as_str().unwrap().to_string();
    let report = serde_json::json!({ "update_type": "full", "workspace_agent_infos": [
        { "name": "kept", "namespace": "restored-kept" },
        { "name": "gone", "namespace": "restored-gone" },
    ]});
    let answer = super::http()
        .post(format!("{}{}", control_plane.url, wsync::protocol::RECONCILE_PATH))
        .bearer_auth(&token)
        .json(&report)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 201);

    let url = control_plane.url.clone();
    let mut browser = Browser::launch();
    browser.sign_in_to(&url, &control_plane.admin_token, "/agents/a1");
    assert!(browser.text().contains("Orphans"), "{}", browser.text());
    browser.act(
        "const form = document.querySelector('form[action=\"/agents/a1/orphans/restored-kept/kept/adopt\"]'); \
         form.querySelector('input[name=image]').value = 'registry.example.com/ide:7'; form.submit()",
    );
    browser.act(
        "document.querySelector('form[action=\"/agents/a1/orphans/restored-gone/gone/terminate\"] button').click()",
    );
    assert!(!browser.text().contains("Orphans"), "no orphans left: {}", browser.text());
    let kept: serde_json::Value =
        serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "a1", "get", "kept", "-o", "json"]))
            .unwrap();
    assert_eq!(
        (kept["image"].as_str(), kept["namespace"].as_str()),
        (Some("registry.example.com/ide:7"), Some("restored-kept"))
    );
    assert_eq!(kept["desired_state"], "Running");
    let gone: serde_json::Value =
        serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "a1", "get", "gone", "-o", "json"]))
            .unwrap();
    assert_eq!(gone["desired_state"], "Terminated", "the agent is told to delete it");
    assert!(control_plane.cli(&["workspaces", "--agent", "a1", "list", "--orphans", "-o", "json"]).trim() == "[]");
}
