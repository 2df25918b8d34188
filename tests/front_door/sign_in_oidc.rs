//! Sign-in through a real OpenID Provider (#38), driven by a real headless Chromium: the
//! provider on `localhost`, the control plane on `127.0.0.1`, so that the browser comes back
//! from another site, as it does from a company's identity provider, and a `SameSite=Strict`
//! cookie would not come with it.

use super::support::browser::Browser;
use super::support::identity_provider::OpenIdProvider;
use super::support::{ControlPlaneProcess, free_port, secret_token};
use super::{http, sqlite};
use reqwest::StatusCode;
use serde_json::{Value, json};

const ADMIN_GROUP: &str = "wsync-admins";

/// A control plane that signs people in through a provider on `provider_port`, and that
/// provider, with alice and bob (developers) and root (an admin, by the group).
pub fn control_plane_and_provider(dir: &tempfile::TempDir) -> (ControlPlaneProcess, OpenIdProvider) {
    let provider_port = free_port();
    let secret_file = dir.path().join("oidc-client-secret");
    let secret = secret_token("client");
    std::fs::write(&secret_file, &secret).unwrap();
    // The control plane first: the provider must know its redirect URI, and a control plane
    // discovers its provider at the first sign-in, not at start.
    let issuer = format!("http://localhost:{provider_port}");
    let control_plane = ControlPlaneProcess::start(
        &sqlite(dir),
        dir.path().join("cp.log"),
        &[
            "--oidc-issuer",
            &issuer,
            "--oidc-client-id",
            "wsync",
            "--oidc-client-secret-file",
            secret_file.to_str().unwrap(),
            "--oidc-scope",
            "email,profile,groups",
            "--oidc-admin-group",
            ADMIN_GROUP,
        ],
    );
    control_plane.cli(&["agents", "register", "a1"]);
    let clients = json!([{
        "client_id": "wsync",
        "client_secret": secret,
        "redirect_uris": [format!("{}/sign-in/oidc/callback", control_plane.url)],
    }]);
    let accounts = json!({
        "alice": { "email": "alice@example.com", "name": "Alice Liddell", "groups": ["dev"] },
        "bob": { "email": "bob@example.com", "name": "Bob", "groups": ["dev"] },
        "root": { "email": "root@example.com", "groups": ["dev", ADMIN_GROUP] },
        "carol": { "email": "carol@example.com", "groups": ["dev"] },
    });
    let provider = OpenIdProvider::start(provider_port, clients, accounts, dir.path().join("provider.log"));
    (control_plane, provider)
}

/// A control plane whose people sign in through `issuer`, as client `wsync`.
fn signing_in_through(issuer: &str, dir: &tempfile::TempDir) -> ControlPlaneProcess {
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, "s3cret").unwrap();
    let secret = secret_file.to_str().unwrap();
    let flags = ["--oidc-issuer", issuer, "--oidc-client-id", "wsync", "--oidc-client-secret-file", secret];
    ControlPlaneProcess::start(&sqlite(dir), dir.path().join("cp.log"), &flags)
}

