//! GitLab's devfile spec fixtures (EE 18.9, `ee/spec/fixtures/remote_development/`), re-expressed here as a
//! table of cases: each is named after GitLab's fixture and keeps the rule it breaks and the names GitLab's message
//! quotes. Deliberate differences, tested apart: `projects`, and an unmarked main container.
//! Longer than 400 lines: it is a table of 66 devfiles, one per fixture.

use super::{Pass, Violation, accept, violations};
use serde_json::Value;

struct Case {
    fixture: &'static str,
    pass: Pass,
    /// `expect` is the whole list, in order: what GitLab's code reports (less a deliberate difference where noted),
    /// not only what its spec checks.
    whole: bool,
    yaml: &'static str,
    expect: &'static [&'static str],
}

/// Refused by the second pass (the processed devfile), as GitLab's spec runs almost every fixture.
const fn refused(fixture: &'static str, yaml: &'static str, expect: &'static [&'static str]) -> Case {
    Case { fixture, pass: Pass::Flattened, whole: false, yaml, expect }
}

/// As [`refused`], with GitLab's whole list of messages, in its order.
const fn refused_with_all(fixture: &'static str, yaml: &'static str, expect: &'static [&'static str]) -> Case {
    Case { fixture, pass: Pass::Flattened, whole: true, yaml, expect }
}

/// The devfile standing for GitLab's fixture `fixture`: the builder's tests build from them.
pub(crate) fn devfile_of(fixture: &str) -> &'static str {
    CASES.iter().find(|case| case.fixture == fixture).map_or("", |case| case.yaml)
}

/// Accepted: GitLab's spec finds no violation.
const fn valid(fixture: &'static str, yaml: &'static str) -> Case {
    Case { fixture, pass: Pass::Flattened, whole: false, yaml, expect: &[] }
}

/// A devfile whose only component is the main container `example`: `head` (schemaVersion 2.2.0 unless given),
/// the component, then `rest`.
macro_rules! with_main {
    ($rest:literal) => {
        with_main!("schemaVersion: 2.2.0\n", $rest)
    };
    ($head:literal, $rest:literal) => {
        concat!(
            $head,
            "components:\n",
            "  - {name: example, attributes: {gl/inject-editor: true},",
            " container: {image: registry.example.com/tools:1}}\n",
            $rest
        )
    };
}

