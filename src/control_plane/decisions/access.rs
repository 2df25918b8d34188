//! Who may do what, free of I/O: the two roles, who is asking, whose a workspace is, and the
//! name a user signed in from an identity provider gets. Every answer about another user's
//! workspace is "not found", never "forbidden": a name must not say that it exists.

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Everything: agents, their settings, orphans, users, the audit trail, every workspace.
    Admin,
    /// Their own workspaces, their own tokens, their own audit entries.
    User,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::User => "user",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "admin" => Some(Role::Admin),
            "user" => Some(Role::User),
            _ => None,
        }
    }

    /// An identity provider's user: an admin when the groups claim holds the admin group.
    /// Decided again at every sign-in, so that leaving the group takes the role away.
    pub fn from_groups(groups: &[String], admin_group: Option<&str>) -> Self {
        match admin_group {
            Some(admin) if groups.iter().any(|g| g == admin) => Role::Admin,
            _ => Role::User,
        }
    }
}

/// A user as a request names them: by a session or a personal token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRef {
    pub id: String,
    pub username: String,
    pub role: Role,
    /// The personal token the request (or its session) came with: what it makes may not
    /// outlive it.
    pub token: Option<TokenRef>,
}

/// A personal token, as the requests it signs carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRef {
    pub id: String,
    pub expires_at: i64,
}

impl UserRef {
    /// When something this user makes now must end by: its own end, or the token's.
    pub fn bounded(&self, expires_at: i64) -> i64 {
        self.token.as_ref().map_or(expires_at, |token| expires_at.min(token.expires_at))
    }
}

/// Who is asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The admin token: the break-glass sign-in, and automation.
    AdminToken,
    User(UserRef),
}

/// How the audit trail names the admin token's holder.
pub const ADMIN_TOKEN_ACTOR: &str = "admin-token";

impl Caller {
    pub fn is_admin(&self) -> bool {
        match self {
            Caller::AdminToken => true,
            Caller::User(user) => user.role == Role::Admin,
        }
    }

    pub fn user(&self) -> Option<&UserRef> {
        match self {
            Caller::AdminToken => None,
            Caller::User(user) => Some(user),
        }
    }

    pub fn user_id(&self) -> Option<&str> {
        self.user().map(|u| u.id.as_str())
    }

    /// The name the audit trail and the page show.
    pub fn name(&self) -> &str {
        self.user().map_or(ADMIN_TOKEN_ACTOR, |u| u.username.as_str())
    }

    /// Whether this caller may see and act on a workspace owned by `owner_id`: admins every
    /// one, a user their own. A workspace whose owner matched no user is the admins' alone.
    pub fn may_see(&self, owner_id: Option<&str>) -> bool {
        self.is_admin() || (owner_id.is_some() && owner_id == self.user_id())
    }

    /// Whose workspaces a listing shows: None for all (an admin), else this user's id.
    pub fn listing_scope(&self) -> Option<&str> {
        // A caller with no user id matches nothing: "" would mean everyone's.
        if self.is_admin() { None } else { self.user_id().or(Some("-")) }
    }
}

/// The longest username wsync gives or takes.
pub const MAX_USERNAME: usize = 64;

/// A username: lowercase letters, digits, '_', '.' and '-', starting with a letter or digit,
/// and not the admin token's name. It names a workspace's owner and the audit trail's actor,
/// never the key of a user.
pub fn is_username(s: &str) -> bool {
    (1..=MAX_USERNAME).contains(&s.len())
        && s != ADMIN_TOKEN_ACTOR
        && s.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-'))
}

/// The username an identity provider's user is first given, from the claims it sent:
/// `preferred_username`, else the email's local part, else the subject; lowercased, with
/// anything outside a username's characters dropped. The store adds `-2`, `-3`, … when taken.
pub fn username_from_claims(preferred_username: Option<&str>, email: Option<&str>, subject: &str) -> String {
    let email_local = email.and_then(|e| e.split('@').next());
    for candidate in [preferred_username, email_local, Some(subject)].into_iter().flatten() {
        let cleaned: String = candidate
            .chars()
            .map(|c| c.to_ascii_lowercase())
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
            .skip_while(|c| !c.is_ascii_alphanumeric())
            .take(MAX_USERNAME.saturating_sub(4))
            .collect();
        if cleaned == ADMIN_TOKEN_ACTOR {
            return format!("{cleaned}-user");
        }
        if is_username(&cleaned) {
            return cleaned;
        }
    }
    "user".into()
}

/// The `n`th name to try for `base` when it is taken: `base`, `base-2`, `base-3`, …
pub fn nth_username(base: &str, n: u32) -> String {
    if n <= 1 { base.to_string() } else { format!("{base}-{n}") }
}

/// How long an identity provider's word that a user is an admin lasts after their last
/// sign-in through it: past it, their sessions and tokens act as a user's until they sign in
/// again, so that leaving the admin group at the provider takes effect within a day.
pub const PROVIDER_ROLE_FRESH_MS: i64 = 24 * 3_600_000;

/// Live personal tokens one user may have.
pub const MAX_LIVE_TOKENS: i64 = 50;

/// What a personal API token may live for.
pub const DEFAULT_TOKEN_DAYS: u32 = 30;
pub const MAX_TOKEN_DAYS: u32 = 366;

/// A token's expiry in days, as asked: 1 day to a year, 30 by default.
pub fn token_days(asked: Option<u32>) -> Result<u32, String> {
    match asked.unwrap_or(DEFAULT_TOKEN_DAYS) {
        days @ 1..=MAX_TOKEN_DAYS => Ok(days),
        days => Err(format!("a token lives 1 to {MAX_TOKEN_DAYS} days, not {days}")),
    }
}

/// A token's name: shown back in its list, 1 to 100 printable characters.
pub fn is_token_name(s: &str) -> bool {
    (1..=100).contains(&s.chars().count()) && !s.chars().any(char::is_control)
}

#[cfg(test)]
mod tests;
