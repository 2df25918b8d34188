//! The server-rendered pages: sign-in, a user's workspaces, the agents, and one agent's workspaces. Every value is
//! escaped, every form carries the session's CSRF token, and no page has a script.

use super::validation::url_part;
use crate::control_plane::model::{ErrorRecord, Orphan, Workspace};
use std::fmt::Write;

pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

pub(super) fn ago(now: i64, at: Option<i64>) -> String {
    let Some(at) = at else { return "never".into() };
    let seconds = (now - at).max(0) / 1000;
    match seconds {
        0..=59 => format!("{seconds}s ago"),
        60..=3599 => format!("{}m ago", seconds / 60),
        _ => format!("{}h ago", seconds / 3600),
    }
}

/// The hidden field every state-changing form carries.
pub(super) fn csrf_field(csrf: &str) -> String {
    format!("<input type=\"hidden\" name=\"csrf\" value=\"{}\">", escape(csrf))
}

const STYLE: &str = "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;width:100%}\
th,td{text-align:left;padding:.3em .6em;border-bottom:1px solid #ddd;vertical-align:top}\
tr.details td{border-bottom:2px solid #999}.actions form{display:inline}\
.error{background:#fee;border:1px solid #c00;padding:.4em}.error pre{white-space:pre-wrap;margin:.3em 0}\
.stale{color:#666;font-style:italic;margin:0}header form{float:right}</style>";

pub(super) fn document(title: &str, refresh: bool, body: &str) -> String {
    let refresh = if refresh { "<meta http-equiv=\"refresh\" content=\"5\">" } else { "" };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>{refresh}{STYLE}</head>\
         <body>{body}</body></html>\n",
        escape(title)
    )
}

/// Who is signed in, and what the page offers them.
#[derive(Debug, Clone, Copy)]
pub struct Nav<'a> {
    pub csrf: &'a str,
    /// The username, or `admin-token`.
    pub who: &'a str,
    pub admin: bool,
}

/// The links every page carries, who is signed in, and the sign-out button.
pub fn header(nav: &Nav<'_>) -> String {
    let admin = if nav.admin { " · <a href=\"/users\">Users</a> · <a href=\"/audit\">Audit trail</a>" } else { "" };
    let audit = if nav.admin { "" } else { " · <a href=\"/audit\">My activity</a>" };
    format!(
        "<header><form method=\"post\" action=\"/sign-out\">{}<span>{}</span> <button type=\"submit\">Sign out</button></form>\
         <nav><a href=\"/\">My workspaces</a> · <a href=\"/tokens\">API tokens</a>{audit}{admin}</nav></header>",
        csrf_field(nav.csrf),
        escape(nav.who)
    )
}

/// The sign-in form; `next` is where it goes after. With an identity provider, its button
/// comes first; the token form stays, for users an admin created and the break-glass token.
pub fn sign_in_page(next: &str, problem: Option<&str>, provider: bool) -> String {
    let problem = problem.map(|p| format!("<p class=\"error\">{}</p>", escape(p))).unwrap_or_default();
    let provider = if provider {
        // A link, not a form: the page's CSP (`form-action 'self'`) would stop a form whose
        // answer redirects to the provider's site.
        format!(
            "<p><a id=\"oidc\" href=\"/sign-in/oidc?next={}\">Sign in with your identity provider</a></p><p>Or:</p>",
            url_part(next)
        )
    } else {
        String::new()
    };
    document(
        "wsync: sign in",
        false,
        &format!(
            "<h1>Sign in</h1>{problem}{provider}<p>Paste your token: one an admin gave you (<code>wsync users create</code>), \
             one of your API tokens, or the admin token the control plane printed on its first start.</p>\
             <form method=\"post\" action=\"/sign-in\"><input type=\"hidden\" name=\"next\" value=\"{}\">\
             <input type=\"password\" name=\"token\" autocomplete=\"current-password\" required autofocus>\
             <button type=\"submit\">Sign in</button></form>",
            escape(next)
        ),
    )
}

/// Signed in through the identity provider: on to `next` from this page, not by a redirect.
/// The browser arrived here from the provider's site, and a redirect would carry on that
/// cross-site navigation, which sends no `SameSite=Strict` cookie: the new session's cookie
/// would be missing on the very next page. A navigation this page starts is same-site.
pub fn signed_in_page(next: &str) -> String {
    let next = escape(next);
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>wsync: signed in</title>\
         <meta http-equiv=\"refresh\" content=\"0;url={next}\">{STYLE}</head><body><p>Signed in. \
         <a href=\"{next}\">Continue</a></p></body></html>\n"
    )
}

