//! What the devfile restrictions share (#40): a violation and its path, the two passes, and
//! Ruby's and Rails' notions of truth and presence, which GitLab's rules are written in.

use serde_json::Value;
use std::fmt;

pub const MAIN_COMPONENT_ATTRIBUTE: &str = "gl/inject-editor";
pub const RESERVED_PREFIX: &str = "gl-";

/// One refusal: where, and GitLab's words for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: String,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Before flattening (the devfile as written) or after (the flattener sets `mountSources`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    AsWritten,
    Flattened,
}

/// The violations found so far, in order, at most [`MAX_VIOLATIONS`]; and how many more.
#[derive(Default)]
pub struct Found(pub Vec<Violation>, usize);

/// A refusal names this many faults at most, each in at most [`MAX_MESSAGE_BYTES`]: a hostile
/// devfile's refusal is no larger than a friendly one's.
pub const MAX_VIOLATIONS: usize = 100;
pub const MAX_MESSAGE_BYTES: usize = 400;

impl Found {
    pub fn add(&mut self, path: &str, message: String) {
        if self.0.len() >= MAX_VIOLATIONS {
            self.1 = self.1.saturating_add(1);
            return;
        }
        let path = crate::protocol::cap_message_to(path, MAX_MESSAGE_BYTES);
        self.0.push(Violation { path, message: crate::protocol::cap_message_to(&message, MAX_MESSAGE_BYTES) });
    }

    /// What was found, with a last line for what was left out.
    pub fn into_violations(mut self) -> Vec<Violation> {
        if self.1 > 0 {
            let message = format!("and {} more faults, not listed", self.1);
            self.0.push(Violation { path: "(devfile)".into(), message });
        }
        self.0
    }

    /// `what` starting with the reserved prefix, in any case: GitLab's message for it.
    pub fn reserved(&mut self, path: &str, what: &str, message: impl FnOnce(&str) -> String) {
        if starts_reserved(what) {
            self.add(path, message(RESERVED_PREFIX));
        }
    }
}

pub fn starts_reserved(name: &str) -> bool {
    starts_in_any_case(name, RESERVED_PREFIX)
}

/// Whether `name` starts with `prefix`, in any case (GitLab downcases before it compares).
pub fn starts_in_any_case(name: &str, prefix: &str) -> bool {
    name.get(..prefix.len()).is_some_and(|start| start.eq_ignore_ascii_case(prefix))
}

/// Ruby's truth: anything but nothing and `false`.
pub fn truthy(value: Option<&Value>) -> bool {
    !matches!(value, None | Some(Value::Null) | Some(Value::Bool(false)))
}

/// Rails' `present?`: not nothing, `false`, blank text or an empty list or map.
pub fn present(value: Option<&Value>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(text)) => !text.trim().is_empty(),
        Some(Value::Array(items)) => !items.is_empty(),
        Some(Value::Object(map)) => !map.is_empty(),
        Some(_) => true,
    }
}

/// A value in a message, as GitLab interpolates it.
/// A name as a message quotes it, cut where it would run long.
pub fn quoted_name(name: &str) -> String {
    crate::protocol::cap_message_to(name, 100)
}

pub fn shown(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}
