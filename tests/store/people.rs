//! Users, tokens, sessions and the audit trail on both databases (#38): the same statements
//! answer the same on SQLite and PostgreSQL.

use wsync::control_plane::decisions::access::{Caller, Role};
use wsync::control_plane::model::{AuditEvent, NewWorkspace};
use wsync::control_plane::store::Store;
use wsync::control_plane::store::audit::AuditQuery;
use wsync::control_plane::store::people::ProviderClaims;

fn event(actor: &str, actor_id: Option<&str>, workspace: Option<&str>) -> AuditEvent {
    AuditEvent {
        id: String::new(),
        at: 0,
        actor_id: actor_id.map(String::from),
        actor: actor.into(),
        action: "workspace.stop".into(),
        outcome: "ok".into(),
        agent_id: Some("p1".into()),
        workspace: workspace.map(String::from),
        client: "127.0.0.1".into(),
        detail: "é".repeat(400),
    }
}

pub async fn people_on_both_databases(store: &Store) {
    store.create_agent("p1", &[]).await.unwrap();
    // A provider's user: created once, kept by issuer and subject, a free name found.
    let claims = |subject: &'static str, role| ProviderClaims {
        issuer: "https://idp.example",
        subject,
        username: "pat",
        email: Some("pat@example.com"),
        name: None,
        role,
    };
    let (pat, _, _) = store.create_local_user("pat", Role::User, 30).await.unwrap();
    let first = store.sign_in_from_provider(&claims("s-1", Role::User)).await.unwrap();
    assert_eq!(first.username, "pat-2", "the local pat keeps the name");
    let again = store.sign_in_from_provider(&claims("s-1", Role::Admin)).await.unwrap();
    assert_eq!((again.id.as_str(), again.role), (first.id.as_str(), Role::Admin), "the same user, the role renewed");
    assert!(store.create_local_user("pat", Role::User, 30).await.is_err(), "a username is unique");

    // A provider's admin is an admin while their last sign-in through it is recent; past a
    // day, their tokens and sessions act as a user's until they sign in again.
    let (_, admin_secret) = store.create_api_token(&again.reference(), "ops", 30).await.unwrap();
    let role_now = store.user_by_api_token(&admin_secret).await.unwrap().map(|u| u.role);
    assert_eq!(role_now, Some(Role::Admin));
    let start = store.now();
    let later = store.clone().with_clock(wsync::control_plane::model::Clock::from_fn(move || start + 25 * 3_600_000));
    let role_later = later.user_by_api_token(&admin_secret).await.unwrap().map(|u| u.role);
    assert_eq!(role_later, Some(Role::User), "the provider's word on the admin role has gone stale");
    let (cookie, _) = later.open_session(60_000, Some(&again.reference())).await.unwrap();
    let session_role = later.session(&cookie).await.unwrap().and_then(|s| s.caller.user().map(|u| u.role));
    assert_eq!(session_role, Some(Role::User));

    // Tokens and sessions stop with their user.
    let (_, secret) = store.create_api_token(&pat.reference(), "ci", 1).await.unwrap();
    assert_eq!(store.user_by_api_token(&secret).await.unwrap().map(|u| u.username), Some("pat".into()));
    let (cookie, _) = store.open_session(60_000, Some(&pat.reference())).await.unwrap();
    assert!(matches!(store.session(&cookie).await.unwrap().map(|s| s.caller), Some(Caller::User(_))));
    store.set_user_disabled("pat", true).await.unwrap();
    assert!(store.user_by_api_token(&secret).await.unwrap().is_none());
    assert!(store.session(&cookie).await.unwrap().is_none());
    store.set_user_disabled("pat", false).await.unwrap();
    assert!(store.user_by_api_token(&secret).await.unwrap().is_some(), "enabled again, the token works");
    let (admin_cookie, _) = store.open_session(60_000, None).await.unwrap();
    assert!(store.delete_user("pat").await.unwrap());
    assert!(store.user_by_api_token(&secret).await.unwrap().is_none());
    assert_eq!(store.session(&admin_cookie).await.unwrap().map(|s| s.caller), Some(Caller::AdminToken));

    // A user's workspaces across agents, and theirs alone in an agent's list.
    let mine = NewWorkspace { owner_id: Some(first.id.clone()), ..NewWorkspace::new("mine", "busybox") };
    store.create_workspace("p1", &mine).await.unwrap();
    store.create_workspace("p1", &NewWorkspace::new("theirs", "busybox")).await.unwrap();
    let listed = store.workspaces_of(&first.id, ("", ""), 10).await.unwrap();
    assert_eq!(listed.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(), ["mine"]);
    assert_eq!(store.workspaces_page("p1", "", 10, Some(&first.id)).await.unwrap().len(), 1);
    assert_eq!(store.workspaces_page("p1", "", 10, None).await.unwrap().len(), 2);

    // The trail: newest first, filtered, paged, its details bounded.
    for n in 0..5 {
        let workspace = if n % 2 == 0 { Some("mine") } else { None };
        store.record(event("pat-2", Some(&first.id), workspace)).await.unwrap();
    }
    store.record(event("admin-token", None, Some("theirs"))).await.unwrap();
    let all = store.audit(&AuditQuery::default()).await.unwrap();
    assert_eq!(all.len(), 6);
    assert_eq!(all[0].actor, "admin-token", "newest first");
    assert!(all[0].detail.len() <= 512, "a detail is bounded: {}", all[0].detail.len());
    let own = AuditQuery { actor_id: Some(first.id.clone()), ..Default::default() };
    assert_eq!(store.audit(&own).await.unwrap().len(), 5);
    let page = AuditQuery { workspace: Some("mine".into()), limit: Some(2), ..Default::default() };
    let first_page = store.audit(&page).await.unwrap();
    let last = first_page.last().unwrap();
    let next = AuditQuery { before: Some(format!("{}:{}", last.at, last.id)), ..page };
    let second_page = store.audit(&next).await.unwrap();
    assert_eq!((first_page.len(), second_page.len()), (2, 1), "three entries on mine, two pages");
    assert!(second_page.iter().all(|e| !first_page.contains(e)));
    assert_eq!(store.prune(0).await.unwrap(), 6, "a zero retention prunes everything older than now");
}