/// Sign in through the provider's own login page, from the control plane's sign-in page.
pub fn sign_in_through_provider(browser: &mut Browser, control_plane: &ControlPlaneProcess, login: &str) {
    browser.goto(&format!("{}/", control_plane.url));
    assert!(browser.location().contains("/sign-in"), "{}", browser.location());
    browser.act("document.querySelector('#oidc').click()");
    browser.wait_until("the provider's login form", "document.querySelector('input[name=login]')");
    assert!(
        browser.location().starts_with("http://localhost:"),
        "at the provider, on another site: {}",
        browser.location()
    );
    browser.act(&format!(
        "document.querySelector('input[name=login]').value = '{login}'; \
         document.querySelector('input[name=password]').value = 'any'; \
         document.querySelector('button[type=submit]').click()"
    ));
    browser.wait_until("back home, signed in", "document.body.innerText.includes('Sign out')");
    assert_eq!(browser.location(), format!("{}/", control_plane.url));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_users_and_an_admin_sign_in_through_a_real_provider_and_each_reaches_what_their_role_allows() {
    let dir = tempfile::tempdir().unwrap();
    let (control_plane, _provider) = control_plane_and_provider(&dir);

    // Alice signs in through the provider and creates a workspace with the page's form.
    let mut alice = Browser::launch();
    sign_in_through_provider(&mut alice, &control_plane, "alice");
    assert!(alice.text().contains("My workspaces") && alice.text().contains("alice"), "{}", alice.text());
    assert!(!alice.text().contains("Agents\n"), "a user sees no agent list");
    assert_eq!(alice.eval("document.cookie"), "", "the session cookie is HttpOnly");
    alice.act(
        "const form = document.querySelector('form[action=\"/workspaces\"]'); \
         form.querySelector('input[name=name]').value = 'alice-ide'; \
         form.querySelector('input[name=image]').value = 'busybox:1.36'; \
         form.querySelector('textarea[name=env]').value = 'EDITOR=vim'; form.submit()",
    );
    alice.wait_until("her workspace is listed", "document.body.innerText.includes('a1 / alice-ide')");
    alice.act("document.querySelector('form[action=\"/agents/a1/workspaces/alice-ide/stop\"] button').click()");
    assert!(alice.text().contains("Stopped"), "{}", alice.text());

    // Bob sees nothing of hers; his own form posted at her workspace finds nothing.
    let mut bob = Browser::launch();
    sign_in_through_provider(&mut bob, &control_plane, "bob");
    assert!(!bob.text().contains("alice-ide"), "{}", bob.text());
    bob.act(
        "const form = document.querySelector('form[action=\"/workspaces\"]'); \
         form.action = '/agents/a1/workspaces/alice-ide/terminate'; \
         form.enctype = 'application/x-www-form-urlencoded'; form.submit()",
    );
    assert!(
        bob.text().contains("no workspace \\\"alice-ide\\\""),
        "404, as a name that does not exist: {}",
        bob.text()
    );
    bob.goto(&format!("{}/agents/a1", control_plane.url));
    assert!(bob.text().contains("no agent"), "an agent's whole page is the admins': {}", bob.text());
    bob.goto(&format!("{}/users", control_plane.url));
    assert!(bob.text().contains("only an admin"), "{}", bob.text());

    // A name already taken (a user an admin created) is not the provider's to give.
    control_plane.cli(&["users", "create", "carol"]);
    let mut carol = Browser::launch();
    sign_in_through_provider(&mut carol, &control_plane, "carol");
    assert!(carol.text().contains("carol-2"), "the provider's carol is another person: {}", carol.text());
    // A disabled user is turned away at the provider's door too.
    control_plane.cli(&["users", "disable", "carol-2"]);
    let mut again = Browser::launch();
    again.goto(&format!("{}/sign-in", control_plane.url));
    again.act("document.querySelector('#oidc').click()");
    again.wait_until("the provider's login form", "document.querySelector('input[name=login]')");
    again.act(
        "document.querySelector('input[name=login]').value = 'carol'; \
         document.querySelector('input[name=password]').value = 'any'; \
         document.querySelector('button[type=submit]').click()",
    );
    again.wait_until("refused", "document.body.innerText.includes('disabled')");

    // Root is an admin by the provider's group: every agent, every user, the whole trail.
    let mut root = Browser::launch();
    sign_in_through_provider(&mut root, &control_plane, "root");
    assert!(root.text().contains("Agents"), "{}", root.text());
    root.goto(&format!("{}/agents/a1", control_plane.url));
    assert!(root.text().contains("alice-ide"), "{}", root.text());
    root.goto(&format!("{}/users", control_plane.url));
    let users = root.text();
    for expected in ["alice", "Alice Liddell", "alice@example.com", "bob", "root\t", "admin", "http://localhost:"] {
        assert!(users.contains(expected), "{expected:?} in {users}");
    }
    root.goto(&format!("{}/audit?user=alice", control_plane.url));
    let trail = root.text();
    for expected in ["workspace.create", "workspace.stop", "sign-in", "through the identity provider"] {
        assert!(trail.contains(expected), "{expected:?} in {trail}");
    }
    // And bob's own activity shows his refused terminate? No: a 404 changes nothing, so it
    // is not a write; his sign-in is there, and none of alice's entries.
    bob.goto(&format!("{}/audit", control_plane.url));
    assert!(bob.text().contains("sign-in") && !bob.text().contains("alice-ide"), "{}", bob.text());

    let listed: Value =
        serde_json::from_str(&control_plane.cli(&["users", "list", "-o", "json"])).expect("users as json");
    let roles: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["username"].as_str().unwrap().into(), u["role"].as_str().unwrap().into()))
        .collect();
    let expected = [("alice", "user"), ("bob", "user"), ("carol", "user"), ("carol-2", "user"), ("root", "admin")];
    assert_eq!(roles, expected.map(|(u, r)| (u.to_string(), r.to_string())));
    assert_eq!(listed[0]["subject"], "alice", "keyed by the provider's subject");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_callback_a_wrong_state_and_a_provider_that_is_down_are_refused_and_sessions_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let (control_plane, mut provider) = control_plane_and_provider(&dir);
    let mut alice = Browser::launch();
    sign_in_through_provider(&mut alice, &control_plane, "alice");

    // A callback nobody started in this browser, with a code and a state of its own.
    let forged = format!("{}/sign-in/oidc/callback?code=stolen&state=guess", control_plane.url);
    let answer = http().get(&forged).send().await.unwrap();
    assert_eq!(answer.status(), StatusCode::BAD_REQUEST);
    assert!(answer.text().await.unwrap().contains("not started in this browser"));

    // A started sign-in whose callback comes back with another state (login CSRF).
    let started = http().get(format!("{}/sign-in/oidc?next=/", control_plane.url)).send().await.unwrap();
    assert_eq!(started.status(), StatusCode::SEE_OTHER);
    let set_cookie = started.headers()["set-cookie"].to_str().unwrap().to_string();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/sign-in/oidc", "Max-Age=600"] {
        assert!(set_cookie.contains(attribute), "{attribute}: {set_cookie}");
    }
    let pending = set_cookie.split(';').next().unwrap().to_string();
    let location = started.headers()["location"].to_str().unwrap().to_string();
    assert!(
        location.starts_with(&provider.issuer)
            && location.contains("code_challenge_method=S256")
            && location.contains("nonce=")
    );
    let wrong = http()
        .get(format!("{}/sign-in/oidc/callback?code=x&state=not-the-state", control_plane.url))
        .header("cookie", &pending)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::BAD_REQUEST);

    // Any page can make a browser load the callback: junk callbacks neither lock the address
    // out nor fill the audit trail.
    for _ in 0..12 {
        let junk =
            http().get(format!("{}/sign-in/oidc/callback?code=x&state=y", control_plane.url)).send().await.unwrap();
        assert_eq!(junk.status(), StatusCode::BAD_REQUEST);
    }
    let token_sign_in = super::post_sign_in(&control_plane, &control_plane.admin_token).await;
    assert_eq!(token_sign_in.status(), StatusCode::SEE_OTHER, "the address is not locked out by junk callbacks");

    // The provider goes down: a signed-in session keeps working, and a control plane that
    // must discover it now says that it does not answer, and still takes tokens.
    provider.stop();
    alice.goto(&format!("{}/", control_plane.url));
    assert!(alice.text().contains("My workspaces"), "alice's session keeps working: {}", alice.text());
    let other = tempfile::tempdir().unwrap();
    let down = signing_in_through(&provider.issuer, &other);
    let mut late = Browser::launch();
    late.goto(&format!("{}/sign-in", down.url));
    late.act("document.querySelector('#oidc').click()");
    let shown = late.text();
    assert!(shown.contains("does not answer") && shown.contains("a token still signs in"), "{shown}");
    assert!(down.logs().contains("a sign-in could not start"), "and the log says why");
    late.act(&format!(
        "document.querySelector('input[name=token]').value = '{}'; document.querySelector('form[action=\"/sign-in\"]').submit()",
        down.admin_token
    ));
    assert!(late.text().contains("Agents"), "the admin token still signs in: {}", late.text());

    let trail: Value = serde_json::from_str(&control_plane.cli(&["audit", "-o", "json"])).unwrap();
    let refusals =
        trail.as_array().unwrap().iter().filter(|e| e["action"] == "sign-in" && e["outcome"] == "refused").count();
    assert_eq!(refusals, 1, "the wrong state is on the trail, the junk is not: {trail}");
}

