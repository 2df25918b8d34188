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

/// The violations found so far, in order.
#[derive(Default)]
pub struct Found(pub Vec<Violation>);

impl Found {
    pub fn add(&mut self, path: &str, message: String) {
        self.0.push(Violation { path: path.to_string(), message });
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
pub fn shown(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(text)) => text.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}
