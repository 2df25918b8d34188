//! A workspace's Pod from its flattened devfile (#40), as GitLab's desired config builds it
//! (docs/devfile-gitlab-facts.md §2): a container per container component, in order; an
//! init container per preStart apply command; a volume per volume component (a claim unless
//! ephemeral); the projects volume at /projects; the postStart commands in a scripts
//! ConfigMap, run by a lifecycle hook. Two differences: projects are cloned by an init
//! container (GitLab clones its own project in postStart), and the postStart commands run
//! one after another in the hook, the first failure failing it with its output's tail, so
//! that the agent reports it (GitLab runs the user's in the background and ignores failure).

use super::pod_parts::PodParts;
use crate::control_plane::decisions::agent_config::AgentConfig;
use crate::control_plane::decisions::devfile::model::{Component, Container, Devfile, VOLUME_SIZE};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// GitLab's projects volume: its name, where it is mounted, and its claim's size.
pub const PROJECTS_VOLUME: &str = "gl-workspace-data";
pub const PROJECTS_ROOT: &str = "/projects";
pub const PROJECTS_SIZE: &str = "50Gi";
/// The postStart scripts, as GitLab mounts them.
pub const SCRIPTS_VOLUME: &str = "gl-workspace-scripts";
pub const SCRIPTS_ROOT: &str = "/workspace-scripts";
/// The init container that clones the projects.
pub const PROJECT_CLONER: &str = "gl-project-cloner";
/// What GitLab runs in a main container whose command it overrides: it stays up.
const KEEP_ALIVE: [&str; 3] = ["/bin/sh", "-c", "tail -f /dev/null\n"];
const RUNNER: &str = "gl-run-poststart-commands.sh";

/// The Pod of workspace `name` from `devfile`; `config` gives each container its defaults.
pub fn from_devfile(name: &str, devfile: &Devfile, config: &AgentConfig) -> PodParts {
    let main = devfile.main_component().map(|c| c.name.as_str());
    let source = project_source(devfile);
    let applied: Vec<&str> = devfile
        .events
        .pre_start
        .iter()
        .filter_map(|id| devfile.command(id)?.apply.as_ref().map(|apply| apply.component.as_str()))
        .collect();
    let post_start = post_start_commands(devfile);
    let mut parts = PodParts::default();
    let containers = devfile.components.iter().filter_map(|c| c.container.as_ref());
    let mounts_projects = !devfile.projects.is_empty() || containers.clone().any(Container::mounts_sources);
    for component in &devfile.components {
        let Some(container) = &component.container else { continue };
        if applied.contains(&component.name.as_str()) {
            continue;
        }
        let is_main = main == Some(component.name.as_str());
        let mut built = container_of(component, container, &source, config);
        if component.overrides_command(is_main) {
            built["command"] = json!(KEEP_ALIVE[..2]);
            built["args"] = json!(KEEP_ALIVE[2..]);
        }
        let mut ports = Vec::new();
        for endpoint in container.declared_endpoints() {
            let (name, port) = (&endpoint.name, endpoint.target_port);
            ports.push(json!({ "containerPort": port, "name": name, "protocol": "TCP" }));
            parts.service_ports.push(json!({ "name": name, "port": port, "protocol": "TCP", "targetPort": port }));
        }
        if !ports.is_empty() {
            built["ports"] = Value::from(ports);
        }
        if post_start.iter().any(|(c, _)| *c == component.name) {
            let runner = format!("{SCRIPTS_ROOT}/{}/{RUNNER}", component.name);
            built["lifecycle"] = json!({ "postStart": { "exec": { "command": ["/bin/sh", runner] } } });
            push_mount(&mut built, SCRIPTS_VOLUME, SCRIPTS_ROOT);
        }
        parts.containers.push(built);
    }
    if let Some(mut cloner) = project_cloner(devfile) {
        if let Some(resources) = config.container_resources(None) {
            cloner["resources"] = resources;
        }
        parts.init_containers.push(cloner);
    }
    for (index, id) in devfile.events.pre_start.iter().enumerate() {
        let Some(apply) = devfile.command(id).and_then(|command| command.apply.as_ref()) else { continue };
        let Some(component) = devfile.component(&apply.component) else { continue };
        let Some(container) = &component.container else { continue };
        let mut built = container_of(component, container, &source, config);
        built["name"] = Value::from(Devfile::init_container_name(&component.name, id, index));
        parts.init_containers.push(built);
    }
    for component in &devfile.components {
        let Some(volume) = &component.volume else { continue };
        if volume.ephemeral == Some(true) {
            let empty_dir = match &volume.size {
                Some(size) => json!({ "sizeLimit": size }),
                None => json!({}),
            };
            parts.volumes.push(json!({ "name": component.name, "emptyDir": empty_dir }));
        } else {
            let claim = format!("{name}-{}", component.name);
            parts.volumes.push(json!({ "name": component.name, "persistentVolumeClaim": { "claimName": claim } }));
            parts.claims.push((claim, volume.size.clone().unwrap_or_else(|| VOLUME_SIZE.into())));
        }
    }
    if mounts_projects {
        let claim = format!("{name}-{PROJECTS_VOLUME}");
        parts.volumes.push(json!({ "name": PROJECTS_VOLUME, "persistentVolumeClaim": { "claimName": claim } }));
        parts.claims.push((claim, PROJECTS_SIZE.into()));
    }
    if !post_start.is_empty() {
        let configmap = format!("{name}-scripts-configmap");
        let (data, items) = scripts(devfile, &post_start, main, &source);
        let source = json!({ "configMap": { "name": configmap, "items": items } });
        parts
            .volumes
            .push(json!({ "name": SCRIPTS_VOLUME, "projected": { "defaultMode": 0o555, "sources": [source] } }));
        parts.scripts = Some((configmap, data));
    }
    parts
}

