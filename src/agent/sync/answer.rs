//! Reading the control plane's answer one workspace at a time (DESIGN §2, "Trust": blast
//! radius). A bad info (an unknown state, a name that is no DNS label, a field of the wrong
//! type) fails that workspace alone, as its reported error; bad settings keep the last good
//! ones. Only a body that is not a JSON object with the protocol's shape fails the cycle.

use super::workspace::WorkspaceKey;
use crate::protocol::{ReconcileResponse, Settings, WorkspaceRailsInfo};
use serde::Deserialize;
use serde_json::value::RawValue;

/// Longer names are not reported back: they could only bloat the ledger and the status.
const MAX_REPORTED_NAME_BYTES: usize = 253;

/// The answer, split into what can be handled and what is refused.
#[derive(Debug, Default)]
pub struct Answer {
    /// The infos that parsed and name a valid workspace, the last of each workspace only.
    pub response: ReconcileResponse,
    pub refused: Vec<RefusedInfo>,
    /// Why the settings could not be read at all (bounds are checked when settling).
    pub unreadable_settings: Option<String>,
}

impl From<ReconcileResponse> for Answer {
    fn from(response: ReconcileResponse) -> Self {
        let mut answer = Answer { response, ..Default::default() };
        let infos = std::mem::take(&mut answer.response.workspace_rails_infos);
        for info in infos {
            answer.accept(info);
        }
        answer
    }
}

/// An info the agent will not act on, reported as that workspace's error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedInfo {
    pub key: WorkspaceKey,
    pub reason: String,
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default)]
    workspace_rails_infos: Vec<&'a RawValue>,
    #[serde(borrow, default)]
    settings: Option<&'a RawValue>,
}

/// Just enough of an info to tell whose it is.
#[derive(Deserialize)]
struct Whose {
    name: Option<serde_json::Value>,
    namespace: Option<serde_json::Value>,
}

/// Decode a reconcile answer. Every info is parsed on its own, straight from the body.
pub fn decode(body: &[u8]) -> Result<Answer, serde_json::Error> {
    // serde reads a struct from an array too; the protocol's answer is an object.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(serde::de::Error::custom("the answer is not a JSON object"));
    }
    let wire: Wire = serde_json::from_slice(body)?;
    let mut answer = Answer::default();
    match wire.settings.map(|raw| serde_json::from_str::<Option<Settings>>(raw.get())) {
        Some(Ok(settings)) => answer.response.settings = settings,
        Some(Err(error)) => answer.unreadable_settings = Some(format!("unreadable settings: {error}")),
        None => {}
    }
    for raw in wire.workspace_rails_infos {
        match serde_json::from_str::<WorkspaceRailsInfo>(raw.get()) {
            Ok(info) => answer.accept(info),
            Err(error) => match whose(raw) {
                Some(key) => answer.refuse(key, format!("refused the control plane's info: {error}")),
                None => tracing::warn!(%error, "ignoring an info that names no workspace"),
            },
        }
    }
    Ok(answer)
}

impl Answer {
    /// Keep a parsed info if its names are valid; a later info of one workspace replaces an
    /// earlier one, so that one answer starts at most one apply per workspace.
    fn accept(&mut self, info: WorkspaceRailsInfo) {
        let checked = crate::names::dns_label("namespace", &info.namespace)
            .and_then(|()| crate::names::dns_label("name", &info.name))
            .and_then(|()| resource_version(info.deployment_resource_version.as_deref()));
        if let Err(reason) = checked {
            if let Some(key) = reportable(&info.namespace, &info.name) {
                self.refuse(key, format!("refused the control plane's info: {reason}"));
            } else {
                tracing::warn!(reason, "ignoring an info whose names are too long to report");
            }
            return;
        }
        let key = WorkspaceKey::new(&info.namespace, &info.name);
        self.refused.retain(|r| r.key != key);
        let infos = &mut self.response.workspace_rails_infos;
        if let Some(earlier) = infos.iter().position(|i| i.namespace == info.namespace && i.name == info.name) {
            tracing::warn!(workspace = %info.name, namespace = %info.namespace, "two infos for one workspace; the last wins");
            infos.remove(earlier);
        }
        infos.push(info);
    }

    fn refuse(&mut self, key: WorkspaceKey, reason: String) {
        self.response.workspace_rails_infos.retain(|i| !(i.namespace == key.namespace() && i.name == key.name()));
        self.refused.retain(|r| r.key != key);
        self.refused.push(RefusedInfo { key, reason });
    }
}

fn whose(raw: &RawValue) -> Option<WorkspaceKey> {
    let whose: Whose = serde_json::from_str(raw.get()).ok()?;
    let text = |v: Option<serde_json::Value>| match v {
        Some(serde_json::Value::String(s)) => Some(s),
        _ => None,
    };
    reportable(&text(whose.namespace)?, &text(whose.name)?)
}

fn reportable(namespace: &str, name: &str) -> Option<WorkspaceKey> {
    let fits = |s: &str| !s.is_empty() && s.len() <= MAX_REPORTED_NAME_BYTES && !s.contains('/');
    (fits(namespace) && fits(name)).then(|| WorkspaceKey::new(namespace, name))
}