/// Each flaw an ID token may have, from a hostile provider: refused, the reason logged and
/// on the trail, the page saying so, and no session. A good token from the same provider
/// signs in, so that each refusal is the flaw's.
#[tokio::test(flavor = "multi_thread")]
async fn a_forged_expired_or_misdirected_id_token_is_refused_with_its_reason() {
    use super::support::forging_provider::{Flaw, ForgingProvider};
    wsync::runtime::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let forger = ForgingProvider::start("wsync").await;
    let control_plane = signing_in_through(&forger.issuer, &dir);
    let cases = [
        (Flaw::Signature, "Signature verification failed: Crypto error"),
        (Flaw::Issuer, "Invalid issuer"),
        (Flaw::Audience, "Invalid audiences"),
        (Flaw::Expired, "Expired"),
        (Flaw::Nonce, "Invalid nonce"),
        (Flaw::Unsigned, "No signature found"),
        (Flaw::IssParameter, "evil.example"),
        (Flaw::ProviderError, "provider error access_denied"),
        (Flaw::None, ""),
    ];
    for (n, (flaw, reason)) in (10u8..).zip(cases) {
        forger.next_token(flaw);
        let log_before = control_plane.logs().len();
        // Each case from an address of its own: failures from one address back off.
        let http = || {
            let from = std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, n));
            let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).local_address(from);
            client.build().expect("client")
        };
        let started = http().get(format!("{}/sign-in/oidc?next=/", control_plane.url)).send().await.unwrap();
        assert_eq!(started.status(), StatusCode::SEE_OTHER, "{}", control_plane.logs());
        let pending = started.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
        let at_provider = http().get(started.headers()["location"].to_str().unwrap()).send().await.unwrap();
        let callback = at_provider.headers()["location"].to_str().unwrap().to_string();
        let answer = http().get(&callback).header("cookie", &pending).send().await.unwrap();
        let status = answer.status();
        let cookies: Vec<String> =
            answer.headers().get_all("set-cookie").iter().map(|c| c.to_str().unwrap().to_string()).collect();
        let page = answer.text().await.unwrap();
        if flaw == Flaw::None {
            assert_eq!(status, StatusCode::OK, "the same provider's good token signs in: {page}");
            assert!(
                cookies.iter().any(|c| c.starts_with("wsync_session=") && c.contains("SameSite=Strict")),
                "{cookies:?}"
            );
            assert!(page.contains("http-equiv=\"refresh\""), "on from the page, not by a redirect: {page}");
            let replayed = http().get(&callback).header("cookie", &pending).send().await.unwrap();
            assert_eq!(replayed.status(), StatusCode::BAD_REQUEST, "the same callback again is refused");
            assert!(replayed.text().await.unwrap().contains("used already"));
            continue;
        }
        let (expected_status, said) = match flaw {
            Flaw::IssParameter => (StatusCode::BAD_REQUEST, "another identity provider"),
            Flaw::ProviderError => (StatusCode::UNAUTHORIZED, "did not sign you in: access_denied &lt;script&gt;"),
            _ => (StatusCode::UNAUTHORIZED, "ID token was refused"),
        };
        assert_eq!(status, expected_status, "{flaw:?}: {page}");
        assert!(page.contains(said), "{flaw:?}: the page says so: {page}");
        assert!(!page.contains("<script>"), "{flaw:?}: the provider's words are escaped");
        assert!(!cookies.iter().any(|c| c.starts_with("wsync_session=")), "{flaw:?}: no session: {cookies:?}");
        let logged = control_plane.logs().get(log_before..).unwrap_or_default().to_string();
        assert!(logged.contains(reason), "{flaw:?}: its own log line names {reason:?}:\n{logged}");
    }
    let users: Value = serde_json::from_str(&control_plane.cli(&["users", "list", "-o", "json"])).unwrap();
    assert_eq!(users.as_array().map(Vec::len), Some(1), "only the good token made a user: {users}");
    let trail: Value = serde_json::from_str(&control_plane.cli(&["audit", "-o", "json"])).unwrap();
    let refused = trail.as_array().unwrap().iter().filter(|e| e["outcome"] == "refused").count();
    assert_eq!(refused, 8, "each forged token and bad answer is on the trail (not the replay: nobody's): {trail}");
}