/// What the agent's settings make of a devfile that Kubernetes would refuse: a request the
/// devfile sets above a limit the agent's defaults set (or the other way round).
pub fn refused_with(devfile: &Devfile, config: &AgentConfig) -> Vec<String> {
    use crate::control_plane::decisions::devfile::kubernetes_values::quantity;
    let mut refused = Vec::new();
    for component in &devfile.components {
        let Some(container) = &component.container else { continue };
        let Some(resources) = resources(container, config) else { continue };
        for kind in ["cpu", "memory"] {
            let amount = |scope: &str| resources[scope][kind].as_str().and_then(quantity);
            if let (Some(request), Some(limit)) = (amount("requests"), amount("limits"))
                && request > limit
            {
                refused.push(format!(
                    "component '{}': its {kind} request {} is above its {kind} limit {} (the agent's default fills \
                     what the devfile leaves out): set both",
                    component.name, resources["requests"][kind], resources["limits"][kind]
                ));
            }
        }
    }
    refused
}

/// `$PROJECT_SOURCE`: the first project's checkout, else the projects' root.
fn project_source(devfile: &Devfile) -> String {
    match devfile.projects.first() {
        Some(project) => format!("{PROJECTS_ROOT}/{}", project.directory()),
        None => PROJECTS_ROOT.into(),
    }
}

/// One container component as a container: what the devfile says, its resources over the
/// agent's defaults, and the projects where its sources are mounted.
fn container_of(component: &Component, container: &Container, source: &str, config: &AgentConfig) -> Value {
    let mut built = json!({ "name": component.name, "image": container.image });
    if !container.command.is_empty() {
        built["command"] = json!(container.command);
    }
    if !container.args.is_empty() {
        built["args"] = json!(container.args);
    }
    let mut env: Vec<Value> = container.env.iter().map(|v| json!({ "name": v.name, "value": v.value })).collect();
    if container.mounts_sources() {
        env.push(json!({ "name": "PROJECTS_ROOT", "value": PROJECTS_ROOT }));
        env.push(json!({ "name": "PROJECT_SOURCE", "value": source }));
    }
    if !env.is_empty() {
        built["env"] = Value::from(env);
    }
    if let Some(resources) = resources(container, config) {
        built["resources"] = resources;
    }
    for mount in &container.volume_mounts {
        let path = mount.path.clone().unwrap_or_else(|| format!("/{}", mount.name));
        push_mount(&mut built, &mount.name, &path);
    }
    if container.mounts_sources() {
        let path = container.source_mapping.as_deref().filter(|p| !p.is_empty()).unwrap_or(PROJECTS_ROOT);
        push_mount(&mut built, PROJECTS_VOLUME, path);
    }
    built
}

