//! What GitLab's flattener (devfile/library's parse) does to a devfile that has passed the
//! schema: `{{variable}}` replaced from `variables`, the booleans' defaults written out, and
//! the lists GitLab fills in when they are missing. There is no parent to merge: it is refused.

use serde_json::{Map, Value, json};

/// How many bytes the variables may add to a devfile, all uses together: a devfile that uses
/// a long variable thousands of times is refused, not grown.
pub const MAX_SUBSTITUTED_BYTES: usize = 512 * 1024;

/// The devfile as GitLab's second restrictions pass and wsync's builder see it; Err when its
/// variables would grow it past [`MAX_SUBSTITUTED_BYTES`].
pub fn flatten(devfile: &Value) -> Result<Value, String> {
    let mut flat = devfile.clone();
    let variables = devfile.get("variables").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut budget = MAX_SUBSTITUTED_BYTES;
    if let Some(root) = flat.as_object_mut() {
        for (key, value) in root.iter_mut() {
            if key != "variables" {
                substitute(value, &variables, &mut budget)?;
            }
        }
        for (key, empty) in [("components", json!([])), ("commands", json!([])), ("variables", json!({}))] {
            root.entry(key).or_insert(empty);
        }
        let events = root.entry("events").or_insert_with(|| json!({}));
        if let Some(events) = events.as_object_mut() {
            events.entry("preStart").or_insert_with(|| json!([]));
            events.entry("postStart").or_insert_with(|| json!([]));
        }
    }
    for component in items(&mut flat, "components") {
        if let Some(container) = component.get_mut("container").and_then(Value::as_object_mut) {
            default(container, "dedicatedPod", false);
            default(container, "mountSources", true);
            for endpoint in container.get_mut("endpoints").and_then(Value::as_array_mut).into_iter().flatten() {
                if let Some(endpoint) = endpoint.as_object_mut() {
                    default(endpoint, "secure", false);
                }
            }
        }
    }
    for command in items(&mut flat, "commands") {
        if let Some(exec) = command.get_mut("exec").and_then(Value::as_object_mut) {
            default(exec, "hotReloadCapable", false);
        }
    }
    Ok(flat)
}

fn items<'a>(devfile: &'a mut Value, key: &str) -> impl Iterator<Item = &'a mut Value> {
    devfile.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten()
}

fn default(object: &mut Map<String, Value>, key: &str, value: bool) {
    object.entry(key).or_insert(Value::Bool(value));
}

/// Every string below `value`, with each `{{name}}` a variable names replaced; an unknown
/// name is left as written, as the library leaves it (with a warning GitLab drops).
fn substitute(value: &mut Value, variables: &Map<String, Value>, budget: &mut usize) -> Result<(), String> {
    match value {
        Value::String(text) if text.contains("{{") => *text = replaced(text, variables, budget)?,
        Value::Array(items) => items.iter_mut().try_for_each(|item| substitute(item, variables, budget))?,
        Value::Object(fields) => fields.values_mut().try_for_each(|field| substitute(field, variables, budget))?,
        _ => {}
    }
    Ok(())
}

fn replaced(text: &str, variables: &Map<String, Value>, budget: &mut usize) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = after[..end].trim();
        match variables.get(name).and_then(Value::as_str) {
            Some(value) => {
                *budget = budget.checked_sub(value.len()).ok_or_else(|| {
                    format!("its variables would add more than {MAX_SUBSTITUTED_BYTES} bytes where they are used")
                })?;
                out.push_str(value);
            }
            None => out.push_str(&rest[start..start + 2 + end + 2]),
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_replaced_and_defaults_written_out() {
        let devfile = json!({
            "schemaVersion": "2.2.0",
            "variables": {"tag": "1.2", "home": "/h"},
            "components": [{"name": "main", "container": {
                "image": "registry.example.com/tools:{{tag}}", "endpoints": [{"name": "web", "targetPort": 80}],
                "env": [{"name": "HOME", "value": "{{ home }}/{{unknown}}/{{"}]}}],
            "commands": [{"id": "run", "exec": {"component": "main", "commandLine": "echo {{tag}}"}}]
        });
        let flat = flatten(&devfile).unwrap();
        let container = &flat["components"][0]["container"];
        assert_eq!(container["image"], "registry.example.com/tools:1.2");
        assert_eq!(container["env"][0]["value"], "/h/{{unknown}}/{{");
        assert_eq!((&container["mountSources"], &container["dedicatedPod"]), (&json!(true), &json!(false)));
        assert_eq!(container["endpoints"][0]["secure"], false);
        assert_eq!(flat["commands"][0]["exec"]["commandLine"], "echo 1.2");
        assert_eq!(flat["commands"][0]["exec"]["hotReloadCapable"], false);
        assert_eq!(flat["events"], json!({"preStart": [], "postStart": []}));
        assert_eq!(flat["variables"]["tag"], "1.2", "the variables themselves are kept as written");
    }

    #[test]
    fn variables_cannot_grow_a_devfile_without_bound() {
        let uses = "{{v}}".repeat(30_000);
        let devfile = json!({"variables": {"v": "x".repeat(100)}, "metadata": {"description": uses}});
        let refused = flatten(&devfile).unwrap_err();
        assert!(refused.contains("more than 524288 bytes"), "{refused}");
        let devfile = json!({"variables": {"v": "x".repeat(10)}, "metadata": {"description": "{{v}}".repeat(1_000)}});
        assert_eq!(flatten(&devfile).unwrap()["metadata"]["description"].as_str().map(str::len), Some(10_000));
    }

    #[test]
    fn what_is_written_is_kept() {
        let devfile = json!({"schemaVersion": "2.2.0", "components": [{"name": "m", "container": {"image": "x", "mountSources": false}}], "events": {"postStart": ["a"]}});
        let flat = flatten(&devfile).unwrap();
        assert_eq!(flat["components"][0]["container"]["mountSources"], false);
        assert_eq!(flat["events"], json!({"preStart": [], "postStart": ["a"]}));
    }
}
