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