fn push_mount(container: &mut Value, name: &str, path: &str) {
    let mount = json!({ "mountPath": path, "name": name });
    match container.get_mut("volumeMounts").and_then(Value::as_array_mut) {
        Some(mounts) => mounts.push(mount),
        None => container["volumeMounts"] = json!([mount]),
    }
}

/// The devfile's resources over the agent's defaults: the devfile's win, as in GitLab.
fn resources(container: &Container, config: &AgentConfig) -> Option<Value> {
    let defaults = &config.default_resources_per_workspace_container;
    let mut scopes: BTreeMap<&str, Map<String, Value>> = BTreeMap::new();
    for (scope, values) in [("requests", &defaults.requests), ("limits", &defaults.limits)] {
        for (name, quantity) in values {
            scopes.entry(scope).or_default().insert(name.clone(), Value::from(quantity.as_str()));
        }
    }
    for (scope, name, value) in [
        ("limits", "memory", &container.memory_limit),
        ("requests", "memory", &container.memory_request),
        ("limits", "cpu", &container.cpu_limit),
        ("requests", "cpu", &container.cpu_request),
    ] {
        if let Some(quantity) = value {
            scopes.entry(scope).or_default().insert(name.into(), Value::from(quantity.as_str()));
        }
    }
    (!scopes.is_empty()).then(|| json!(scopes))
}

/// The projects' cloner, when there are projects: each cloned once into its directory, from
/// its remote (a network Git remote, checked at creation), passed as arguments, never as
/// shell text. A checkout that is there already is kept, so a restart keeps the work in it.
fn project_cloner(devfile: &Devfile) -> Option<Value> {
    if devfile.projects.is_empty() {
        return None;
    }
    let mut command = vec!["/bin/sh".to_string(), "-c".into(), CLONE_SCRIPT.into(), "clone".into()];
    for project in &devfile.projects {
        let git = project.git.as_ref();
        command.push(format!("{PROJECTS_ROOT}/{}", project.directory().trim_end_matches('/')));
        command.push(git.and_then(|git| git.remote()).unwrap_or_default().to_string());
        command.push(git.and_then(|git| git.revision()).unwrap_or_default().to_string());
    }
    Some(json!({
        "name": PROJECT_CLONER,
        "image": devfile.project_cloner_image.as_deref().unwrap_or(DEFAULT_PROJECT_CLONER_IMAGE),
        "command": command,
        "env": [
            { "name": "GIT_TERMINAL_PROMPT", "value": "0" },
            { "name": "GIT_ALLOW_PROTOCOL", "value": "https:http:git:ssh" },
            { "name": "HOME", "value": "/tmp" },
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{ "mountPath": PROJECTS_ROOT, "name": PROJECTS_VOLUME }],
    }))
}

/// The image the cloner runs when the control plane names none: any image with `git` and a
/// shell (`--project-cloner-image`).
pub const DEFAULT_PROJECT_CLONER_IMAGE: &str = "docker.io/alpine/git:2.47.2";