/// The longest `deployment_resource_version` taken: opaque to clients, a resourceVersion is
/// still a short token, and every one acknowledged is kept in the agent's status.
const MAX_RESOURCE_VERSION_BYTES: usize = 64;

fn resource_version(version: Option<&str>) -> Result<(), String> {
    match version {
        Some(v) if v.len() > MAX_RESOURCE_VERSION_BYTES || !v.bytes().all(|b| b.is_ascii_graphic()) => {
            Err(format!("deployment_resource_version of {} bytes is not a resourceVersion", v.len()))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(namespace: &str, name: &str, state: &str) -> String {
        format!(
            r#"{{"name":"{name}","namespace":"{namespace}","desired_state":"{state}","actual_state":"Running","config_to_apply":"{state}"}}"#
        )
    }

    #[test]
    fn a_bad_info_is_refused_alone() {
        let body = format!(
            r#"{{"workspace_rails_infos":[{},{},{},{},{}]}}"#,
            info("ns-a", "good", "Running"),
            info("ns-b", "bad-state", "Exploded"),
            info("NS_C", "bad-namespace", "Running"),
            r#"{"name":7}"#,
            info("ns-d", &"x".repeat(300), "Running"),
        );
        let answer = decode(body.as_bytes()).expect("decodes");
        let names: Vec<_> = answer.response.workspace_rails_infos.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["good"]);
        let refused: Vec<_> = answer.refused.iter().map(|r| r.key.to_string()).collect();
        assert_eq!(refused, ["ns-b/bad-state", "NS_C/bad-namespace"], "the nameless and the oversized are only logged");
        assert!(answer.refused[0].reason.contains("Exploded"), "{:?}", answer.refused[0]);
        assert!(answer.refused[1].reason.contains("not a DNS label"), "{:?}", answer.refused[1]);
    }

    #[test]
    fn an_acknowledged_version_is_a_short_token() {
        let acknowledged = |version: &str| {
            let body = format!(
                r#"{{"workspace_rails_infos":[{{"name":"ws","namespace":"ns","desired_state":"Running","actual_state":"Running","config_to_apply":"","deployment_resource_version":{}}}]}}"#,
                serde_json::Value::from(version)
            );
            decode(body.as_bytes()).expect("decodes")
        };
        assert_eq!(acknowledged("123456").response.workspace_rails_infos.len(), 1);
        for hostile in ["7".repeat(2 * 1024 * 1024), "12 34".into(), "1\n2".into()] {
            let answer = acknowledged(&hostile);
            assert!(answer.response.workspace_rails_infos.is_empty(), "{} bytes", hostile.len());
            let reason = &answer.refused[0].reason;
            assert!(reason.contains("is not a resourceVersion") && reason.len() < 200, "{reason}");
        }
    }

    #[test]
    fn the_last_info_of_a_workspace_wins() {
        let body = format!(
            r#"{{"workspace_rails_infos":[{},{},{}]}}"#,
            info("ns", "ws", "Running"),
            info("ns", "other", "Running"),
            info("ns", "ws", "Stopped"),
        );
        let answer = decode(body.as_bytes()).expect("decodes");
        let kept: Vec<_> = answer
            .response
            .workspace_rails_infos
            .iter()
            .map(|i| (i.name.as_str(), i.config_to_apply.as_str()))
            .collect();
        assert_eq!(kept, [("other", "Running"), ("ws", "Stopped")]);
        // A refusal after a good info of one workspace replaces it, and the reverse.
        let body =
            format!(r#"{{"workspace_rails_infos":[{},{}]}}"#, info("ns", "ws", "Running"), info("ns", "ws", "Bad"));
        let answer = decode(body.as_bytes()).expect("decodes");
        assert!(answer.response.workspace_rails_infos.is_empty() && answer.refused.len() == 1);
        let body =
            format!(r#"{{"workspace_rails_infos":[{},{}]}}"#, info("ns", "ws", "Bad"), info("ns", "ws", "Running"));
        let answer = decode(body.as_bytes()).expect("decodes");
        assert!(answer.refused.is_empty() && answer.response.workspace_rails_infos.len() == 1);
    }

    #[test]
    fn unreadable_settings_do_not_fail_the_answer() {
        let body = br#"{"workspace_rails_infos":[],"settings":{"full_reconciliation_interval_seconds":-1,"partial_reconciliation_interval_seconds":10}}"#;
        let answer = decode(body).expect("decodes");
        assert!(answer.response.settings.is_none());
        assert!(answer.unreadable_settings.as_deref().is_some_and(|s| s.contains("unreadable settings")));
        assert!(decode(br#"{"settings":null}"#).expect("decodes").unreadable_settings.is_none());
    }

    #[test]
    fn only_a_body_of_the_wrong_shape_fails() {
        assert!(decode(b"[]").is_err());
        assert!(decode(br#"{"workspace_rails_infos":{}}"#).is_err());
        assert!(decode(b"{}").is_ok());
    }
}
