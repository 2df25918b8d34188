//! People (#38), against the real process and its CLI: users an admin creates, two roles,
//! another user's workspace answering 404 as a missing one, personal tokens, a disabled or
//! deleted user turned away at once, and the audit trail of what each did.

use super::support::ControlPlaneProcess;
use super::{http, sqlite};
use reqwest::StatusCode;
use serde_json::Value;

/// `wsync <args>` as whoever holds `token` (a personal token, not the admin's).
fn cli_as(control_plane: &ControlPlaneProcess, token: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(args)
        .env("WSYNC_SERVER", &control_plane.url)
        .env("WSYNC_TOKEN", token)
        .env_remove("WSYNC_ADMIN_TOKEN")
        .output()
        .expect("run wsync")
}

fn json_of(output: &std::process::Output) -> Value {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("json")
}

/// A user an admin creates: their token, printed once.
pub fn create_user(control_plane: &ControlPlaneProcess, name: &str, extra: &[&str]) -> String {
    let created: Value =
        serde_json::from_str(&control_plane.cli(&[&["users", "create", name, "-o", "json"], extra].concat()))
            .expect("json");
    created["token"].as_str().expect("a token").to_string()
}

async fn api(
    control_plane: &ControlPlaneProcess,
    method: reqwest::Method,
    path: &str,
    token: &str,
) -> (StatusCode, Value) {
    let mut request = http().request(method.clone(), format!("{}{path}", control_plane.url)).bearer_auth(token);
    if method != reqwest::Method::GET {
        request = request.header("content-type", "application/json").body("{}");
    }
    let answer = request.send().await.expect("send");
    (answer.status(), answer.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn each_user_reaches_their_own_workspaces_and_another_users_answer_404() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &[]);
    control_plane.cli(&["agents", "register", "a1"]);
    let (alice, bob) = (create_user(&control_plane, "alice", &[]), create_user(&control_plane, "bob", &[]));

    let created = json_of(&cli_as(
        &control_plane,
        &alice,
        &["workspaces", "--agent", "a1", "create", "ide", "--image", "busybox", "-o", "json"],
    ));
    assert_eq!(created["owner"], "alice", "a user's workspace is theirs");
    let mine = json_of(&cli_as(&control_plane, &alice, &["workspaces", "list", "-o", "json"]));
    assert_eq!(mine.as_array().map(Vec::len), Some(1), "my workspaces, across agents: {mine}");

    // Bob sees nothing of it: the list is empty, and every path to it answers as a missing one.
    let listed = json_of(&cli_as(&control_plane, &bob, &["workspaces", "--agent", "a1", "list", "-o", "json"]));
    assert_eq!(listed, Value::Array(vec![]));
    let missing = api(&control_plane, reqwest::Method::GET, "/api/v1/agents/a1/workspaces/nothing-here", &bob).await;
    for (method, path) in [
        (reqwest::Method::GET, "/api/v1/agents/a1/workspaces/ide"),
        (reqwest::Method::GET, "/api/v1/agents/a1/workspaces/ide/devfile"),
        (reqwest::Method::POST, "/api/v1/agents/a1/workspaces/ide/stop"),
        (reqwest::Method::POST, "/api/v1/agents/a1/workspaces/ide/terminate"),
    ] {
        let (status, body) = api(&control_plane, method.clone(), path, &bob).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
        assert_eq!(
            body["error"].as_str().map(|e| e.replace("ide", "nothing-here")),
            missing.1["error"].as_str().map(String::from),
            "the same answer as for a name that does not exist"
        );
    }
    let stopped = cli_as(&control_plane, &bob, &["workspaces", "--agent", "a1", "stop", "ide"]);
    assert!(!stopped.status.success());
    let admin_view: Value =
        serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "a1", "get", "ide", "-o", "json"])).unwrap();
    assert_eq!(admin_view["desired_state"], "Running", "bob changed nothing");

    // Only admins register agents, change their settings and see orphans.
    for (method, path) in [
        (reqwest::Method::POST, "/api/v1/agents"),
        (reqwest::Method::GET, "/api/v1/agents/a1/config"),
        (reqwest::Method::GET, "/api/v1/agents/a1/orphans"),
        (reqwest::Method::GET, "/api/v1/users"),
        (reqwest::Method::POST, "/api/v1/agents/a1/revoke"),
    ] {
        let (status, _) = api(&control_plane, method.clone(), path, &alice).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path} as a user");
    }
    let metrics = http().get(format!("{}/metrics", control_plane.url)).bearer_auth(&alice).send().await.unwrap();
    assert_ne!(metrics.status(), StatusCode::OK, "a user's token does not read /metrics");

    // Alice drives her own.
    let stopped =
        json_of(&cli_as(&control_plane, &alice, &["workspaces", "--agent", "a1", "stop", "ide", "-o", "json"]));
    assert_eq!(stopped["desired_state"], "Stopped");
    // An admin user sees every workspace.
    let root = create_user(&control_plane, "root", &["--admin"]);
    let everything = json_of(&cli_as(&control_plane, &root, &["workspaces", "--agent", "a1", "list", "-o", "json"]));
    assert_eq!(everything.as_array().map(Vec::len), Some(1));

    // The trail: who did what, from where; a user sees their own entries only.
    let trail: Value = serde_json::from_str(&control_plane.cli(&["audit", "-o", "json"])).unwrap();
    let actions: Vec<(String, String)> = trail
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["actor"].as_str().unwrap_or("").into(), e["action"].as_str().unwrap_or("").into()))
        .collect();
    for expected in [
        ("admin-token", "agent.register"),
        ("admin-token", "user.create"),
        ("alice", "workspace.create"),
        ("alice", "workspace.stop"),
    ] {
        assert!(actions.contains(&(expected.0.into(), expected.1.into())), "{expected:?} in {actions:?}");
    }
    assert!(trail[0]["client"].as_str().is_some_and(|c| c == "127.0.0.1"), "from where: {}", trail[0]);
    let own = json_of(&cli_as(&control_plane, &bob, &["audit", "-o", "json"]));
    assert!(own.as_array().unwrap().iter().all(|e| e["actor"] == "bob"), "bob sees his own alone: {own}");
    let filtered = json_of(&cli_as(&control_plane, &root, &["audit", "--workspace", "ide", "-o", "json"]));
    assert!(
        filtered.as_array().unwrap().iter().all(|e| e["workspace"] == "ide") && filtered.as_array().unwrap().len() == 2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_disabled_or_deleted_user_is_turned_away_at_once_and_their_workspaces_stay() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &[]);
    control_plane.cli(&["agents", "register", "a1"]);
    let alice = create_user(&control_plane, "alice", &[]);
    json_of(&cli_as(
        &control_plane,
        &alice,
        &["workspaces", "--agent", "a1", "create", "ide", "--image", "busybox", "-o", "json"],
    ));

    // Signed in on the page with her token, and a second token made there for scripts.
    let (cookie, csrf) = sign_in_as(&control_plane, &alice).await;
    let made = http()
        .post(format!("{}/tokens", control_plane.url))
        .header("origin", &control_plane.url)
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}&name=laptop&days=7"))
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), StatusCode::CREATED);
    assert_eq!(made.headers()["cache-control"], "no-store");
    let page = made.text().await.unwrap();
    let script_token =
        page.split("<pre id=\"new-token\">").nth(1).and_then(|r| r.split('<').next()).unwrap().to_string();
    assert_eq!(api(&control_plane, reqwest::Method::GET, "/api/v1/whoami", &script_token).await.1["username"], "alice");

    // The new forms want the session's CSRF token like every other.
    for (path, body) in
        [("/tokens", "name=x&days=7".to_string()), ("/workspaces", "agent=a1&name=x&image=busybox".into())]
    {
        let forged = http()
            .post(format!("{}{path}", control_plane.url))
            .header("origin", &control_plane.url)
            .header("cookie", &cookie)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("{body}&csrf=guess"))
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status(), StatusCode::FORBIDDEN, "{path} without the session's CSRF token");
    }

    control_plane.cli(&["users", "disable", "alice"]);
    let home = http().get(format!("{}/", control_plane.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(home.status(), StatusCode::SEE_OTHER, "her session ended at once");
    assert!(home.headers()["location"].to_str().unwrap().starts_with("/sign-in"));
    for token in [&alice, &script_token] {
        let (status, _) = api(&control_plane, reqwest::Method::GET, "/api/v1/workspaces", token).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "her tokens are refused while she is disabled");
    }
    let again = sign_in_status(&control_plane, &alice).await;
    assert_eq!(again, StatusCode::UNAUTHORIZED, "and she cannot sign in again");

    control_plane.cli(&["users", "enable", "alice"]);
    assert_eq!(api(&control_plane, reqwest::Method::GET, "/api/v1/workspaces", &alice).await.0, StatusCode::OK);
    control_plane.cli(&["users", "delete", "alice"]);
    assert_eq!(
        api(&control_plane, reqwest::Method::GET, "/api/v1/workspaces", &script_token).await.0,
        StatusCode::UNAUTHORIZED,
        "a deleted user's token is refused"
    );
    // Her workspace stays, the admins'; a new user of her name does not get it back.
    let kept: Value =
        serde_json::from_str(&control_plane.cli(&["workspaces", "--agent", "a1", "get", "ide", "-o", "json"])).unwrap();
    assert_eq!(kept["name"], "ide");
    let impostor = create_user(&control_plane, "alice", &[]);
    let (status, _) = api(&control_plane, reqwest::Method::GET, "/api/v1/agents/a1/workspaces/ide", &impostor).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "a workspace is keyed by its user, not by a name");

    let trail: Value = serde_json::from_str(&control_plane.cli(&["audit", "--limit", "200", "-o", "json"])).unwrap();
    let refused = trail.as_array().unwrap().iter().any(|e| e["action"] == "sign-in" && e["outcome"] == "refused");
    assert!(refused, "the failed sign-in is on the trail: {trail}");
    let api_refused =
        trail.as_array().unwrap().iter().any(|e| e["action"] == "api.authenticate" && e["outcome"] == "refused");
    assert!(api_refused, "so is a token the API refused: {trail}");
    for action in ["user.disable", "user.enable", "user.delete", "token.create", "sign-in"] {
        assert!(trail.as_array().unwrap().iter().any(|e| e["action"] == action), "{action} in {trail}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_bounded_revocable_and_never_more_than_their_user() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &[]);
    control_plane.cli(&["agents", "register", "a1"]);
    // A workspace made for "carol" before she was a user: hers once an admin creates her.
    control_plane.cli(&["workspaces", "--agent", "a1", "create", "old", "--image", "busybox", "--owner", "carol"]);
    control_plane.cli(&["workspaces", "--agent", "a1", "create", "orphaned", "--image", "busybox", "--owner", "dave"]);
    let created: Value = serde_json::from_str(&control_plane.cli(&["users", "create", "carol", "-o", "json"])).unwrap();
    assert_eq!(created["claimed_workspaces"], 1);
    let carol = created["token"].as_str().unwrap().to_string();
    let mine = json_of(&cli_as(&control_plane, &carol, &["workspaces", "list", "-o", "json"]));
    assert_eq!(mine.as_array().map(|w| w.len()), Some(1), "carol has her old workspace, not dave's: {mine}");

    for (days, expected) in [("0", false), ("367", false), ("366", true)] {
        let made = cli_as(&control_plane, &carol, &["tokens", "create", "t", "--days", days]);
        assert_eq!(made.status.success(), expected, "{days} days: {}", String::from_utf8_lossy(&made.stderr));
    }
    let made = json_of(&cli_as(&control_plane, &carol, &["tokens", "create", "ci", "-o", "json"]));
    let (secret, id) = (made["token"].as_str().unwrap(), made["details"]["id"].as_str().unwrap());
    let listed = json_of(&cli_as(&control_plane, &carol, &["tokens", "list", "-o", "json"]));
    assert!(!listed.to_string().contains(secret), "a list never shows a secret");
    assert_eq!(api(&control_plane, reqwest::Method::GET, "/api/v1/workspaces", secret).await.0, StatusCode::OK);
    // The token file form of the CLI.
    let file = dir.path().join("token");
    std::fs::write(&file, secret).unwrap();
    let by_file = std::process::Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(["whoami", "--token-file", file.to_str().unwrap(), "--server", &control_plane.url])
        .env_remove("WSYNC_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&by_file.stdout).trim(), "carol (user)");

    // What a token makes cannot outlive it: a session it opens, or a token it makes.
    let short = json_of(&cli_as(&control_plane, &carol, &["tokens", "create", "short", "--days", "1", "-o", "json"]));
    let short_secret = short["token"].as_str().unwrap().to_string();
    let longer =
        json_of(&cli_as(&control_plane, &short_secret, &["tokens", "create", "longer", "--days", "366", "-o", "json"]));
    assert_eq!(longer["details"]["expires_at"], short["details"]["expires_at"], "capped at the token it was made with");
    let (cookie, _) = super::people::sign_in_as(&control_plane, &short_secret).await;
    json_of(&cli_as(
        &control_plane,
        &carol,
        &["tokens", "revoke", short["details"]["id"].as_str().unwrap(), "-o", "json"],
    ));
    let home = http().get(format!("{}/", control_plane.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(home.status(), StatusCode::SEE_OTHER, "the session the revoked token opened ended with it");

    // Revoked by its owner: refused at once. Another user cannot revoke it.
    let eve = create_user(&control_plane, "eve", &[]);
    assert!(!cli_as(&control_plane, &eve, &["tokens", "revoke", id]).status.success());
    json_of(&cli_as(&control_plane, &carol, &["tokens", "revoke", id, "-o", "json"]));
    assert_eq!(
        api(&control_plane, reqwest::Method::GET, "/api/v1/workspaces", secret).await.0,
        StatusCode::UNAUTHORIZED
    );
    // A user's token does not make a user, nor act for another.
    let (status, _) = api(&control_plane, reqwest::Method::POST, "/api/v1/users", &carol).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let for_eve = http()
        .post(format!("{}/api/v1/agents/a1/workspaces", control_plane.url))
        .bearer_auth(&carol)
        .json(&serde_json::json!({ "name": "sneaky", "image": "busybox", "owner": "eve" }))
        .send()
        .await
        .unwrap();
    assert_eq!(for_eve.status(), StatusCode::BAD_REQUEST, "only an admin creates for someone else");

    // Names a user may not have, and an argument that tries to leave its path segment.
    for name in ["admin-token", "Alice", "-x", "a/b"] {
        let refused = control_plane.try_cli(&["users", "create", name]);
        assert!(!refused.status.success(), "{name:?} is not a username");
    }
    let escape = control_plane.try_cli(&["users", "disable", "../agents/a1/revoke?"]);
    assert!(!escape.status.success());
    let trail: Value = serde_json::from_str(&control_plane.cli(&["audit", "--agent", "a1", "-o", "json"])).unwrap();
    assert!(trail.as_array().unwrap().iter().all(|e| e["action"] != "agent.revoke"), "nothing was revoked: {trail}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_per_user_quota_counts_by_the_user() {
    let dir = tempfile::tempdir().unwrap();
    let control_plane = ControlPlaneProcess::start(&sqlite(&dir), dir.path().join("cp.log"), &[]);
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "workspaces_per_user_quota: 1\n").unwrap();
    control_plane.cli(&["agents", "register", "a1", "--config", config.to_str().unwrap()]);
    let (alice, bob) = (create_user(&control_plane, "alice", &[]), create_user(&control_plane, "bob", &[]));
    let create = |token: &str, name: &str| {
        cli_as(&control_plane, token, &["workspaces", "--agent", "a1", "create", name, "--image", "busybox"])
    };
    assert!(create(&alice, "one").status.success());
    let second = create(&alice, "two");
    assert!(!second.status.success());
    assert!(String::from_utf8_lossy(&second.stderr).contains("per user quota of '1'"));
    assert!(create(&bob, "three").status.success(), "bob has his own quota");
}

/// Sign in on the page with a token; the session cookie and its CSRF token.
pub async fn sign_in_as(control_plane: &ControlPlaneProcess, token: &str) -> (String, String) {
    let answer = super::post_sign_in(control_plane, token).await;
    assert_eq!(answer.status(), StatusCode::SEE_OTHER);
    let cookie = answer.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let home = http().get(format!("{}/", control_plane.url)).header("cookie", &cookie).send().await.unwrap();
    let html = home.text().await.unwrap();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|r| r.split('"').next()).expect("a CSRF token");
    (cookie, csrf.to_string())
}

async fn sign_in_status(control_plane: &ControlPlaneProcess, token: &str) -> StatusCode {
    super::post_sign_in(control_plane, token).await.status()
}
