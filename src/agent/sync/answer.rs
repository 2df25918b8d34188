//! Reading the control plane's answer one workspace at a time (DESIGN §2, "Trust": blast
//! radius). A bad info (an unknown state, a name that is no DNS label, a field of the wrong
//! type) fails that workspace alone, as its reported error; bad settings keep the last good
//! ones. Only a body that is not a JSON object with the protocol's shape fails the cycle.

use super::workspace::WorkspaceKey;
use crate::protocol::{ReconcileResponse, Settings, WorkspaceRailsInfo};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::HashMap;

/// Longer names are not reported back: they could only bloat the ledger and the status.
const MAX_REPORTED_NAME_BYTES: usize = 253;

/// The most infos the agent takes from one answer: five times the 10,000 workspaces an agent
/// is built for. The rest are skipped (lexed, never decoded) and said in `AnswerLimited`.
pub const MAX_INFOS_PER_ANSWER: usize = 50_000;

/// The answer, split into what can be handled and what is refused.
#[derive(Debug, Default)]
pub struct Answer {
    /// The infos that parsed and name a valid workspace, the last of each workspace only.
    pub response: ReconcileResponse,
    pub refused: Vec<RefusedInfo>,
    /// Why the settings could not be read at all (bounds are checked when settling).
    pub unreadable_settings: Option<String>,
    /// Infos past [`MAX_INFOS_PER_ANSWER`], left unread.
    pub unread_infos: usize,
}

impl From<ReconcileResponse> for Answer {
    fn from(mut response: ReconcileResponse) -> Self {
        let infos = std::mem::take(&mut response.workspace_rails_infos);
        let mut building = Building::default();
        for info in infos {
            building.accept(info);
        }
        building.finish(Answer { response, ..Default::default() })
    }
}

/// The answer's infos as they are read: each workspace's last word, an info or a refusal,
/// found by key, so that an answer of N infos costs O(N).
#[derive(Default)]
struct Building {
    infos: Vec<Option<WorkspaceRailsInfo>>,
    refused: Vec<Option<RefusedInfo>>,
    last: HashMap<WorkspaceKey, Slot>,
}

#[derive(Clone, Copy)]
enum Slot {
    Info(usize),
    Refused(usize),
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
    let mut building = Building::default();
    match wire.settings.map(|raw| serde_json::from_str::<Option<Settings>>(raw.get())) {
        Some(Ok(settings)) => answer.response.settings = settings,
        Some(Err(error)) => answer.unreadable_settings = Some(format!("unreadable settings: {error}")),
        None => {}
    }
    answer.unread_infos = wire.workspace_rails_infos.len().saturating_sub(MAX_INFOS_PER_ANSWER);
    for raw in wire.workspace_rails_infos.into_iter().take(MAX_INFOS_PER_ANSWER) {
        match serde_json::from_str::<WorkspaceRailsInfo>(raw.get()) {
            Ok(info) => building.accept(info),
            Err(error) => match whose(raw) {
                Some(key) => building.refuse(key, format!("refused the control plane's info: {error}")),
                None => tracing::warn!(%error, "ignoring an info that names no workspace"),
            },
        }
    }
    Ok(building.finish(answer))
}

impl Building {
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
        if let Some(Slot::Info(_)) = self.forget(&key) {
            tracing::warn!(workspace = %info.name, namespace = %info.namespace, "two infos for one workspace; the last wins");
        }
        self.last.insert(key, Slot::Info(self.infos.len()));
        self.infos.push(Some(info));
    }

    fn refuse(&mut self, key: WorkspaceKey, reason: String) {
        self.forget(&key);
        self.last.insert(key.clone(), Slot::Refused(self.refused.len()));
        self.refused.push(Some(RefusedInfo { key, reason }));
    }

    /// Drop what the answer said of `key` so far; what that was.
    fn forget(&mut self, key: &WorkspaceKey) -> Option<Slot> {
        let slot = self.last.remove(key)?;
        match slot {
            Slot::Info(at) => {
                if let Some(entry) = self.infos.get_mut(at) {
                    *entry = None;
                }
            }
            Slot::Refused(at) => {
                if let Some(entry) = self.refused.get_mut(at) {
                    *entry = None;
                }
            }
        }
        Some(slot)
    }

    fn finish(self, mut answer: Answer) -> Answer {
        answer.response.workspace_rails_infos = self.infos.into_iter().flatten().collect();
        answer.refused = self.refused.into_iter().flatten().collect();
        answer
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
    fn an_answer_past_its_bound_is_read_up_to_it_and_the_rest_is_counted() {
        let extra = 3;
        let infos: Vec<String> =
            (0..MAX_INFOS_PER_ANSWER + extra).map(|i| info(&format!("ns-{i}"), "ws", "Terminated")).collect();
        let body = format!(r#"{{"workspace_rails_infos":[{}]}}"#, infos.join(","));
        let answer = decode(body.as_bytes()).expect("decodes");
        assert_eq!(answer.response.workspace_rails_infos.len(), MAX_INFOS_PER_ANSWER);
        assert_eq!(answer.unread_infos, extra);
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
