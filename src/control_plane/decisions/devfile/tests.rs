//! GitLab's restrictions, with its own messages (docs/devfile-gitlab-facts.md §1.2 and §3).

use super::*;
use serde_json::json;

fn valid() -> Value {
    json!({
        "schemaVersion": "2.2.0",
        "components": [
            {"name": "tooling-container", "attributes": {"gl/inject-editor": true},
             "container": {"image": "registry.example.com/ide:1", "endpoints": [{"name": "web", "targetPort": 3000}]}},
            {"name": "database", "attributes": {"overrideCommand": false},
             "container": {"image": "postgres:16", "command": ["postgres"], "args": ["-c", "fsync=off"]}},
            {"name": "cache", "volume": {"size": "1Gi"}}
        ],
        "commands": [{"id": "install", "exec": {"component": "tooling-container", "commandLine": "make"}}],
        "events": {"postStart": ["install"]},
        "projects": [{"name": "app", "git": {"remotes": {"origin": "https://example.com/app.git"}}}],
        "variables": {"VERSION": "1"}
    })
}

fn messages(devfile: &Value, pass: Pass) -> Vec<String> {
    violations(devfile, pass).into_iter().map(|v| v.message).collect()
}

#[test]
fn a_devfile_within_every_restriction_passes_both_passes() {
    assert_eq!(violations(&valid(), Pass::AsWritten), vec![]);
    assert_eq!(violations(&valid(), Pass::Flattened), vec![]);
}

#[test]
fn gitlabs_own_example_is_refused_in_its_words_and_order() {
    let mut devfile = valid();
    devfile["components"][1]["name"] = json!("example-invalid-second-component");
    devfile["components"][1]["container"]["endpoints"] = json!([{"name": "gl-example-invalid-second-endpoint"}]);
    devfile["events"] = json!({"preStart": ["gl-example"]});
    assert_eq!(
        messages(&devfile, Pass::AsWritten),
        [
            "Endpoint name 'gl-example-invalid-second-endpoint' of component 'example-invalid-second-component' \
             must not start with 'gl-'",
            "Event 'gl-example' of type 'preStart' must not start with 'gl-'",
        ]
    );
}

#[test]
fn every_violation_is_reported_together_each_at_its_path() {
    let devfile = json!({
        "schemaVersion": "2.1.0",
        "parent": {"id": "x"},
        "starterProjects": [],
        "attributes": {"pod-overrides": {"spec": {"hostNetwork": true}}},
        "components": [
            {"name": "GL-main", "attributes": {"gl/inject-editor": true, "container-overrides": {"securityContext": {}}},
             "container": {"image": "x", "dedicatedPod": true, "mountSources": true, "command": ["sh"]}},
            {"name": "a-volume-name-of-28-chars-xx", "volume": {}},
            {"name": "k", "kubernetes": {"uri": "x"}},
            "not a map"
        ],
        "commands": [
            {"id": "gl-build", "exec": {"component": "gl-main", "label": "gl-label", "commandLine": "x", "env": [], "hotReloadCapable": true}},
            {"id": "both", "composite": {"commands": []}},
            {"id": "apply-one", "apply": {"component": ""}}
        ],
        "events": {"postStart": ["missing", "apply-one"], "preStop": ["x"]},
        "variables": {"GL_X": "1", "gl-y": "2"}
    });
    let found = violations(&devfile, Pass::AsWritten);
    let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "schemaVersion: 'schemaVersion' '2.1.0' is not supported, it must be '2.2.0'",
            "parent: Inheriting from 'parent' is not yet supported",
            "starterProjects: 'starterProjects' is not yet supported",
            "attributes.pod-overrides: Attribute 'pod-overrides' is not yet supported",
            "components[0].name: Component name 'GL-main' must not start with 'gl-'",
            "components[0].attributes.container-overrides: Attribute 'container-overrides' is not yet supported",
            "components[1].name: Volume's name must be less than 28 characters",
            "components[2].kubernetes: Component type 'kubernetes' is not yet supported",
            "components[3]: Each element in 'components' must be a Hash",
            "components[0].container.dedicatedPod: Property 'dedicatedPod' of component 'GL-main' is not yet supported",
            "components[0].container.mountSources: Property 'mountSources' of component 'GL-main' is not yet supported",
            "components[0].container: Properties 'command', 'args' for component 'GL-main' can only be specified when \
             the 'overrideCommand' attribute is set to false",
            "commands[0].id: Command id 'gl-build' must not start with 'gl-'",
            "commands[0].exec.component: Component name 'gl-main' for command id 'gl-build' must not start with 'gl-'",
            "commands[0].exec.label: Label 'gl-label' for command id 'gl-build' must not start with 'gl-'",
            "commands[0].exec: Unsupported options 'env' for exec command 'gl-build'. Only 'commandLine, component, \
             label, hotReloadCapable, workingDir' are supported.",
            "commands[0].exec.hotReloadCapable: Property 'hotReloadCapable' for exec command 'gl-build' must be false \
             when specified",
            "commands[1]: Command 'both' must have one of the supported command types: exec, apply",
            "commands[2].apply.component: 'apply' command 'apply-one' must specify a 'component'",
            "events.postStart[0]: PostStart event references command 'missing' which has no command definition.",
            "events.postStart[1]: PostStart event references command 'apply-one' which is not an exec command. Only \
             exec commands are supported in postStart events",
            "events.preStop: Event type 'preStop' is not yet supported",
            "variables.GL_X: Variable name 'GL_X' must not start with 'gl_'",
            "variables.gl-y: Variable name 'gl-y' must not start with 'gl-'",
        ]
    );
}

