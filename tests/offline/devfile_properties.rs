//! The devfile's contract between the halves (#40), over generated devfiles: whatever the
//! control plane accepts builds a config the agent's own apply policy takes whole, within the
//! protocol's size; nothing generated, valid or not, panics the check or the builder.

use proptest::prelude::*;
use serde_json::{Value, json};
use std::sync::Arc;
use wsync::agent::policy::kinds::DEFAULT_ALLOWED_KINDS;
use wsync::agent::policy::plan::{ApplyPolicy, plan};
use wsync::control_plane::decisions::agent_config::AgentConfig;
use wsync::control_plane::decisions::config_builder::{Resources, WorkspaceSpec, build};
use wsync::control_plane::decisions::devfile::accept;
use wsync::control_plane::model::{NewWorkspace, Workspace};
use wsync::protocol::DesiredState;

fn one_of(values: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    proptest::sample::select(values)
}

/// Mostly a good value, now and then a bad one: so that both sides of the check are reached.
fn mostly(good: &'static [&'static str], bad: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    prop_oneof![12 => one_of(good), 1 => one_of(bad)]
}

const QUANTITIES: &[&str] = &["512Mi", "1Gi", "100m", "2", "1e3"];
const BAD_QUANTITIES: &[&str] = &["bad", "-1", "1GB"];

/// One container component, `c{index}`, with volumes `v0..v{volumes}` to mount.
fn container(index: usize, volumes: usize) -> impl Strategy<Value = Value> {
    (
        mostly(&["registry.example.com/tools:1", "busybox:1.36"], &["", "two words"]),
        proptest::option::of(proptest::collection::vec(one_of(&["sh", "-c", "sleep 1"]), 1..3)),
        proptest::collection::vec(
            (
                mostly(&["", "public", "internal", "none"], &["https", "udp"]),
                prop_oneof![12 => Just(true), 1 => Just(false)],
            ),
            0..3,
        ),
        proptest::collection::vec(
            (0..volumes.max(1), mostly(&["", "/mnt/x"], &["relative", "/projects"])),
            0..volumes.min(2).saturating_add(1),
        ),
        proptest::collection::vec(mostly(&["A", "B_1", "C.d"], &["PROJECT_SOURCE", "1x"]), 0..3),
        (
            proptest::option::of(mostly(QUANTITIES, BAD_QUANTITIES)),
            proptest::option::of(mostly(QUANTITIES, BAD_QUANTITIES)),
        ),
        (proptest::option::of(any::<bool>()), any::<bool>(), mostly(&[""], &["gl-"])),
    )
        .prop_map(move |(image, command, endpoints, mounts, env, (memory, cpu), (mount_sources, main, prefix))| {
            let endpoints: Vec<Value> = endpoints
                .iter()
                .enumerate()
                .map(|(k, (exposure, good_port))| {
                    let port = if *good_port { 2000 + 100 * index + k } else { 70_000 };
                    let mut endpoint = json!({"name": format!("e{index}{k}"), "targetPort": port});
                    match *exposure {
                        "" => {}
                        "https" | "udp" => endpoint["protocol"] = json!(exposure),
                        _ => endpoint["exposure"] = json!(exposure),
                    }
                    endpoint
                })
                .collect();
            let mut container = json!({"image": image, "endpoints": endpoints});
            let mut attributes = json!({});
            if let Some(command) = command {
                container["command"] = json!(command);
                attributes["overrideCommand"] = json!(false);
            }
            if volumes > 0 {
                let mut seen = std::collections::BTreeSet::new();
                container["volumeMounts"] = mounts
                    .iter()
                    .filter(|(v, _)| seen.insert(*v))
                    .map(|(v, path)| match *path {
                        "" => json!({"name": format!("v{v}")}),
                        "/mnt/x" => json!({"name": format!("v{v}"), "path": format!("/mnt/v{v}")}),
                        path => json!({"name": format!("v{v}"), "path": path}),
                    })
                    .collect();
            }
            let mut names = std::collections::BTreeSet::new();
            container["env"] = env
                .iter()
                .filter(|n| names.insert(**n))
                .map(|name| json!({"name": name, "value": "{{var}}"}))
                .collect();
            if let Some(memory) = memory {
                container["memoryLimit"] = json!(memory);
            }
            if let Some(cpu) = cpu {
                container["cpuRequest"] = json!(cpu);
            }
            if let Some(mount) = mount_sources {
                container["mountSources"] = json!(mount);
            }
            if main && index == 0 {
                attributes["gl/inject-editor"] = json!(true);
            }
            json!({"name": format!("{prefix}c{index}"), "attributes": attributes, "container": container})
        })
}

fn volume(index: usize) -> impl Strategy<Value = Value> {
    (proptest::option::of(mostly(QUANTITIES, BAD_QUANTITIES)), proptest::option::of(any::<bool>())).prop_map(
        move |(size, ephemeral)| {
            let mut volume = json!({});
            if let Some(size) = size {
                volume["size"] = json!(size);
            }
            if let Some(e) = ephemeral {
                volume["ephemeral"] = json!(e);
            }
            json!({"name": format!("v{index}"), "volume": volume})
        },
    )
}