/// The home page: a user's own workspaces across agents, the form to create one, and for
/// admins every agent.
pub struct HomeView<'a> {
    pub nav: Nav<'a>,
    /// None for the admin token, which owns no workspaces.
    pub mine: Option<&'a [Workspace]>,
    /// Where the next page of them starts (`agent/name`), when more follow.
    pub more: Option<String>,
    pub agents: &'a [String],
    pub problem: Option<&'a str>,
}

pub fn home_page(view: &HomeView<'_>, now: i64) -> String {
    let problem = view.problem.map(|p| format!("<p class=\"error\">{}</p>", escape(p))).unwrap_or_default();
    let mut body = format!("{}{problem}", header(&view.nav));
    if let Some(mine) = view.mine {
        let mut rows = String::new();
        for w in mine {
            let first = format!("{} / {}", escape(&w.agent_id), escape(&w.name));
            rows.push_str(&workspace_rows(w, &first, view.nav.csrf, "/", &[], now));
        }
        if mine.is_empty() {
            rows.push_str("<tr><td colspan=\"6\">No workspaces yet: create one below.</td></tr>");
        }
        let more = view
            .more
            .as_deref()
            .map(|after| format!("<p><a href=\"/?after={}\">Next page</a></p>", url_part(after)))
            .unwrap_or_default();
        let _ = write!(
            body,
            "<h1>My workspaces</h1><table><thead><tr><th>Agent / workspace</th><th>Namespace</th><th>Desired</th>\
             <th>Actual</th><th>Last report</th><th></th></tr></thead><tbody>\n{rows}</tbody></table>{more}{}",
            create_form(view.agents, view.nav.csrf)
        );
    }
    if view.nav.admin {
        let mut items = String::new();
        for agent in view.agents {
            let _ = write!(items, "<li><a href=\"/agents/{}\">{}</a></li>", url_part(agent), escape(agent));
        }
        if view.agents.is_empty() {
            items.push_str("<li>No agents yet. Register one with <code>wsync agents register</code>.</li>");
        }
        let _ = write!(body, "<h2>Agents</h2><ul>{items}</ul>");
    }
    // No refresh: it would wipe what is typed in the create form.
    document("wsync: my workspaces", false, &body)
}

/// The form that creates a workspace: agent, name, and an image (with resources) or a devfile,
/// pasted or uploaded; environment.
fn create_form(agents: &[String], csrf: &str) -> String {
    if agents.is_empty() {
        return "<p>No agent is registered yet: an admin registers one first.</p>".into();
    }
    let options: String = agents.iter().map(|a| format!("<option value=\"{0}\">{0}</option>", escape(a))).collect();
    format!(
        "<h2>Create a workspace</h2><form method=\"post\" action=\"/workspaces\" class=\"create\" \
         enctype=\"multipart/form-data\">{}\
         <label>Agent <select name=\"agent\">{options}</select></label> \
         <label>Name <input name=\"name\" required pattern=\"[a-z0-9]([-a-z0-9]*[a-z0-9])?\" maxlength=\"40\"></label><br>\
         <label>Image <input name=\"image\"></label> \
         <label>CPU <input name=\"cpu\" placeholder=\"500m\" size=\"6\"></label> \
         <label>Memory <input name=\"memory\" placeholder=\"1Gi\" size=\"6\"></label><br>\
         or a devfile (2.2.0): <label>upload <input type=\"file\" name=\"devfile_file\" accept=\".yaml,.yml,.json\"></label> \
         <label>or paste<br><textarea name=\"devfile\" rows=\"6\" cols=\"60\" placeholder=\"schemaVersion: 2.2.0\"></textarea></label><br>\
         <label>Environment, one <code>KEY=VALUE</code> a line<br><textarea name=\"env\" rows=\"3\" cols=\"60\"></textarea></label><br>\
         <button type=\"submit\">Create</button></form>",
        csrf_field(csrf)
    )
}

