use super::*;

fn user(id: &str, role: Role) -> Caller {
    Caller::User(UserRef { id: id.into(), username: format!("name-{id}"), role, token: None })
}

fn owned_by(owner_id: Option<&str>) -> Option<&str> {
    owner_id
}

#[test]
fn a_user_sees_their_own_workspaces_and_nobody_elses() {
    let alice = user("u1", Role::User);
    assert!(alice.may_see(owned_by(Some("u1"))));
    assert!(!alice.may_see(owned_by(Some("u2"))));
    assert!(!alice.may_see(owned_by(None)), "an unmatched owner is the admins' alone");
    assert_eq!(alice.listing_scope(), Some("u1"));
}

#[test]
fn admins_see_every_workspace() {
    for admin in [Caller::AdminToken, user("u9", Role::Admin)] {
        assert!(admin.may_see(owned_by(Some("u1"))));
        assert!(admin.may_see(owned_by(None)));
        assert_eq!(admin.listing_scope(), None);
    }
    let token = TokenRef { id: "t".into(), expires_at: 100 };
    let with_token = UserRef { id: "u".into(), username: "u".into(), role: Role::User, token: Some(token) };
    assert_eq!(with_token.bounded(500), 100, "what a token makes ends by the token's end");
    assert_eq!(UserRef { token: None, ..with_token }.bounded(500), 500);
    assert_eq!(Caller::AdminToken.name(), ADMIN_TOKEN_ACTOR);
}

#[test]
fn the_admin_group_makes_an_admin_and_nothing_else_does() {
    let groups = vec!["dev".to_string(), "wsync-admins".to_string()];
    assert_eq!(Role::from_groups(&groups, Some("wsync-admins")), Role::Admin);
    assert_eq!(Role::from_groups(&groups, Some("ops")), Role::User);
    assert_eq!(Role::from_groups(&groups, None), Role::User, "no admin group: nobody is made admin");
    assert_eq!(Role::from_groups(&[], Some("wsync-admins")), Role::User);
}

#[test]
fn a_username_comes_from_the_claims_in_order_and_is_always_valid() {
    assert_eq!(username_from_claims(Some("Alice.B"), Some("x@y"), "sub"), "alice.b");
    assert_eq!(username_from_claims(None, Some("bob+tag@example.com"), "sub"), "bobtag");
    assert_eq!(username_from_claims(Some("--"), None, "248289761001"), "248289761001");
    assert_eq!(username_from_claims(Some("élan"), None, "!!"), "lan");
    assert_eq!(username_from_claims(Some("   "), Some("@"), "ü"), "user");
    assert_eq!(
        username_from_claims(Some("Admin-Token"), None, "s"),
        "admin-token-user",
        "never the admin token's name"
    );
    assert!(!is_username("admin-token") && !is_username("Alice") && is_username("alice"));
    let long = "a".repeat(500);
    assert!(
        is_username(&nth_username(&username_from_claims(Some(&long), None, "s"), 999)),
        "room for a suffix up to -999"
    );
}

#[test]
fn token_lifetimes_are_bounded() {
    assert_eq!(token_days(None), Ok(30));
    assert_eq!(token_days(Some(366)), Ok(366));
    assert!(token_days(Some(0)).is_err());
    assert!(token_days(Some(367)).is_err());
    assert!(is_token_name("ci on laptop"));
    assert!(!is_token_name(""));
    assert!(!is_token_name("a\u{1b}[2J"));
}

proptest::proptest! {
    #[test]
    fn any_claims_give_a_valid_username(preferred in proptest::option::of(".{0,80}"),
                                        email in proptest::option::of(".{0,80}"), subject in ".{0,80}") {
        let name = username_from_claims(preferred.as_deref(), email.as_deref(), &subject);
        proptest::prop_assert!(is_username(&name), "{name:?}");
    }
}