const CASES: &[Case] = &[
    valid(
        "default_devfile",
        r#"
schemaVersion: "2.2.0"
components:
  - name: main
    attributes:
      gl/inject-editor: true
    container:
      image: "registry.example.com/workspaces/ubuntu:24.04"
"#,
    ),
    valid(
        "devfile",
        r#"
---
schemaVersion: 2.2.0
components:
  - {name: tools, attributes: {gl/inject-editor: true}, container: {image: registry.example.com/tools:1}}
  - name: database
    container:
      image: registry.example.com/postgres:16
      env: [{name: POSTGRES_PASSWORD, value: "not-a-secret"}]
  - name: own-entrypoint
    attributes: {overrideCommand: false}
    container: {image: registry.example.com/tools:1, command: [sleep], args: [infinity]}
commands:
  - {id: setup-in-dir, exec: {component: tools, commandLine: make, workingDir: tmp, hotReloadCapable: false}}
  - {id: setup, exec: {component: tools, commandLine: make, hotReloadCapable: false}}
  - {id: seed-in-dir, exec: {component: database, commandLine: ./seed, workingDir: tmp, hotReloadCapable: false}}
  - {id: seed, exec: {component: database, commandLine: ./seed, hotReloadCapable: false}}
events:
  preStart: []
  postStart: [seed-in-dir, seed, setup, setup-in-dir]
"#,
    ),
    // What the flattener makes of the one above.
    valid(
        "flattened-devfile",
        r#"
---
schemaVersion: 2.2.0
metadata: {}
components:
  - name: tools
    attributes: {gl/inject-editor: true}
    container: {dedicatedPod: false, mountSources: true, image: registry.example.com/tools:1}
  - name: database
    container:
      dedicatedPod: false
      mountSources: true
      image: registry.example.com/postgres:16
      env: [{name: POSTGRES_PASSWORD, value: "not-a-secret"}]
  - name: own-entrypoint
    attributes: {overrideCommand: false}
    container:
      dedicatedPod: false
      mountSources: true
      image: registry.example.com/tools:1
      command: [sleep]
      args: [infinity]
commands:
  - {id: setup-in-dir, exec: {component: tools, commandLine: make, workingDir: tmp, hotReloadCapable: false}}
  - {id: setup, exec: {component: tools, commandLine: make, hotReloadCapable: false}}
  - {id: seed-in-dir, exec: {component: database, commandLine: ./seed, workingDir: tmp, hotReloadCapable: false}}
  - {id: seed, exec: {component: database, commandLine: ./seed, hotReloadCapable: false}}
events:
  postStart: [seed-in-dir, seed, setup, setup-in-dir]
  preStart: []
variables: {}
"#,
    ),
    // GitLab's applies to a component it lacks; this one's preStart applies to one it has.
    valid(
        "flattened-with-entries-devfile",
        r#"
schemaVersion: 2.2.0
metadata: {}
components:
  - name: tools
    attributes: {gl/inject-editor: true}
    container: {dedicatedPod: false, mountSources: true, image: registry.example.com/tools:1}
  - name: setup
    container: {dedicatedPod: false, mountSources: true, image: registry.example.com/setup:1}
commands:
  - {id: prepare, apply: {component: setup}}
events:
  preStart: [prepare]
  postStart: []
variables:
  greeting: "hello"
"#,
    ),
    // GitLab's execs in its volume component, which the devfile library refuses, and its endpoints are https,
    // which wsync's proxy does not speak to a workspace; this one execs in the container, over http.
    valid(
        "multi-entry-devfile",
        r#"
schemaVersion: 2.2.0
components:
  # Every component is read, not only the first.
  - {name: cache, volume: {size: 1Gi}}
  - name: tools
    attributes: {gl/inject-editor: true}
    container:
      image: registry.example.com/tools:1
      endpoints:
        - {name: web, targetPort: 3101, protocol: http, exposure: none}
        - {name: api, targetPort: 3102, protocol: http, exposure: none}
commands:
  - {id: build, exec: {component: tools, commandLine: make build}}
  - {id: refresh, apply: {component: tools}}
events: {}
variables: {}
"#,
    ),
    refused(
        "invalid-attributes-override-command-with-command-args-present-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: tooling-container
    attributes: {gl/inject-editor: true, overrideCommand: true}
    container: {image: registry.example.com/tools:1, command: [sleep], args: [infinity]}
"#,
        &["Properties 'command', 'args' for component 'tooling-container' can only be specified when the \
           'overrideCommand' attribute is set to false"],
    ),
    // overrideCommand is the string "true".
    refused(
        "invalid-attributes-override-command-with-non-boolean-value-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: tooling-container
    attributes: {gl/inject-editor: true, overrideCommand: "true"}
    container: {image: registry.example.com/tools:1, command: [sleep], args: [infinity]}
"#,
        &["Property 'overrideCommand' of component 'tooling-container' must be a boolean (true or false)"],
    ),
    refused(
        "invalid-attributes-tools-injector-multiple-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: tooling-container, attributes: {gl/inject-editor: true}, container: {image: registry.example.com/tools:1}}
  - {name: tooling-container-2, attributes: {gl/inject-editor: true}, container: {image: registry.example.com/tools:2}}
"#,
        &["Multiple components '[\"tooling-container\", \"tooling-container-2\"]' have 'gl/inject-editor' attribute"],
    ),
    // The commands are the booleans true and false.
    refused_with_all(
        "invalid-command-field-type-devfile",
        with_main!("commands:\n  - true\n  - false\n"),
        &["'command' must be a Hash", "'command' must be a Hash"],
    ),
    refused(
        "invalid-command-missing-component-devfile",
        with_main!("commands: [{id: missing-component-command, exec: {commandLine: make test}}]\n"),
        &["'exec' command 'missing-component-command' must specify a 'component'"],
    ),
    refused("invalid-commands-field-type-devfile", with_main!("commands: false\n"), &["'Commands' must be an Array"]),
    // GitLab also reports "No component has 'gl/inject-editor' attribute", third; wsync takes the container.
    refused_with_all(
        "invalid-component-attributes-field-type-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: gl-example, attributes: 42, container: {image: registry.example.com/tools:1}}
"#,
        &[
            "Component name 'gl-example' must not start with 'gl-'",
            "'attributes' for component 'gl-example' must be a Hash",
            "'attributes' in component 'gl-example' must be a Hash",
        ],
    ),
    // The only component is a string.
    refused_with_all(
        "invalid-component-field-type-devfile",
        "schemaVersion: 2.2.0\ncomponents:\n  - tools\n",
        &["Each element in 'components' must be a Hash", "No component has 'gl/inject-editor' attribute"],
    ),
    refused(
        "invalid-component-missing-name",
        r#"
schemaVersion: 2.2.0
components:
  - {nmae: example, attributes: {gl/inject-editor: true}, container: {image: registry.example.com/tools:1}}
"#,
        &["A component must have a 'name'"],
    ),
    // The name is a list.
    refused(
        "invalid-component-name-field-type-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: [web, db], attributes: {gl/inject-editor: true}, container: {image: registry.example.com/tools:1}}
"#,
        &["'Component name' must be a String"],
    ),
    refused(
        "invalid-components-attributes-container-overrides-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: example
    attributes: {gl/inject-editor: true, container-overrides: {securityContext: {privileged: true}}}
    container: {image: registry.example.com/tools:1}
"#,
        &["Attribute 'container-overrides' is not yet supported"],
    ),
    refused(
        "invalid-components-attributes-pod-overrides-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: example
    attributes: {gl/inject-editor: true, pod-overrides: {spec: {hostNetwork: true}}}
    container: {image: registry.example.com/tools:1}
"#,
        &["Attribute 'pod-overrides' is not yet supported"],
    ),
    refused(
        "invalid-components-entry-empty-devfile",
        "schemaVersion: 2.2.0\ncomponents: []\n",
        &["No components present in devfile"],
    ),
    // The whole message is GitLab's main_integration_spec's.
    refused_with_all(
        "invalid-components-entry-missing-devfile",
        "schemaVersion: 2.2.0\ncommands: []\nevents: {}\n",
        &["No components present in devfile"],
    ),
    refused(
        "invalid-components-field-type-devfile",
        "schemaVersion: 2.2.0\ncomponents: 3\n",
        &["'Components' must be an Array"],
    ),
    refused_with_all(
        "invalid-container-field-type-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: gl-example, attributes: {gl/inject-editor: true}, container: 8}
"#,
        &[
            "Component name 'gl-example' must not start with 'gl-'",
            "'container' in component 'gl-example' must be a Hash",
        ],
    ),
    refused(
        "invalid-endpoints-field-type-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: example
    attributes: {gl/inject-editor: true}
    container: {image: registry.example.com/tools:1, endpoints: true}
"#,
        &["'Endpoints' must be an Array"],
    ),
    refused("invalid-events-field-type-devfile", with_main!("events: 7\n"), &["'Events' must be a Hash"]),
    refused_with_all(
        "invalid-invalid-schema-version-devfile",
        with_main!("schemaVersion: example\n", ""),
        &["Invalid 'schemaVersion' 'example'", "'schemaVersion' 'example' is not supported, it must be '2.2.0'"],
    ),
    // Every command is read, not only the first.
    refused(
        "invalid-multi-command-devfile",
        with_main!(
            r#"commands:
  - {id: build, apply: {component: example}}
  - {id: example-invalid-second-component-command, apply: {component: gl-example-invalid-component}}
"#
        ),
        &["Component name 'gl-example-invalid-component' for command id 'example-invalid-second-component-command' \
           must not start with 'gl-'"],
    ),
    refused(
        "invalid-multi-component-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: cache, volume: {size: 1Gi}}
  - name: gl-example-invalid-second-component
    attributes: {gl/inject-editor: true}
    container: {image: registry.example.com/tools:1}
"#,
        &["Component name 'gl-example-invalid-second-component' must not start with 'gl-'"],
    ),
    refused(
        "invalid-multi-endpoint-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: cache, volume: {size: 1Gi}}
  - name: example-invalid-second-component
    attributes: {gl/inject-editor: true}
    container:
      image: registry.example.com/tools:1
      endpoints: [{name: web, targetPort: 8080}, {name: gl-example-invalid-second-endpoint, targetPort: 8081}]
"#,
        &["Endpoint name 'gl-example-invalid-second-endpoint' of component 'example-invalid-second-component' must \
           not start with 'gl-'"],
    ),
    refused(
        "invalid-multi-event-devfile",
        with_main!(
            r#"commands: [{id: prepare, apply: {component: example}}]
events: {preStart: [prepare, gl-example]}
"#
        ),
        &["Event 'gl-example' of type 'preStart' must not start with 'gl-'"],
    ),
    refused(
        "invalid-multi-variable-devfile",
        with_main!("variables: {version: '1', gl-example-invalid: '2'}\n"),
        &["Variable name 'gl-example-invalid' must not start with 'gl-'"],
    ),
    // The whole message is GitLab's main_integration_spec's.
    refused_with_all(
        "invalid-multiple-errors-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: cache, volume: {size: 1Gi}}
  - name: example-invalid-second-component
    attributes: {gl/inject-editor: true}
    container:
      image: registry.example.com/tools:1
      endpoints: [{name: web, targetPort: 8080}, {name: gl-example-invalid-second-endpoint, targetPort: 8081}]
events:
  preStart: [prepare, gl-example]
"#,
        &[
            "Endpoint name 'gl-example-invalid-second-endpoint' of component 'example-invalid-second-component' \
             must not start with 'gl-'",
            "Event 'gl-example' of type 'preStart' must not start with 'gl-'",
        ],
    ),
    refused("invalid-no-elements-devfile", "schemaVersion: 2.2.0\n", &["No components present in devfile"]),
    // What GitLab's flattener makes of the one above; `events` is a flow mapping spread over lines.
    refused(
        "invalid-no-elements-flattened-devfile",
        r#"
schemaVersion: 2.2.0
metadata: {}
components: []
commands: []
events: {
  preStart: [],
  postStart: []
}
variables: {}
"#,
        &["No components present in devfile"],
    ),
    refused(
        "invalid-poststart-event-nonexistent-command-devfile",
        with_main!(
            r#"commands: [{id: build, exec: {component: example, commandLine: make}}]
events: {postStart: [nonexistent-command]}
"#
        ),
        &["PostStart event references command 'nonexistent-command' which has no command definition."],
    ),
    refused(
        "invalid-restricted-prefix-command-apply-component-name-devfile",
        with_main!("commands: [{id: example, apply: {component: gl-example}}]\n"),
        &["Component name 'gl-example' for command id 'example' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-command-apply-label-devfile",
        with_main!("commands: [{id: example, apply: {component: example, label: gl-example}}]\n"),
        &["Label 'gl-example' for command id 'example' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-command-exec-component-name-devfile",
        with_main!("commands: [{id: example, exec: {component: gl-example, commandLine: make}}]\n"),
        &["Component name 'gl-example' for command id 'example' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-command-exec-label-devfile",
        with_main!("commands: [{id: example, exec: {component: example, commandLine: make, label: gl-example}}]\n"),
        &["Label 'gl-example' for command id 'example' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-command-name-devfile",
        with_main!("commands: [{id: gl-example, exec: {component: example, commandLine: make}}]\n"),
        &["Command id 'gl-example' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-component-container-endpoint-name-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: example
    attributes: {gl/inject-editor: true}
    container: {image: registry.example.com/tools:1, endpoints: [{name: gl-example, targetPort: 8080}]}
"#,
        &["Endpoint name 'gl-example' of component 'example' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-component-name-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: gl-example, attributes: {gl/inject-editor: true}, container: {image: registry.example.com/tools:1}}
"#,
        &["Component name 'gl-example' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-event-type-prestart-name-devfile",
        with_main!("commands: [{id: prepare, apply: {component: example}}]\nevents: {preStart: [gl-example]}\n"),
        &["Event 'gl-example' of type 'preStart' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-variable-name-devfile",
        with_main!("variables: {gl-example: '1'}\n"),
        &["Variable name 'gl-example' must not start with 'gl-'"],
    ),
    refused(
        "invalid-restricted-prefix-variable-name-with-underscore-devfile",
        with_main!("variables: {gl_example: '1'}\n"),
        &["Variable name 'gl_example' must not start with 'gl_'"],
    ),
    refused(
        "invalid-root-attributes-field-type-devfile",
        with_main!("schemaVersion: 2.2.0\nattributes: editor\n", ""),
        &["'Attributes' must be a Hash"],
    ),
    refused(
        "invalid-root-attributes-pod-overrides-devfile",
        with_main!("schemaVersion: 2.2.0\nattributes: {pod-overrides: {spec: {hostNetwork: true}}}\n", ""),
        &["Attribute 'pod-overrides' is not yet supported"],
    ),
    // A flow mapping whose keys are the floats 2.1 and 2.2, with null values.
    refused(
        "invalid-schema-version-field-type-devfile",
        with_main!("schemaVersion: { 2.1, 2.2 }\n", ""),
        &["'schemaVersion' must be a String"],
    ),
    refused(
        "invalid-unsupported-command-exec-hot-reload-capable-option-devfile",
        with_main!(
            r#"commands:
  - id: unsupported-hot-reload-option
    exec: {component: example, commandLine: make watch, hotReloadCapable: true}
"#
        ),
        &["Property 'hotReloadCapable' for exec command 'unsupported-hot-reload-option' must be false when specified"],
    ),
    refused(
        "invalid-unsupported-command-exec-options-devfile",
        with_main!(
            r#"commands:
  - id: unsupported-options
    exec: {component: example, commandLine: make, unsupportedOption: true}
"#
        ),
        &["Unsupported options 'unsupportedOption' for exec command 'unsupported-options'. Only 'commandLine, \
           component, label, hotReloadCapable, workingDir' are supported."],
    ),
    refused(
        "invalid-unsupported-command-type-devfile",
        with_main!("commands: [{id: composite-command, composite: {commands: []}}]\n"),
        &["Command 'composite-command' must have one of the supported command types: exec, apply"],
    ),
    refused(
        "invalid-unsupported-command-type-poststart-event-devfile",
        with_main!(
            r#"commands: [{id: apply-command, apply: {component: example}}]
events: {postStart: [apply-command]}
"#
        ),
        &["PostStart event references command 'apply-command' which is not an exec command. Only exec commands are \
           supported in postStart events"],
    ),
    refused(
        "invalid-unsupported-component-container-dedicated-pod-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: example
    attributes: {gl/inject-editor: true}
    container: {image: registry.example.com/tools:1, dedicatedPod: true}
"#,
        &["Property 'dedicatedPod' of component 'example' is not yet supported"],
    ),
    // Refused as written only: the flattener itself sets it.
    Case {
        fixture: "invalid-unsupported-component-container-mount-sources-devfile",
        pass: Pass::AsWritten,
        whole: false,
        yaml: r#"
schemaVersion: 2.2.0
components:
  - name: example
    attributes: {gl/inject-editor: true}
    container: {image: registry.example.com/tools:1, mountSources: true}
"#,
        expect: &["Property 'mountSources' of component 'example' is not yet supported"],
    },
    refused(
        "invalid-unsupported-component-container-source-mapping-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: example
    attributes: {gl/inject-editor: true}
    container: {image: registry.example.com/tools:1, sourceMapping: /src}
"#,
        &["Property 'sourceMapping' of component 'example' is not yet supported"],
    ),
    refused(
        "invalid-unsupported-component-type-image-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - name: example
    attributes: {gl/inject-editor: true}
    image: {imageName: registry.example.com/app:dev, dockerfile: {uri: Dockerfile}}
"#,
        &["Component type 'image' is not yet supported"],
    ),
    refused(
        "invalid-unsupported-component-type-kubernetes-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: example, attributes: {gl/inject-editor: true}, kubernetes: {uri: deploy/job.yaml}}
"#,
        &["Component type 'kubernetes' is not yet supported"],
    ),
    refused(
        "invalid-unsupported-component-type-openshift-devfile",
        r#"
schemaVersion: 2.2.0
components:
  - {name: example, attributes: {gl/inject-editor: true}, openshift: {uri: deploy/job.yaml}}
"#,
        &["Component type 'openshift' is not yet supported"],
    ),
    refused(
        "invalid-unsupported-event-type-poststop-devfile",
        with_main!("commands: [{id: cleanup, apply: {component: example}}]\nevents: {postStop: [cleanup]}\n"),
        &["Event type 'postStop' is not yet supported"],
    ),
    refused(
        "invalid-unsupported-event-type-prestop-devfile",
        with_main!(
            r#"commands: [{id: cleanup, exec: {component: example, commandLine: make clean}}]
events: {preStop: [cleanup]}
"#
        ),
        &["Event type 'preStop' is not yet supported"],
    ),
    refused(
        "invalid-unsupported-parent-inheritance-devfile",
        with_main!("schemaVersion: 2.2.0\nparent: {id: base, registryUrl: https://registry.example.com}\n", ""),
        &["Inheriting from 'parent' is not yet supported"],
    ),
    refused(
        "invalid-unsupported-schema-version-devfile",
        with_main!("schemaVersion: 2.0.0\n", ""),
        &["'schemaVersion' '2.0.0' is not supported, it must be '2.2.0'"],
    ),
    refused(
        "invalid-unsupported-starter-projects-devfile",
        with_main!(
            r#"starterProjects:
  - name: starter
    git: {remotes: {origin: https://git.example.com/group/starter.git}}
"#
        ),
        &["'starterProjects' is not yet supported"],
    ),
    refused("invalid-variables-field-type-devfile", with_main!("variables: 3\n"), &["'Variables' must be a Hash"]),
    refused_with_all(
        "invalid-volume-component-name-too-long-devfile",
        "schemaVersion: 2.2.0\ncomponents: [{name: a-volume-name-of-twenty-eight-or-more, volume: {size: 1Gi}}]\n",
        &["Volume's name must be less than 28 characters", "No component has 'gl/inject-editor' attribute"],
    ),
];

/// GitLab: "'projects' is not yet supported". wsync clones them, so this one passes every stage.
const PROJECTS: Case = refused(
    "invalid-unsupported-projects-devfile",
    with_main!(
        r#"projects:
  - name: app
    git:
      checkoutFrom: {remote: origin, revision: main}
      remotes: {origin: https://git.example.com/group/app.git}
"#
    ),
    &["'projects' is not yet supported"],
);

/// GitLab wants a component marked; wsync takes the first container as the main one.
const NO_MAIN_MARKED: Case = refused(
    "invalid-attributes-tools-injector-absent-devfile",
    "schemaVersion: 2.2.0\ncomponents: [{name: tooling-container, container: {image: registry.example.com/tools:1}}]\n",
    &["No component has 'gl/inject-editor' attribute"],
);

/// GitLab's flattener refuses it by the schema, in these words. GitLab's also breaks restrictions; this one keeps
/// to them, so that only the schema can refuse it.
const EXTRA_FIELD: Case = Case {
    fixture: "invalid-extra-field-devfile",
    pass: Pass::AsWritten,
    whole: false,
    yaml: with_main!("random: x\nschemaVersion: 2.2.0\n", ""),
    expect: &["(root): Additional property random is not allowed"],
};

fn read(fixture: &str, yaml: &str) -> Value {
    crate::yaml::parse_devfile(yaml.as_bytes()).unwrap_or_else(|e| panic!("{fixture}: {e}"))
}

fn messages(fixture: &str, yaml: &str, pass: Pass) -> Vec<String> {
    violations(&read(fixture, yaml), pass).into_iter().map(|v| v.message).collect()
}

fn joined(violations: &[Violation]) -> String {
    violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

#[test]
fn every_refused_gitlab_fixture_is_refused_in_its_words() {
    // With PROJECTS, NO_MAIN_MARKED and EXTRA_FIELD: one case per fixture.
    assert_eq!(CASES.len() + 3, 66);
    let mut disagreements = Vec::new();
    for case in CASES.iter().filter(|case| !case.expect.is_empty()) {
        let found = messages(case.fixture, case.yaml, case.pass);
        let agrees = if case.whole {
            found == case.expect
        } else {
            case.expect.iter().all(|expected| found.iter().any(|message| message == expected))
        };
        if !agrees {
            let how = if case.whole { "exactly" } else { "among others" };
            disagreements.push(format!("{}: expected {how} {:#?}\nfound {found:#?}", case.fixture, case.expect));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

#[test]
fn gitlabs_valid_fixtures_pass_every_stage() {
    let valid: Vec<&Case> = CASES.iter().filter(|case| case.expect.is_empty()).collect();
    assert_eq!(valid.len(), 5);
    for case in valid {
        let devfile = read(case.fixture, case.yaml);
        // The flattener's output carries `mountSources: true`, which only the second pass allows.
        let flattener_output = case.fixture.starts_with("flattened");
        let passes: &[Pass] = if flattener_output { &[Pass::Flattened] } else { &[Pass::AsWritten, Pass::Flattened] };
        for &pass in passes {
            let found = violations(&devfile, pass);
            assert!(found.is_empty(), "{} ({pass:?}): {}", case.fixture, joined(&found));
        }
        if !flattener_output && let Err(refusal) = accept(case.yaml.as_bytes()) {
            panic!("{}: refused: {}", case.fixture, joined(&refusal.violations));
        }
    }
}

#[test]
fn the_deliberate_differences() {
    for pass in [Pass::AsWritten, Pass::Flattened] {
        let found = messages(PROJECTS.fixture, PROJECTS.yaml, pass);
        assert!(!found.iter().any(|message| message.contains("projects")), "{}: {found:#?}", PROJECTS.fixture);
    }
    if let Err(refusal) = accept(PROJECTS.yaml.as_bytes()) {
        panic!("{}: refused: {}", PROJECTS.fixture, joined(&refusal.violations));
    }
    let unmarked = read(NO_MAIN_MARKED.fixture, NO_MAIN_MARKED.yaml);
    assert_eq!(violations(&unmarked, NO_MAIN_MARKED.pass), vec![], "the first container is the main one");
    let no_container = "schemaVersion: 2.2.0\ncomponents: [{name: cache, volume: {size: 1Gi}}]\n";
    assert_eq!(messages("a volume and no container", no_container, Pass::Flattened), NO_MAIN_MARKED.expect);
}

#[test]
fn a_devfile_with_a_field_the_schema_lacks_is_refused_by_the_schema() {
    let devfile = read(EXTRA_FIELD.fixture, EXTRA_FIELD.yaml);
    assert_eq!(violations(&devfile, EXTRA_FIELD.pass), vec![], "unknown fields are the schema's to refuse");
    let Err(refusal) = accept(EXTRA_FIELD.yaml.as_bytes()) else {
        panic!("{}: accepted", EXTRA_FIELD.fixture);
    };
    assert!(
        refusal.violations.iter().any(|v| matches!(v.path.as_str(), "(root)" | "") && v.message.contains("random")),
        "{}: {}",
        EXTRA_FIELD.fixture,
        joined(&refusal.violations)
    );
}