/// The orphans section: workspaces the agent reports that this control plane does not know.
fn orphans_section(agent_url: &str, orphans: &[Orphan], now: i64, csrf: &str) -> String {
    if orphans.is_empty() {
        return String::new();
    }
    let csrf = csrf_field(csrf);
    let mut rows = String::new();
    for o in orphans {
        let (namespace, name) = (escape(&o.namespace), escape(&o.name));
        let target = format!("/agents/{agent_url}/orphans/{}/{}", url_part(&o.namespace), url_part(&o.name));
        let _ = writeln!(
            rows,
            "<tr><td>{name}</td><td>{namespace}</td><td>{}</td><td>{}</td><td class=\"actions\">\
             <form method=\"post\" action=\"{target}/adopt\">{csrf}<input name=\"image\" placeholder=\"image it runs\" required>\
             <button type=\"submit\">Adopt</button></form>\
             <form method=\"post\" action=\"{target}/terminate\">{csrf}<button type=\"submit\">Terminate</button></form></td></tr>",
            ago(now, Some(o.first_seen)),
            ago(now, Some(o.last_seen)),
        );
    }
    format!(
        "<h2>Orphans</h2><p>The agent reports these workspaces, but this control plane does not know them \
         (a database restored from an old backup?). They keep running, get no config, and go only when you say.</p>\
         <table><thead><tr><th>Workspace</th><th>Namespace</th><th>First seen</th><th>Last seen</th><th></th></tr></thead>\
         <tbody>\n{rows}</tbody></table>"
    )
}

/// What one agent's page shows: a page of its workspaces, and its orphans.
pub struct AgentView<'a> {
    pub agent: &'a str,
    pub workspaces: &'a [Workspace],
    /// The last name shown, when more workspaces follow.
    pub more: Option<&'a str>,
    pub orphans: &'a [Orphan],
    pub nav: Nav<'a>,
    /// The agent's workspace settings, as YAML: what new workspaces get.
    pub settings: &'a str,
    /// The shown workspaces' recorded errors, newest first within each.
    pub history: &'a [ErrorRecord],
}

/// A workspace's recorded errors other than the one it has now, newest first.
fn earlier_errors(history: &[ErrorRecord], workspace: &Workspace, now: i64) -> String {
    let current = workspace.error.as_ref().map(|e| e.first_seen);
    let earlier: Vec<String> = history
        .iter()
        .filter(|r| r.name == workspace.name && Some(r.first_seen) != current)
        .map(|r| {
            format!(
                "<li>{}: <strong>{} error</strong> {}</li>",
                ago(now, Some(r.first_seen)),
                escape(&r.error_type),
                escape(&r.message)
            )
        })
        .collect();
    if earlier.is_empty() {
        return String::new();
    }
    format!(
        "<details class=\"history\"><summary>Earlier errors ({})</summary><ul>{}</ul></details>",
        earlier.len(),
        earlier.join("")
    )
}

/// A workspace's error, with what to do about it and whether it predates the desired state.
fn error_box(w: &Workspace, now: i64) -> String {
    let Some(e) = &w.error else { return String::new() };
    let stale = if e.desired_state != w.desired_state {
        format!(
            "<p class=\"stale\">This error is from before the desired state changed from {} to {}.</p>",
            escape(e.desired_state.as_str()),
            escape(w.desired_state.as_str())
        )
    } else {
        String::new()
    };
    let hint = e.hint().map(|h| format!("<p class=\"hint\">What to do: {}</p>", escape(h))).unwrap_or_default();
    format!(
        "<div class=\"error\"><strong>{} error</strong> (first seen {}, last seen {})<pre>{}</pre>{hint}{stale}</div>",
        escape(&e.error_type),
        ago(now, Some(e.first_seen)),
        ago(now, Some(e.last_seen)),
        escape(&e.message)
    )
}

/// A workspace's two rows: its state and buttons (each form back to `back`), then its errors.
/// `first` is its first cell: its name, or its agent and name.
fn workspace_rows(w: &Workspace, first: &str, csrf: &str, back: &str, history: &[ErrorRecord], now: i64) -> String {
    let (agent_url, name_url) = (url_part(&w.agent_id), url_part(&w.name));
    let hidden = format!("{}<input type=\"hidden\" name=\"next\" value=\"{}\">", csrf_field(csrf), escape(back));
    let mut buttons = String::new();
    for (action, label) in [("start", "Start"), ("stop", "Stop"), ("restart", "Restart"), ("terminate", "Terminate")] {
        let _ = write!(
            buttons,
            "<form method=\"post\" action=\"/agents/{agent_url}/workspaces/{name_url}/{action}\">{hidden}<button type=\"submit\">{label}</button></form>"
        );
    }
    format!(
        "<tr><td>{first}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"actions\">{buttons}</td></tr>\n\
         <tr class=\"details\"><td colspan=\"6\">{}{}{}</td></tr>\n",
        escape(&w.namespace),
        escape(w.desired_state.as_str()),
        escape(w.actual_state.as_str()),
        ago(now, w.last_reported_at),
        endpoints(w, now),
        error_box(w, now),
        earlier_errors(history, w, now),
    )
}

