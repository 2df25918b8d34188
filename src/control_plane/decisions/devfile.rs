//! GitLab's devfile restrictions (#40), as its RestrictionsEnforcer (18.9) applies them to a
//! devfile already read into JSON: every violation, in GitLab's order and words, each with the
//! path of what it names (docs/devfile-gitlab-facts.md §1.2). Two differences are deliberate:
//! `projects` is accepted (wsync clones them; GitLab clones its own project instead), and a
//! devfile that marks no component `gl/inject-editor` has its first container as the main one.
//! The JSON schema, and what Kubernetes would refuse, are checked apart.

mod commands;
mod components;
pub mod findings;

use findings::{Found, starts_in_any_case, truthy};
pub use findings::{Pass, Violation};
use serde_json::{Map, Value};

/// GitLab's limit on a devfile, as JSON.
pub const MAX_DEVFILE_BYTES: usize = 3 * 1024 * 1024;
pub const SCHEMA_VERSION: &str = "2.2.0";

/// Every restriction `devfile` breaks; none when it may be used.
pub fn violations(devfile: &Value, pass: Pass) -> Vec<Violation> {
    let size = serde_json::to_vec(devfile).map_or(usize::MAX, |bytes| bytes.len());
    if size > MAX_DEVFILE_BYTES {
        let message = format!(
            "Devfile size ({}) exceeds the maximum allowed size of {}",
            human_size(size),
            human_size(MAX_DEVFILE_BYTES)
        );
        return vec![Violation { path: "(devfile)".into(), message }];
    }
    let empty = Map::new();
    let root = devfile.as_object().unwrap_or(&empty);
    let mut found = Found::default();
    schema_version(root, &mut found);
    if root.contains_key("parent") {
        found.add("parent", "Inheriting from 'parent' is not yet supported".into());
    }
    if root.contains_key("starterProjects") {
        found.add("starterProjects", "'starterProjects' is not yet supported".into());
    }
    match root.get("attributes") {
        None | Some(Value::Null) => {}
        Some(Value::Object(attributes)) => {
            if truthy(attributes.get("pod-overrides")) {
                found.add("attributes.pod-overrides", "Attribute 'pod-overrides' is not yet supported".into());
            }
        }
        Some(_) => found.add("attributes", "'Attributes' must be a Hash".into()),
    }
    let components = components::components(root, pass, &mut found);
    components::endpoints(&components, &mut found);
    commands::commands(root, &mut found);
    commands::events(root, &mut found);
    variables(root, &mut found);
    found.0
}

fn schema_version(root: &Map<String, Value>, found: &mut Found) {
    let version = match root.get("schemaVersion") {
        None => "",
        Some(Value::String(version)) => version.as_str(),
        Some(_) => return found.add("schemaVersion", "'schemaVersion' must be a String".into()),
    };
    // Gem::Version's shape: digits, then dot-separated alphanumerics.
    let parses = version.is_empty()
        || (version.starts_with(|c: char| c.is_ascii_digit())
            && version.split('.').all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_alphanumeric())));
    if !parses {
        found.add("schemaVersion", format!("Invalid 'schemaVersion' '{version}'"));
    }
    if version != SCHEMA_VERSION {
        found.add(
            "schemaVersion",
            format!("'schemaVersion' '{version}' is not supported, it must be '{SCHEMA_VERSION}'"),
        );
    }
}

fn variables(root: &Map<String, Value>, found: &mut Found) {
    let variables = match root.get("variables") {
        None | Some(Value::Null) => return,
        Some(Value::Object(variables)) => variables,
        Some(_) => return found.add("variables", "'Variables' must be a Hash".into()),
    };
    for name in variables.keys() {
        for prefix in ["gl-", "gl_"] {
            if starts_in_any_case(name, prefix) {
                found.add(
                    &format!("variables.{name}"),
                    format!("Variable name '{name}' must not start with '{prefix}'"),
                );
            }
        }
    }
}

/// ActiveSupport's `number_to_human_size`: base 1024, three significant digits.
pub fn human_size(bytes: usize) -> String {
    let units = ["Bytes", "KB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        return format!("{bytes} Bytes");
    }
    let digits_before_point = if value >= 100.0 {
        3
    } else if value >= 10.0 {
        2
    } else {
        1
    };
    // Half up, as Ruby rounds; `format!` alone rounds half to even.
    let decimals = 3 - digits_before_point;
    let scale = 10f64.powi(decimals);
    let text = format!("{:.*}", decimals as usize, (value * scale).round() / scale);
    let text = if text.contains('.') { text.trim_end_matches('0').trim_end_matches('.') } else { &text };
    format!("{text} {}", units[unit])
}

#[cfg(test)]
mod tests;
