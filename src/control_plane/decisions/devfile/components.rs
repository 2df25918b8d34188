//! The components' restrictions (#40; docs/devfile-gitlab-facts.md §1.2, rules 6–8): names,
//! types, the attributes and container properties that would let a devfile set what the
//! agent's Pod policy refuses, the endpoints, and the one main component.

use super::findings::{Found, MAIN_COMPONENT_ATTRIBUTE, Pass, quoted_name, shown, truthy};
use serde_json::{Map, Value};

const MAX_VOLUME_NAME: usize = 28;
const UNSUPPORTED_TYPES: [&str; 3] = ["kubernetes", "openshift", "image"];

/// Check the components; those that are maps, with their index, for the later rules.
pub fn components<'a>(
    root: &'a Map<String, Value>,
    pass: Pass,
    found: &mut Found,
) -> Vec<(usize, &'a Map<String, Value>)> {
    let listed = match root.get("components") {
        None | Some(Value::Null) => return no_components(found),
        Some(Value::Array(listed)) if listed.is_empty() => return no_components(found),
        Some(Value::Array(listed)) => listed,
        Some(_) => {
            found.add("components", "'Components' must be an Array".into());
            return Vec::new();
        }
    };
    let mut maps = Vec::new();
    for (index, component) in listed.iter().enumerate() {
        let at = format!("components[{index}]");
        let Some(component) = component.as_object() else {
            found.add(&at, "Each element in 'components' must be a Hash".into());
            continue;
        };
        maps.push((index, component));
        match component.get("name") {
            None => found.add(&at, "A component must have a 'name'".into()),
            Some(Value::String(name)) => {
                found.reserved(&format!("{at}.name"), name, |prefix| {
                    format!("Component name '{name}' must not start with '{prefix}'")
                });
                if component.contains_key("volume") && name.chars().count() >= MAX_VOLUME_NAME {
                    found.add(
                        &format!("{at}.name"),
                        format!("Volume's name must be less than {MAX_VOLUME_NAME} characters"),
                    );
                }
            }
            Some(_) => found.add(&format!("{at}.name"), "'Component name' must be a String".into()),
        }
        match component.get("attributes") {
            None | Some(Value::Null) => {}
            Some(Value::Object(attributes)) => {
                for overrides in ["container-overrides", "pod-overrides"] {
                    if truthy(attributes.get(overrides)) {
                        found.add(
                            &format!("{at}.attributes.{overrides}"),
                            format!("Attribute '{overrides}' is not yet supported"),
                        );
                    }
                }
            }
            Some(_) => found.add(
                &format!("{at}.attributes"),
                format!("'attributes' for component '{}' must be a Hash", shown(component.get("name"))),
            ),
        }
        for kind in UNSUPPORTED_TYPES {
            if truthy(component.get(kind)) {
                found.add(&format!("{at}.{kind}"), format!("Component type '{kind}' is not yet supported"));
            }
        }
    }
    main_component(&maps, found);
    containers(&maps, pass, found);
    maps
}

fn no_components<'a>(found: &mut Found) -> Vec<(usize, &'a Map<String, Value>)> {
    found.add("components", "No components present in devfile".into());
    Vec::new()
}

/// Exactly one main component. Unlike GitLab, none marked means the first container.
fn main_component(components: &[(usize, &Map<String, Value>)], found: &mut Found) {
    let marked: Vec<String> = components
        .iter()
        .filter(|(_, c)| truthy(c.get("attributes").and_then(|a| a.get(MAIN_COMPONENT_ATTRIBUTE))))
        .map(|(_, c)| shown(c.get("name")))
        .collect();
    let any_container = components.iter().any(|(_, c)| c.get("container").is_some_and(Value::is_object));
    if marked.is_empty() && !any_container {
        found.add("components", format!("No component has '{MAIN_COMPONENT_ATTRIBUTE}' attribute"));
    } else if marked.len() > 1 {
        let names: Vec<String> = marked.iter().map(|name| format!("{name:?}")).collect();
        found.add(
            "components",
            format!("Multiple components '[{}]' have '{MAIN_COMPONENT_ATTRIBUTE}' attribute", names.join(", ")),
        );
    }
}

fn containers(components: &[(usize, &Map<String, Value>)], pass: Pass, found: &mut Found) {
    let empty = Map::new();
    for &(index, component) in components {
        let name = shown(component.get("name"));
        let at = format!("components[{index}].container");
        let container = match component.get("container") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(container)) => container,
            Some(_) => return found.add(&at, format!("'container' in component '{name}' must be a Hash")),
        };
        let mut refused = vec!["dedicatedPod", "sourceMapping"];
        if pass == Pass::AsWritten {
            refused.push("mountSources");
        }
        for property in refused {
            if truthy(container.get(property)) {
                found.add(
                    &format!("{at}.{property}"),
                    format!("Property '{property}' of component '{name}' is not yet supported"),
                );
            }
        }
        let attributes = match component.get("attributes") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(attributes)) => attributes,
            Some(_) => {
                let path = format!("components[{index}].attributes");
                found.add(&path, format!("'attributes' in component '{name}' must be a Hash"));
                continue;
            }
        };
        let override_command = match attributes.get("overrideCommand") {
            None => true,
            Some(Value::Bool(set)) => *set,
            Some(_) => {
                let path = format!("components[{index}].attributes.overrideCommand");
                found.add(
                    &path,
                    format!("Property 'overrideCommand' of component '{name}' must be a boolean (true or false)"),
                );
                continue;
            }
        };
        if override_command && (truthy(container.get("command")) || truthy(container.get("args"))) {
            found.add(
                &at,
                format!(
                    "Properties 'command', 'args' for component '{name}' can only be specified when the \
                     'overrideCommand' attribute is set to false"
                ),
            );
        }
    }
}

/// No endpoint name with the reserved prefix.
pub fn endpoints(components: &[(usize, &Map<String, Value>)], found: &mut Found) {
    for &(index, component) in components {
        // Quoted once per endpoint: cut, so that many endpoints cannot multiply a long name.
        let name = quoted_name(&shown(component.get("name")));
        let at = format!("components[{index}].container.endpoints");
        let listed = match component.get("container").and_then(|c| c.get("endpoints")) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(listed)) => listed,
            Some(_) => return found.add(&at, "'Endpoints' must be an Array".into()),
        };
        for (number, endpoint) in listed.iter().enumerate() {
            let endpoint_name = shown(endpoint.get("name"));
            found.reserved(&format!("{at}[{number}].name"), &endpoint_name, |prefix| {
                format!("Endpoint name '{endpoint_name}' of component '{name}' must not start with '{prefix}'")
            });
        }
    }
}