/// Clones each (directory, remote, revision) triple it is given that is not cloned yet.
/// A clone is made in `/projects/.gl-cloning` (a `.gl-` directory no project may use) and moved
/// into place whole, so that a clone cut short is never taken for a checkout.
const CLONE_SCRIPT: &str = r#"set -u
staging=/projects/.gl-cloning
while [ "$#" -ge 3 ]; do
  dir="$1" remote="$2" revision="$3"
  shift 3
  if [ -e "$dir/.git" ]; then
    echo "$dir: cloned before, kept"
    continue
  fi
  if [ -e "$dir" ] && ! rmdir "$dir" 2>/dev/null; then
    echo "$dir is there and is not a Git checkout; move it away to clone $remote" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$dir")" && rm -rf "$staging" || exit 1
  if [ -n "$revision" ]; then
    git clone --branch "$revision" -- "$remote" "$staging" || exit 1
  else
    git clone -- "$remote" "$staging" || exit 1
  fi
  mv "$staging" "$dir" || exit 1
done
"#;

/// The postStart commands, in order, with the component each runs in.
fn post_start_commands(devfile: &Devfile) -> Vec<(String, String)> {
    let commands = devfile.events.post_start.iter().filter_map(|id| {
        let exec = devfile.command(id)?.exec.as_ref()?;
        Some((exec.component.clone(), id.clone()))
    });
    commands.collect()
}

/// The scripts ConfigMap's data and the projected volume's items: each command's line at
/// `<component>/<id>`, and each component's runner at `<component>/gl-run-poststart-commands.sh`.
fn scripts(
    devfile: &Devfile,
    post_start: &[(String, String)],
    main: Option<&str>,
    source: &str,
) -> (BTreeMap<String, String>, Vec<Value>) {
    let mut data = BTreeMap::new();
    let mut items = Vec::new();
    let mut runners: BTreeMap<&str, String> = BTreeMap::new();
    for (component, id) in post_start {
        let Some(exec) = devfile.command(id).and_then(|command| command.exec.as_ref()) else { continue };
        data.insert(id.clone(), exec.command_line.clone());
        items.push(json!({ "key": id, "path": format!("{component}/{id}") }));
        let directory = match exec.working_dir.as_deref().filter(|dir| !dir.is_empty()) {
            Some(dir) => dir
                .replace("${PROJECT_SOURCE}", source)
                .replace("$PROJECT_SOURCE", source)
                .replace("${PROJECTS_ROOT}", PROJECTS_ROOT)
                .replace("$PROJECTS_ROOT", PROJECTS_ROOT),
            // As GitLab: the main container's commands run in the checkout, where it has one.
            None if main == Some(component.as_str())
                && devfile
                    .component(component)
                    .and_then(|c| c.container.as_ref())
                    .is_some_and(Container::mounts_sources) =>
            {
                source.to_string()
            }
            None => String::new(),
        };
        let runner = runners.entry(component).or_insert_with(|| RUNNER_HEAD.replace("COMPONENT", component));
        runner.push_str(&format!("run {} {}\n", quoted(id), quoted(&directory)));
    }
    for (component, runner) in runners {
        let key = format!("{component}-{RUNNER}");
        items.push(json!({ "key": key, "path": format!("{component}/{RUNNER}") }));
        data.insert(key, runner);
    }
    (data, items)
}

/// A runner's opening: `run ID DIR` runs one command in DIR (or where the container starts)
/// and, when it fails, says so with its output's tail, to the hook's output (which the kubelet
/// reports) and to the termination message (which outlives the container's restart).
const RUNNER_HEAD: &str = r#"#!/bin/sh
run() {
  log="${TMPDIR:-/tmp}/poststart-$1.log"
  echo "$(date -Iseconds): running postStart command $1"
  (if [ -n "$2" ]; then cd "$2" || exit; fi; exec /bin/sh "/workspace-scripts/COMPONENT/$1") >"$log" 2>&1
  status=$?
  if [ "$status" -ne 0 ]; then
    said="postStart command $1 failed (exit $status); its output ends:
$(tail -c 700 "$log")"
    printf '%s\n' "$said" >/dev/termination-log 2>/dev/null
    printf '%s\n' "$said" >&2
    exit 1
  fi
}
"#;

/// `text` as one shell word.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests;
