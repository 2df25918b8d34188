//! The devfile 2.2.0 JSON schema (`schemas/devfile/`, Apache-2.0), checked by the `jsonschema`
//! crate as devfile/library checks it for GitLab: every error, each at its path. The schema has
//! no `$schema`; its keywords mean the same in every draft, and Draft 7 is the nearest to the
//! library's gojsonschema.

use super::findings::{Found, Violation};
use jsonschema::error::ValidationErrorKind;
use serde_json::Value;
use std::sync::LazyLock;

/// The schema as shipped; a unit test holds it to its published digest.
pub const SCHEMA_2_2_0: &str = include_str!("../../../../schemas/devfile/2.2.0/devfile.json");

/// The longest a quoted value runs in a message: a message names, it does not echo.
const MAX_SHOWN_CHARS: usize = 60;

static VALIDATOR: LazyLock<Result<jsonschema::Validator, String>> = LazyLock::new(|| {
    let schema: Value = serde_json::from_str(SCHEMA_2_2_0).map_err(|e| e.to_string())?;
    jsonschema::draft7::new(&schema).map_err(|e| e.to_string())
});

/// What the 2.2.0 schema refuses of `devfile`, at most 50 of them.
pub fn violations(devfile: &Value) -> Vec<Violation> {
    let validator = match &*VALIDATOR {
        Ok(validator) => validator,
        Err(error) => return vec![Violation { path: "(schema)".into(), message: format!("unusable: {error}") }],
    };
    let mut found = Found::default();
    for error in validator.iter_errors(devfile).take(50) {
        let path = devfile_path(error.instance_path().segments());
        found.add(&path, message(error.kind(), error.instance()));
    }
    found.into_violations()
}

/// `components[0].container.endpoints[1].targetPort`, as the restrictions write paths.
fn devfile_path<'a>(segments: impl Iterator<Item = jsonschema::paths::LocationSegment<'a>>) -> String {
    use jsonschema::paths::LocationSegment;
    let mut path = String::new();
    for segment in segments {
        match segment {
            LocationSegment::Index(index) => path.push_str(&format!("[{index}]")),
            LocationSegment::Property(name) if path.is_empty() => path.push_str(&name),
            LocationSegment::Property(name) => path.push_str(&format!(".{name}")),
        }
    }
    if path.is_empty() { "(root)".into() } else { path }
}

/// jsonschema's words where they are short; its own, cut, where they would quote a whole value.
fn message(kind: &ValidationErrorKind, instance: &Value) -> String {
    match kind {
        ValidationErrorKind::AdditionalProperties { unexpected } => {
            let names: Vec<String> = unexpected.iter().map(|name| format!("'{}'", shown(name))).collect();
            format!("Additional property {} is not allowed", names.join(", "))
        }
        ValidationErrorKind::Required { property } => format!("{} is required", shown(&property.to_string())),
        ValidationErrorKind::Type { kind } => {
            format!("{} is not of type {kind:?}", shown(&instance.to_string())).replace("Single(", "").replace(')', "")
        }
        ValidationErrorKind::Enum { options } => {
            format!("{} is not one of {}", shown(&instance.to_string()), shown(&options.to_string()))
        }
        ValidationErrorKind::Pattern { pattern } => {
            format!("{} does not match {pattern:?}", shown(&instance.to_string()))
        }
        ValidationErrorKind::MaxLength { limit } => format!("must be at most {limit} characters"),
        ValidationErrorKind::OneOfNotValid { .. } => {
            "must have exactly one of the kinds the schema lists (for a component: container, volume, ...)".into()
        }
        ValidationErrorKind::OneOfMultipleValid { .. } => "must have only one of the kinds the schema lists".into(),
        ValidationErrorKind::UniqueItems => "must not repeat an item".into(),
        _ => format!("does not match the devfile schema ({})", shown(&format!("{kind:?}"))),
    }
}

fn shown(text: &str) -> String {
    match text.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_shipped_schema_is_the_published_one() {
        use sha2::{Digest, Sha256};
        let digest: String = Sha256::digest(SCHEMA_2_2_0.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(digest, "e6cebf7fd27af06818dbee75d8a55945b763221d3f6dd300c6a10a2ddcb66ade");
        assert!(VALIDATOR.is_ok());
    }

    #[test]
    fn each_refusal_names_its_path() {
        let devfile = json!({
            "schemaVersion": "2.2.0",
            "random": 1,
            "components": [
                {"name": "main", "container": {"image": "x", "endpoints": [{"name": "web", "targetPort": "80"}]}},
                {"name": "Bad_Name", "container": {"image": "x", "memoryLimit": 5}},
                {"name": "nothing"}
            ]
        });
        let found: Vec<String> = violations(&devfile).iter().map(ToString::to_string).collect();
        let has = |path: &str, words: &str| found.iter().any(|v| v.starts_with(path) && v.contains(words));
        assert!(has("(root): ", "Additional property 'random' is not allowed"), "{found:#?}");
        assert!(has("components[0].container.endpoints[0].targetPort: ", "not of type"), "{found:#?}");
        assert!(has("components[1].name: ", "does not match"), "{found:#?}");
        assert!(has("components[1].container.memoryLimit: ", "not of type"), "{found:#?}");
        assert!(has("components[2]: ", "exactly one of"), "{found:#?}");
        assert!(violations(&json!({"schemaVersion": "2.2.0"})).is_empty());
        let long = "x".repeat(10_000);
        let found = violations(&json!({"schemaVersion": "2.2.0", "components": [{"name": long}]}));
        assert!(found.iter().all(|v| v.message.len() < 200), "{found:?}");
    }
}