#[test]
fn a_devfile_past_3_mib_is_refused_alone() {
    let mut devfile = valid();
    devfile["schemaVersion"] = json!("1.0");
    devfile["variables"] = json!({"BIG": "x".repeat(3 * 1024 * 1024 + 512 * 1024)});
    assert_eq!(messages(&devfile, Pass::AsWritten), ["Devfile size (3.5 MB) exceeds the maximum allowed size of 3 MB"]);
}

#[test]
fn the_main_component_is_the_marked_one_or_the_first_container() {
    let mut unmarked = valid();
    unmarked["components"][0]["attributes"] = json!({});
    assert_eq!(violations(&unmarked, Pass::AsWritten), vec![], "wsync: the first container is the main one");
    let volumes_only = json!({"schemaVersion": "2.2.0", "components": [{"name": "v", "volume": {}}]});
    assert_eq!(messages(&volumes_only, Pass::AsWritten), ["No component has 'gl/inject-editor' attribute"]);
    let mut two = valid();
    two["components"][1]["attributes"]["gl/inject-editor"] = json!("false");
    assert_eq!(
        messages(&two, Pass::AsWritten),
        ["Multiple components '[\"tooling-container\", \"database\"]' have 'gl/inject-editor' attribute"],
        "any value but false counts, as in Ruby"
    );
    for nothing in [json!({"schemaVersion": "2.2.0"}), json!({"schemaVersion": "2.2.0", "components": []})] {
        assert_eq!(messages(&nothing, Pass::AsWritten), ["No components present in devfile"]);
    }
}

#[test]
fn mount_sources_is_refused_as_written_and_kept_once_flattened() {
    let mut devfile = valid();
    devfile["components"][0]["container"]["mountSources"] = json!(true);
    assert_eq!(
        messages(&devfile, Pass::AsWritten),
        ["Property 'mountSources' of component 'tooling-container' is not yet supported"]
    );
    assert_eq!(violations(&devfile, Pass::Flattened), vec![]);
    devfile["components"][0]["container"]["mountSources"] = json!(false);
    assert_eq!(violations(&devfile, Pass::AsWritten), vec![]);
}

#[test]
fn override_command_must_be_false_for_a_command_and_a_boolean_at_all() {
    let mut devfile = valid();
    devfile["components"][1]["attributes"]["overrideCommand"] = json!("no");
    assert_eq!(
        messages(&devfile, Pass::AsWritten),
        ["Property 'overrideCommand' of component 'database' must be a boolean (true or false)"]
    );
    devfile["components"][1]["attributes"] = json!({});
    assert_eq!(messages(&devfile, Pass::AsWritten).len(), 1, "absent is true, for any component");
}

#[test]
fn wrong_shapes_are_named_not_crashed_on() {
    let devfile = json!({"schemaVersion": 2.2, "attributes": [], "components": {}, "commands": {}, "events": [],
                         "variables": []});
    assert_eq!(
        messages(&devfile, Pass::AsWritten),
        [
            "'schemaVersion' must be a String",
            "'Attributes' must be a Hash",
            "'Components' must be an Array",
            "'Commands' must be an Array",
            "'Events' must be a Hash",
            "'Variables' must be a Hash",
        ]
    );
    assert_eq!(
        messages(&json!("a string"), Pass::AsWritten).first().map(String::as_str),
        Some("'schemaVersion' '' is not supported, it must be '2.2.0'")
    );
    let mut bad_version = valid();
    bad_version["schemaVersion"] = json!("two");
    assert_eq!(
        messages(&bad_version, Pass::AsWritten),
        ["Invalid 'schemaVersion' 'two'", "'schemaVersion' 'two' is not supported, it must be '2.2.0'"]
    );
    let mut null_events = valid();
    null_events["events"] = json!({"postStart": null});
    assert_eq!(violations(&null_events, Pass::AsWritten), vec![]);
}

#[test]
fn sizes_read_as_activesupport_writes_them() {
    assert_eq!(human_size(512), "512 Bytes");
    assert_eq!(human_size(3 * 1024 * 1024), "3 MB");
    assert_eq!(human_size(3 * 1024 * 1024 + 512 * 1024), "3.5 MB");
    assert_eq!(human_size(10_747_904), "10.3 MB");
    assert_eq!(human_size(150 * 1024), "150 KB");
}

proptest::proptest! {
    /// Any JSON at all gets violations or none, never a panic.
    #[test]
    fn any_json_is_judged(text in "[\\[\\]{}\",:0-9a-zA-Z\\- ]{0,200}") {
        if let Ok(devfile) = serde_json::from_str::<Value>(&text) {
            let _ = violations(&devfile, Pass::AsWritten);
        }
    }
}
