//! How the CLI shows what the control plane answered: a table of workspaces, each error in
//! full below its row.

use crate::control_plane::model::Workspace;
use crate::terminal::{printable, table_lines};

/// A human-readable table, one workspace a row; errors in full below their row.
pub fn table(workspaces: &[Workspace], now: i64) -> String {
    let rows: Vec<Vec<String>> = workspaces
        .iter()
        .map(|w| {
            let report = match w.last_reported_at {
                Some(at) => format!("{}s ago", now.saturating_sub(at).max(0) / 1000),
                None => "never".into(),
            };
            let (desired, actual) = (w.desired_state.as_str().into(), w.actual_state.as_str().into());
            vec![w.name.clone(), w.namespace.clone(), desired, actual, report]
        })
        .collect();
    let mut lines = table_lines(&["NAME", "NAMESPACE", "DESIRED", "ACTUAL", "LAST REPORT"], &rows).into_iter();
    let mut out = lines.next().unwrap_or_default();
    for (line, workspace) in lines.zip(workspaces) {
        out += &line;
        if let Some(error) = &workspace.error {
            out += &format!("  └ {} error: {}\n", printable(&error.error_type), printable(&error.message));
            if let Some(hint) = error.hint() {
                out += &format!("    what to do: {hint}\n");
            }
        }
    }
    out
}

/// One workspace's devfile components and its declared ports, below its row (`get`).
pub fn details(workspace: &Workspace) -> String {
    let mut out = String::new();
    if !workspace.components.is_empty() {
        let rows: Vec<Vec<String>> =
            workspace.components.iter().map(|c| vec![c.name.clone(), c.kind.clone(), c.detail.clone()]).collect();
        out += "\n";
        out += &crate::terminal::table(&["COMPONENT", "KIND", "IMAGE OR SIZE"], &rows);
    }
    if !workspace.endpoints.is_empty() {
        let rows: Vec<Vec<String>> = workspace
            .endpoints
            .iter()
            .map(|e| {
                let url = e.url.clone().unwrap_or_else(|| "(not a web page: port-forward or ssh)".into());
                vec![e.name.clone(), e.port.to_string(), url]
            })
            .collect();
        out += "\n";
        out += &crate::terminal::table(&["ENDPOINT", "PORT", "URL"], &rows);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{ActualState, DesiredState};

    #[test]
    fn what_an_agent_sent_cannot_drive_the_terminal() {
        let workspace = Workspace {
            agent_id: "a".into(),
            name: "ws\u{1b}]0;owned\u{7}".into(),
            namespace: "ns".into(),
            image: "i".into(),
            cpu: None,
            memory: None,
            env: Default::default(),
            desired_state: DesiredState::Running,
            actual_state: ActualState::Error,
            desired_state_updated_at: 0,
            actual_state_updated_at: 0,
            deployment_resource_version: None,
            responded_to_agent_at: None,
            force_include_all_resources: false,
            last_reported_at: None,
            error: Some(crate::control_plane::model::WorkspaceError {
                error_type: "applier".into(),
                message: "boom\u{1b}[2J\u{1b}[31mfake prompt $ \r".into(),
                first_seen: 0,
                last_seen: 0,
                desired_state: DesiredState::Running,
            }),
            created_at: 0,
            agent_config: crate::control_plane::decisions::agent_config::AgentConfig::before_settings().into(),
            owner: None,
            owner_id: None,
            last_activity_at: None,
            endpoints: Vec::new(),
            devfile: None,
            components: Vec::new(),
        };
        let out = table(&[workspace], 0);
        assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{out:?}");
        assert!(out.contains(r"boom\u{1b}[2J"), "{out}");
    }
}
