//! The commands' and events' restrictions (#40; docs/devfile-gitlab-facts.md §1.2, rules 9
//! and 10): `exec` and `apply` only, `exec` with its short list of keys, preStart and postStart
//! only, and each postStart naming an exec command that exists.

use super::findings::{Found, present, shown};
use serde_json::{Map, Value};

const EXEC_OPTIONS: [&str; 5] = ["commandLine", "component", "label", "hotReloadCapable", "workingDir"];
const EVENTS: [&str; 2] = ["preStart", "postStart"];

pub fn commands(root: &Map<String, Value>, found: &mut Found) {
    let listed = match root.get("commands") {
        None | Some(Value::Null) => return,
        Some(Value::Array(listed)) => listed,
        Some(_) => return found.add("commands", "'Commands' must be an Array".into()),
    };
    for (index, command) in listed.iter().enumerate() {
        let at = format!("commands[{index}]");
        let Some(command) = command.as_object() else {
            found.add(&at, "'command' must be a Hash".into());
            continue;
        };
        let id = shown(command.get("id"));
        found.reserved(&format!("{at}.id"), &id, |prefix| format!("Command id '{id}' must not start with '{prefix}'"));
        let Some(kind) = ["exec", "apply"].into_iter().find(|kind| present(command.get(*kind))) else {
            found.add(&at, format!("Command '{id}' must have one of the supported command types: exec, apply"));
            continue;
        };
        let at = format!("{at}.{kind}");
        let Some(body) = command.get(kind).and_then(Value::as_object) else { continue };
        let component = shown(body.get("component"));
        if component.is_empty() {
            found.add(&format!("{at}.component"), format!("'{kind}' command '{id}' must specify a 'component'"));
        }
        found.reserved(&format!("{at}.component"), &component, |prefix| {
            format!("Component name '{component}' for command id '{id}' must not start with '{prefix}'")
        });
        let label = shown(body.get("label"));
        found.reserved(&format!("{at}.label"), &label, |prefix| {
            format!("Label '{label}' for command id '{id}' must not start with '{prefix}'")
        });
        if kind != "exec" {
            continue;
        }
        let unsupported: Vec<&str> =
            body.keys().map(String::as_str).filter(|key| !EXEC_OPTIONS.contains(key)).collect();
        if !unsupported.is_empty() {
            found.add(
                &at,
                format!(
                    "Unsupported options '{}' for exec command '{id}'. Only '{}' are supported.",
                    unsupported.join(", "),
                    EXEC_OPTIONS.join(", ")
                ),
            );
        }
        if body.get("hotReloadCapable").is_some_and(|v| v != &Value::Bool(false)) {
            found.add(
                &format!("{at}.hotReloadCapable"),
                format!("Property 'hotReloadCapable' for exec command '{id}' must be false when specified"),
            );
        }
    }
}

pub fn events(root: &Map<String, Value>, found: &mut Found) {
    let events = match root.get("events") {
        None | Some(Value::Null) => return,
        Some(Value::Object(events)) => events,
        Some(_) => return found.add("events", "'Events' must be a Hash".into()),
    };
    let commands: Vec<&Map<String, Value>> =
        root.get("commands").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object).collect();
    for (kind, listed) in events {
        let at = format!("events.{kind}");
        if !EVENTS.contains(&kind.as_str()) && present(Some(listed)) {
            found.add(&at, format!("Event type '{kind}' is not yet supported"));
        }
        // A null list is no events (GitLab fails on it).
        for (index, event) in listed.as_array().into_iter().flatten().enumerate() {
            let event = shown(Some(event));
            let at = format!("{at}[{index}]");
            found.reserved(&at, &event, |prefix| {
                format!("Event '{event}' of type '{kind}' must not start with '{prefix}'")
            });
            if kind != "postStart" {
                continue;
            }
            match commands.iter().find(|command| command.get("id").and_then(Value::as_str) == Some(event.as_str())) {
                None => found
                    .add(&at, format!("PostStart event references command '{event}' which has no command definition.")),
                Some(command) if !present(command.get("exec")) => found.add(
                    &at,
                    format!(
                        "PostStart event references command '{event}' which is not an exec command. Only exec \
                         commands are supported in postStart events"
                    ),
                ),
                Some(_) => {}
            }
        }
    }
}