fn project(index: usize) -> impl Strategy<Value = Value> {
    (
        mostly(&["", "nested/dir"], &["../up"]),
        mostly(&["https://git.example.com/app.git", "git://h/a"], &["ext::sh -c x", "-uflag"]),
        mostly(&["", "main"], &["-x"]),
    )
        .prop_map(move |(path, remote, revision)| {
            let mut git = json!({"remotes": {"origin": remote}});
            if !revision.is_empty() {
                git["checkoutFrom"] = json!({"revision": revision});
            }
            let mut project = json!({"name": format!("p{index}"), "git": git});
            if !path.is_empty() {
                project["clonePath"] = json!(format!("{path}{index}"));
            }
            project
        })
}

fn devfile() -> impl Strategy<Value = Value> {
    (1usize..4, 0usize..3, 0usize..4, 0usize..3)
        .prop_flat_map(|(containers, volumes, commands, projects)| {
            let components: Vec<_> = (0..containers).map(|i| container(i, volumes).boxed())
                .chain((0..volumes).map(|i| volume(i).boxed())).collect();
            let commands = proptest::collection::vec((0..containers + 1, any::<bool>(), mostly(&["", "/tmp", "$PROJECT_SOURCE/x", "it's"], &[""])), commands);
            let projects: Vec<_> = (0..projects).map(project).collect();
            (components, commands, projects, any::<u8>(), any::<u8>())
        })
        .prop_map(|(components, commands, projects, pre, post)| {
            let commands: Vec<Value> = commands.iter().enumerate().map(|(n, (target, exec, dir))| {
                let component = format!("c{target}");
                match (exec, *dir) {
                    (true, "") => json!({"id": format!("k{n}"), "exec": {"component": component, "commandLine": "echo 'hi' > f"}}),
                    (true, dir) => json!({"id": format!("k{n}"), "exec": {"component": component, "commandLine": "make", "workingDir": dir}}),
                    (false, _) => json!({"id": format!("k{n}"), "apply": {"component": component}}),
                }
            }).collect();
            let ids = |apply: bool, mask: u8| -> Vec<String> {
                commands.iter().enumerate()
                    .filter(|(n, c)| c.get("apply").is_some() == apply && mask & (1 << (n % 8)) != 0)
                    .map(|(n, _)| format!("k{n}")).collect()
            };
            json!({
                "schemaVersion": "2.2.0",
                "variables": {"var": "value"},
                "components": components,
                "events": {"preStart": ids(true, pre), "postStart": ids(false, post)},
                "commands": commands,
                "projects": projects,
            })
        })
}

fn config_of(devfile: wsync::control_plane::decisions::devfile::model::Devfile) -> String {
    let new = NewWorkspace { devfile_accepted: Some(Arc::new(devfile)), ..NewWorkspace::new("web", "") };
    let workspace = Workspace::created("1", "wsync-1-web", new, AgentConfig::before_settings().into(), 0);
    let label_key = wsync::protocol::inventory::DEFAULT_WORKSPACE_LABEL_KEY;
    let spec = WorkspaceSpec { workspace: &workspace, label_key, image_pull_secrets: &[] };
    build(&spec, DesiredState::Running, Resources::All).expect("a config")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    /// Accepted or refused in words; what is accepted, the agent takes whole.
    #[test]
    fn an_accepted_devfile_builds_what_the_agent_applies(devfile in devfile()) {
        let yaml = wsync::yaml::to_string(&devfile).expect("yaml");
        match accept(yaml.as_bytes()) {
            Err(refusal) => prop_assert!(!refusal.violations.is_empty(), "a refusal says why"),
            Ok(accepted) => {
                let config = config_of(accepted.devfile);
                prop_assert!(config.len() <= wsync::yaml::MAX_CONFIG_BYTES);
                let objects = wsync::yaml::parse_objects(&config).expect("the agent parses it");
                let policy = ApplyPolicy::new(DEFAULT_ALLOWED_KINDS.iter().copied(), "wsync-system");
                let planned = plan(objects, "wsync-1-web", &policy, |_| true);
                prop_assert!(planned.is_ok(), "{yaml}\n{config}\n{:?}", planned.err());
            }
        }
    }

    /// Any text, any bytes: a refusal, never a panic.
    #[test]
    fn no_text_panics_the_check(text in ".{0,300}", bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = accept(text.as_bytes());
        let _ = accept(&bytes);
        let _ = accept(format!("schemaVersion: 2.2.0\ncomponents:\n- {text}").as_bytes());
    }
}

/// The generator reaches devfiles that are accepted, with every part: else the property
/// above would hold of refusals alone.
#[test]
fn the_generator_reaches_accepted_devfiles_with_every_part() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut accepted = [0usize; 5];
    for _ in 0..4000 {
        let devfile = devfile().new_tree(&mut runner).expect("a devfile").current();
        let yaml = wsync::yaml::to_string(&devfile).expect("yaml");
        let Ok(ok) = accept(yaml.as_bytes()) else { continue };
        let d = &ok.devfile;
        accepted[0] += 1;
        accepted[1] += usize::from(!d.projects.is_empty());
        accepted[2] += usize::from(!d.events.post_start.is_empty());
        accepted[3] += usize::from(!d.events.pre_start.is_empty());
        accepted[4] += usize::from(d.components.iter().any(|c| c.volume.is_some()));
    }
    assert!(accepted.iter().all(|n| *n > 0), "accepted, with projects, postStart, preStart, volumes: {accepted:?}");
}
