//! GitLab's devfile restrictions (#40), as its RestrictionsEnforcer (18.9) applies them to a
//! devfile already read into JSON: every violation, in GitLab's order and words, each with the
//! path of what it names (docs/devfile-gitlab-facts.md §1.2). Two differences are deliberate:
//! `projects` is accepted (wsync clones them; GitLab clones its own project instead), and a
//! devfile that marks no component `gl/inject-editor` has its first container as the main one.
//! The JSON schema, and what Kubernetes would refuse, are checked apart.

mod commands;
mod components;
pub mod findings;
mod flatten;
pub mod kubernetes_values;
pub mod model;
mod schema;

use findings::{Found, starts_in_any_case, truthy};
pub use findings::{Pass, Violation};
use serde_json::{Map, Value};
use std::fmt;

/// A devfile that may be used: flattened, as the workspace is built from it and stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    pub flattened: Value,
    pub devfile: model::Devfile,
}

/// Why a devfile is refused: the first stage that refused it, and all that stage found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub stage: Stage,
    pub violations: Vec<Violation>,
}

/// GitLab's stages (each stops the devfile), and wsync's Kubernetes values after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Read,
    Restrictions,
    Schema,
    KubernetesValues,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.stage {
            Stage::Read => "Devfile yaml parse failed:",
            Stage::Restrictions => "Devfile restrictions failed:",
            Stage::Schema => "Devfile schema validation failed:",
            Stage::KubernetesValues => "Devfile values Kubernetes would refuse:",
        })?;
        for violation in &self.violations {
            write!(f, "\n  {violation}")?;
        }
        Ok(())
    }
}

/// A devfile as a user gives it, checked whole as GitLab 18.9 checks it (read, restrictions
/// as written, the 2.2.0 schema, flattened, restrictions again), and then for what
/// Kubernetes would refuse; nothing of it is used unless all pass.
pub fn accept(bytes: &[u8]) -> Result<Accepted, Refusal> {
    let refuse = |stage, violations| Err(Refusal { stage, violations });
    let devfile = match crate::yaml::parse_devfile(bytes) {
        Ok(devfile @ Value::Object(_)) => devfile,
        Ok(other) => {
            let message = format!("YAML parsing resulted in '{}' type instead of 'Hash'", ruby_type(&other));
            return refuse(Stage::Read, vec![Violation { path: "(devfile)".into(), message }]);
        }
        Err(error) => {
            return refuse(Stage::Read, vec![Violation { path: "(devfile)".into(), message: error.to_string() }]);
        }
    };
    let found = violations(&devfile, Pass::AsWritten);
    if !found.is_empty() {
        return refuse(Stage::Restrictions, found);
    }
    let found = schema::violations(&devfile);
    if !found.is_empty() {
        return refuse(Stage::Schema, found);
    }
    let flattened = match flatten::flatten(&devfile) {
        Ok(flattened) => flattened,
        Err(message) => return refuse(Stage::Schema, vec![Violation { path: "variables".into(), message }]),
    };
    let found = violations(&flattened, Pass::Flattened);
    if !found.is_empty() {
        return refuse(Stage::Restrictions, found);
    }
    let model: model::Devfile = match serde_json::from_value(flattened.clone()) {
        Ok(model) => model,
        Err(error) => {
            let message = format!("cannot be read as a devfile: {error}");
            return refuse(Stage::Schema, vec![Violation { path: "(devfile)".into(), message }]);
        }
    };
    let mut found = Found::default();
    kubernetes_values::check(&model, &mut found);
    if !found.0.is_empty() {
        return refuse(Stage::KubernetesValues, found.into_violations());
    }
    Ok(Accepted { flattened, devfile: model })
}

/// The one-container devfile a workspace made from an image stands for: its image, its IDE
/// port, its SSH port (internal: `wsync workspaces ssh` reaches it) and its home volume.
pub fn devfile_of_image(image: &str, cpu: Option<&str>, memory: Option<&str>) -> String {
    use crate::control_plane::decisions::config_builder::DECLARED_PORTS;
    let mut container = serde_json::json!({
        "image": image,
        "mountSources": false,
        "endpoints": DECLARED_PORTS.iter().map(|(name, port)| match *name {
            "ide" => serde_json::json!({ "name": name, "targetPort": port }),
            _ => serde_json::json!({ "name": name, "targetPort": port, "exposure": "internal" }),
        }).collect::<Vec<_>>(),
        "volumeMounts": [{ "name": "home", "path": "/home/workspace" }],
    });
    for (field, value) in [("cpuLimit", cpu), ("cpuRequest", cpu), ("memoryLimit", memory), ("memoryRequest", memory)] {
        if let Some(value) = value {
            container[field] = Value::from(value);
        }
    }
    let devfile = serde_json::json!({
        "schemaVersion": SCHEMA_VERSION,
        "components": [
            { "name": "workspace", "attributes": { "gl/inject-editor": true, "overrideCommand": false }, "container": container },
            { "name": "home", "volume": { "size": "1Gi" } },
        ],
    });
    let body = crate::yaml::to_string(&devfile).unwrap_or_default();
    format!("# The workspace was created from an image; this is the devfile that image stands for.\n{body}")
}

fn ruby_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NilClass",
        Value::Bool(true) => "TrueClass",
        Value::Bool(false) => "FalseClass",
        Value::Number(n) if n.is_f64() => "Float",
        Value::Number(_) => "Integer",
        Value::String(_) => "String",
        Value::Array(_) => "Array",
        Value::Object(_) => "Hash",
    }
}

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
    found.into_violations()
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
pub(crate) mod gitlab_cases;
#[cfg(test)]
mod tests;
