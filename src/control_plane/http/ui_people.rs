//! The pages about people: one's API tokens, the users (admins), and the audit trail. As
//! every page: values escaped, forms with the session's CSRF token, no script.

use super::ui::{Nav, ago, csrf_field, document, escape, header};
use super::validation::url_part;
use crate::control_plane::model::{ApiToken, AuditEvent, User};
use std::fmt::Write;

/// A user's API tokens, the form to make one, and a new token's secret, shown this once.
pub fn tokens_page(nav: &Nav<'_>, tokens: &[ApiToken], created: Option<(&str, &str)>, now: i64) -> String {
    let csrf = csrf_field(nav.csrf);
    let shown = created
        .map(|(name, secret)| {
            format!(
                "<div class=\"created\"><p>Your new token <strong>{}</strong>; copy it now, it is not shown again:</p>\
                 <pre id=\"new-token\">{}</pre><p>Give it to the CLI with <code>WSYNC_TOKEN</code> or <code>--token-file</code>.</p></div>",
                escape(name),
                escape(secret)
            )
        })
        .unwrap_or_default();
    let mut rows = String::new();
    for t in tokens {
        let state = match t.revoked_at {
            Some(at) => format!("revoked {}", ago(now, Some(at))),
            None if t.expires_at <= now => "expired".into(),
            None => format!("expires in {} days", (t.expires_at - now) / 86_400_000),
        };
        let revoke = if t.revoked_at.is_none() && t.expires_at > now {
            format!(
                "<form method=\"post\" action=\"/tokens/{}/revoke\">{csrf}<button type=\"submit\">Revoke</button></form>",
                url_part(&t.id)
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{state}</td><td class=\"actions\">{revoke}</td></tr>",
            escape(&t.name),
            ago(now, Some(t.created_at))
        );
    }
    let body = format!(
        "{}<h1>API tokens</h1>{shown}<table><thead><tr><th>Name</th><th>Created</th><th>State</th><th></th></tr></thead>\
         <tbody>\n{rows}</tbody></table><h2>New token</h2><form method=\"post\" action=\"/tokens\">{csrf}\
         <label>Name <input name=\"name\" required maxlength=\"100\"></label> \
         <label>Expires in <input name=\"days\" type=\"number\" min=\"1\" max=\"366\" value=\"30\"> days</label> \
         <button type=\"submit\">Create</button></form><p>A token acts as you, with your rights and no more.</p>",
        header(nav)
    );
    document("wsync: API tokens", false, &body)
}

/// Every user, with the buttons to disable or enable them.
pub fn users_page(nav: &Nav<'_>, users: &[User], now: i64) -> String {
    let csrf = csrf_field(nav.csrf);
    let mut rows = String::new();
    for u in users {
        let (state, action, label) = match u.disabled_at {
            Some(at) => (format!("disabled {}", ago(now, Some(at))), "enable", "Enable"),
            None => ("active".to_string(), "disable", "Disable"),
        };
        let _ = writeln!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{state}</td><td>{}</td><td class=\"actions\">\
             <form method=\"post\" action=\"/users/{}/{action}\">{csrf}<button type=\"submit\">{label}</button></form></td></tr>",
            escape(&u.username),
            escape(u.display_name.as_deref().unwrap_or("")),
            escape(u.email.as_deref().unwrap_or("")),
            escape(u.role.as_str()),
            escape(&u.issuer),
            ago(now, u.last_sign_in_at),
            url_part(&u.username),
        );
    }
    let body = format!(
        "{}<h1>Users</h1><table><thead><tr><th>Username</th><th>Name</th><th>Email</th><th>Role</th><th>Issuer</th>\
         <th>State</th><th>Last sign-in</th><th></th></tr></thead><tbody>\n{rows}</tbody></table>\
         <p>Create one with <code>wsync users create NAME</code>; it prints their first token once.</p>",
        header(nav)
    );
    document("wsync: users", false, &body)
}

/// The filters an audit page was asked with.
#[derive(Debug, Default)]
pub struct AuditFilters<'a> {
    pub user: &'a str,
    pub agent: &'a str,
    pub workspace: &'a str,
}

/// A page of the audit trail, newest first; `next` is the query of the page after.
pub fn audit_page(nav: &Nav<'_>, events: &[AuditEvent], filters: &AuditFilters<'_>, next: Option<String>) -> String {
    let mut rows = String::new();
    for e in events {
        let at = jiff::Timestamp::from_millisecond(e.at).map(|t| t.to_string()).unwrap_or_default();
        let target = match (&e.agent_id, &e.workspace) {
            (Some(agent), Some(ws)) => format!("{} / {}", escape(agent), escape(ws)),
            (Some(agent), None) => escape(agent),
            _ => String::new(),
        };
        let _ = writeln!(
            rows,
            "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{target}</td><td>{}</td><td>{}</td></tr>",
            escape(&e.outcome),
            escape(&at),
            escape(&e.actor),
            escape(&e.action),
            escape(&e.outcome),
            escape(&e.client),
            escape(&e.detail),
        );
    }
    if events.is_empty() {
        rows.push_str("<tr><td colspan=\"7\">Nothing recorded.</td></tr>");
    }
    let user_filter = if nav.admin {
        format!("<label>User <input name=\"user\" value=\"{}\"></label> ", escape(filters.user))
    } else {
        String::new()
    };
    let next = next.map(|query| format!("<p><a href=\"/audit?{query}\">Older</a></p>")).unwrap_or_default();
    let body = format!(
        "{}<h1>{}</h1><form method=\"get\" action=\"/audit\">{user_filter}\
         <label>Agent <input name=\"agent\" value=\"{}\"></label> <label>Workspace <input name=\"workspace\" value=\"{}\"></label> \
         <button type=\"submit\">Filter</button></form><table><thead><tr><th>When (UTC)</th><th>Who</th><th>What</th>\
         <th>Outcome</th><th>Agent / workspace</th><th>From</th><th>Detail</th></tr></thead><tbody>\n{rows}</tbody></table>{next}",
        header(nav),
        if nav.admin { "Audit trail" } else { "My activity" },
        escape(filters.agent),
        escape(filters.workspace),
    );
    document("wsync: audit trail", false, &body)
}