/// Where the workspace opens: a link for each web port (on a host of its own, #39), the SSH
/// command, and when it was last used.
fn endpoints(w: &Workspace, now: i64) -> String {
    let mut line = String::new();
    for endpoint in &w.endpoints {
        match &endpoint.url {
            Some(url) => {
                let _ =
                    write!(line, "<a href=\"{}\" rel=\"noopener\">Open {}</a> · ", escape(url), escape(&endpoint.name));
            }
            None if endpoint.name == "ssh" => {
                let command = format!("wsync workspaces --agent {} ssh {}", w.agent_id, w.name);
                let _ = write!(line, "SSH: <code>{}</code> · ", escape(&command));
            }
            None => {
                let command =
                    format!("wsync workspaces --agent {} port-forward {} {}", w.agent_id, w.name, endpoint.port);
                let _ = write!(line, "{}: <code>{}</code> · ", escape(&endpoint.name), escape(&command));
            }
        }
    }
    let devfile = format!("/agents/{}/workspaces/{}/devfile", url_part(&w.agent_id), url_part(&w.name));
    let _ = write!(line, "<a href=\"{devfile}\">Devfile</a> · ");
    format!("<p class=\"endpoints\">{line}last used {}</p>", ago(now, w.last_activity_at))
}

/// A workspace's devfile as stored, every character escaped, below its components.
pub fn devfile_page(nav: &Nav<'_>, w: &Workspace, devfile: &str) -> String {
    let mut components = String::new();
    for c in &w.components {
        let _ = write!(
            components,
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&c.name),
            escape(&c.kind),
            escape(&c.detail)
        );
    }
    let table = match components.is_empty() {
        true => "<p>Created from an image: this is the devfile that image stands for.</p>".to_string(),
        false => format!(
            "<table><thead><tr><th>Component</th><th>Kind</th><th>Image or size</th></tr></thead><tbody>{components}</tbody></table>"
        ),
    };
    let body = format!(
        "{}<h1>Devfile of {} / {}</h1>{table}<pre id=\"devfile\">{}</pre><p><a href=\"/\">Back</a></p>",
        header(nav),
        escape(&w.agent_id),
        escape(&w.name),
        escape(devfile)
    );
    document(&format!("wsync: devfile of {}", w.name), false, &body)
}

pub fn agent_page(view: &AgentView<'_>, now: i64) -> String {
    let (agent, workspaces) = (view.agent, view.workspaces);
    let (agent_html, agent_url) = (escape(agent), url_part(agent));
    let back = format!("/agents/{agent_url}");
    let mut rows = String::new();
    for w in workspaces {
        rows.push_str(&workspace_rows(w, &escape(&w.name), view.nav.csrf, &back, view.history, now));
    }
    if workspaces.is_empty() {
        rows.push_str(
            "<tr><td colspan=\"6\">No workspaces yet. Create one with <code>wsync workspaces create</code>.</td></tr>",
        );
    }
    let more = view
        .more
        .map(|last| format!("<p><a href=\"/agents/{agent_url}?after={}\">Next page</a></p>", url_part(last)))
        .unwrap_or_default();
    let body = format!(
        "{}<h1>Workspaces of agent {agent_html}</h1>\
         <table><thead><tr><th>Workspace</th><th>Namespace</th><th>Desired</th><th>Actual</th><th>Last report</th><th></th></tr></thead>\
         <tbody>\n{rows}</tbody></table>{more}\
         <details><summary>Workspace settings (GitLab's; new workspaces get them, existing ones keep theirs)</summary>\
         <pre>{}</pre></details>{}",
        header(&view.nav),
        escape(view.settings),
        orphans_section(&agent_url, view.orphans, now, view.nav.csrf)
    );
    document(&format!("wsync: agent {agent}"), true, &body)
}

#[cfg(test)]
mod tests;
