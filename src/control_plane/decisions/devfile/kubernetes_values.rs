//! What Kubernetes, devfile/library or wsync's tunnel would refuse later, refused when the
//! workspace is created (#40): quantities that do not parse, ports outside 1–65535, names
//! used twice, references to what is not there, endpoints the tunnel cannot serve, and
//! project remotes that are not a network Git remote. Each at its path, all of them at once.

use super::findings::{Found, starts_in_any_case};
use super::model::{Container, Devfile, Project};
use crate::names::is_env_name;
use std::collections::{BTreeMap, BTreeSet};

/// The environment variables the builder sets where the projects are mounted.
pub const RESERVED_ENV: [&str; 2] = ["PROJECTS_ROOT", "PROJECT_SOURCE"];
/// Where the builder mounts the projects and the postStart scripts.
const RESERVED_MOUNTS: [&str; 2] = ["/projects", "/workspace-scripts"];

/// Every refusal for a devfile that has passed the schema and been flattened.
pub fn check(devfile: &Devfile, found: &mut Found) {
    let mut names = BTreeSet::new();
    let mut endpoint_names = BTreeMap::new();
    let mut ports = BTreeMap::new();
    let volumes: BTreeSet<&str> =
        devfile.components.iter().filter(|c| c.volume.is_some()).map(|c| c.name.as_str()).collect();
    for (index, component) in devfile.components.iter().enumerate() {
        let at = format!("components[{index}]");
        if !names.insert(component.name.as_str()) {
            found.add(&format!("{at}.name"), format!("component name '{}' is used twice", component.name));
        }
        if let Some(volume) = &component.volume
            && let Some(size) = &volume.size
            && quantity(size).is_none_or(|bytes| bytes <= 0.0)
        {
            found.add(&format!("{at}.volume.size"), format!("'{size}' is not a Kubernetes quantity such as 1Gi"));
        }
        if let Some(container) = &component.container {
            container_values(container, &format!("{at}.container"), &volumes, &component.name, found);
            for (e, endpoint) in container.endpoints.iter().enumerate() {
                let path = format!("{at}.container.endpoints[{e}]");
                if !endpoint.name.contains(|c: char| c.is_ascii_lowercase()) || endpoint.name.contains("--") {
                    found.add(
                        &format!("{path}.name"),
                        format!("'{}' is not a port name: it needs a letter, and no '--'", endpoint.name),
                    );
                }
                if let Some(first) = endpoint_names.insert(endpoint.name.as_str(), path.clone()) {
                    found.add(
                        &format!("{path}.name"),
                        format!("endpoint name '{}' is used at {first} too", endpoint.name),
                    );
                }
                match u16::try_from(endpoint.target_port) {
                    Ok(port) if port > 0 => {
                        if let Some(first) = ports.insert(port, path.clone()) {
                            found.add(&format!("{path}.targetPort"), format!("port {port} is declared at {first} too"));
                        }
                    }
                    _ => found.add(
                        &format!("{path}.targetPort"),
                        format!("{} is not a port: a port is 1 to 65535", endpoint.target_port),
                    ),
                }
                match endpoint.protocol.as_deref() {
                    None | Some("http" | "ws" | "tcp") => {}
                    Some(protocol @ ("https" | "wss")) => found.add(
                        &format!("{path}.protocol"),
                        format!("'{protocol}' is not served: the control plane's proxy speaks plain HTTP to a workspace, and is the one that serves TLS"),
                    ),
                    Some(protocol) => found.add(
                        &format!("{path}.protocol"),
                        format!("'{protocol}' is not served: a workspace's ports are opened through a TCP tunnel"),
                    ),
                }
            }
        }
    }
    if let Some((index, main)) = devfile.components.iter().enumerate().find(|(_, c)| {
        c.container.is_none() && super::findings::truthy(c.attributes.get(super::findings::MAIN_COMPONENT_ATTRIBUTE))
    }) {
        found.add(&format!("components[{index}]"), format!("the main component '{}' is not a container", main.name));
    }
    commands(devfile, found);
    projects(&devfile.projects, found);
}

fn container_values(container: &Container, at: &str, volumes: &BTreeSet<&str>, component: &str, found: &mut Found) {
    if container.image.trim().is_empty() || container.image.chars().any(|c| c.is_whitespace() || c.is_control()) {
        found.add(&format!("{at}.image"), "an image is a name such as registry.example.com/tools:1".into());
    }
    let mut resources = BTreeMap::new();
    for (field, value) in [
        ("memoryLimit", &container.memory_limit),
        ("memoryRequest", &container.memory_request),
        ("cpuLimit", &container.cpu_limit),
        ("cpuRequest", &container.cpu_request),
    ] {
        let Some(value) = value else { continue };
        match quantity(value) {
            Some(amount) if amount >= 0.0 => {
                resources.insert(field, amount);
            }
            _ => found
                .add(&format!("{at}.{field}"), format!("'{value}' is not a Kubernetes quantity such as 512Mi or 500m")),
        }
    }
    for kind in ["memory", "cpu"] {
        if let (Some(request), Some(limit)) =
            (resources.get(format!("{kind}Request").as_str()), resources.get(format!("{kind}Limit").as_str()))
            && request > limit
        {
            found.add(&format!("{at}.{kind}Request"), format!("{kind}Request is greater than {kind}Limit"));
        }
    }
    for (index, variable) in container.env.iter().enumerate() {
        let path = format!("{at}.env[{index}].name");
        if !is_env_name(&variable.name) {
            found.add(&path, format!("'{}' is not an environment variable name", variable.name));
        } else if RESERVED_ENV.contains(&variable.name.as_str()) {
            found.add(
                &path,
                format!("env variable {} is reserved and cannot be customized in component {component}", variable.name),
            );
        }
    }
    let mut paths = BTreeSet::new();
    for (index, mount) in container.volume_mounts.iter().enumerate() {
        let path = format!("{at}.volumeMounts[{index}]");
        if !volumes.contains(mount.name.as_str()) {
            found.add(&format!("{path}.name"), format!("no volume component is named '{}'", mount.name));
        }
        let mount_path = mount.path.clone().unwrap_or_else(|| format!("/{}", mount.name));
        let clean = mount_path.starts_with('/')
            && mount_path.len() > 1
            && mount_path[1..].split('/').all(|part| !matches!(part, "" | "." | ".."))
            && !mount_path.chars().any(char::is_control);
        if !clean {
            found.add(
                &format!("{path}.path"),
                format!("'{mount_path}' is not an absolute path without '.', '..' or '//'"),
            );
        } else if RESERVED_MOUNTS.contains(&mount_path.as_str()) {
            found
                .add(&format!("{path}.path"), format!("'{mount_path}' is where the workspace's own volume is mounted"));
        } else if !paths.insert(mount_path.clone()) {
            found.add(&format!("{path}.path"), format!("'{mount_path}' is mounted twice"));
        }
    }
}

fn commands(devfile: &Devfile, found: &mut Found) {
    let mut ids = BTreeSet::new();
    for (index, command) in devfile.commands.iter().enumerate() {
        let at = format!("commands[{index}]");
        if !ids.insert(command.id.as_str()) {
            found.add(&format!("{at}.id"), format!("command id '{}' is used twice", command.id));
        }
        let (kind, component) = match (&command.exec, &command.apply) {
            (Some(exec), _) => ("exec", exec.component.as_str()),
            (None, Some(apply)) => ("apply", apply.component.as_str()),
            (None, None) => continue,
        };
        if devfile.component(component).is_none_or(|c| c.container.is_none()) {
            found.add(
                &format!("{at}.{kind}.component"),
                format!("the command \"{}\" is invalid - command does not map to a valid component", command.id),
            );
        }
        if command.exec.as_ref().is_some_and(|exec| exec.command_line.trim().is_empty()) {
            found.add(&format!("{at}.exec.commandLine"), "an exec command needs a commandLine".into());
        }
    }
    let applied: BTreeSet<&str> = devfile
        .events
        .pre_start
        .iter()
        .filter_map(|id| Some(devfile.command(id)?.apply.as_ref()?.component.as_str()))
        .collect();
    if let Some(main) = devfile.main_component().filter(|main| applied.contains(main.name.as_str())) {
        found.add(
            "events.preStart",
            format!(
                "the main component '{}' runs as a preStart init container: it must run as the workspace",
                main.name
            ),
        );
    }
    for (kind, listed) in [("preStart", &devfile.events.pre_start), ("postStart", &devfile.events.post_start)] {
        let mut seen = BTreeSet::new();
        for (index, id) in listed.iter().enumerate() {
            if !seen.insert(id.as_str()) {
                found.add(&format!("events.{kind}[{index}]"), format!("'{id}' is listed twice"));
            }
        }
    }
    for (index, id) in devfile.events.post_start.iter().enumerate() {
        let component = devfile.command(id).and_then(|c| c.exec.as_ref()).map(|exec| exec.component.as_str());
        if let Some(component) = component.filter(|c| applied.contains(c)) {
            found.add(
                &format!("events.postStart[{index}]"),
                format!("'{id}' runs in '{component}', which runs only as a preStart init container"),
            );
        }
    }
    for (index, id) in devfile.events.pre_start.iter().enumerate() {
        if let Some(apply) = devfile.command(id).and_then(|c| c.apply.as_ref()) {
            let name = Devfile::init_container_name(&apply.component, id, index);
            if devfile.component(&name).is_some() {
                found.add(
                    &format!("events.preStart[{index}]"),
                    format!("its init container '{name}' has a component's name"),
                );
            }
        }
        if devfile.command(id).is_none_or(|command| command.apply.is_none() || command.exec.is_some()) {
            found.add(
                &format!("events.preStart[{index}]"),
                format!("preStart event '{id}' should map to an apply command, which runs its component as an init container"),
            );
        }
    }
}

fn projects(projects: &[Project], found: &mut Found) {
    let mut directories = BTreeSet::new();
    for (index, project) in projects.iter().enumerate() {
        let at = format!("projects[{index}]");
        let directory = project.directory();
        let relative = !directory.starts_with('/')
            && directory.split('/').all(|part| !matches!(part, ".." | ".") && !starts_in_any_case(part, ".gl-"))
            && !directory.chars().any(char::is_control);
        if !relative {
            found.add(
                &format!("{at}.clonePath"),
                format!("'{directory}' must be a relative path below /projects, without '..'"),
            );
        } else if !directories.insert(directory.trim_end_matches('/')) {
            found.add(&format!("{at}.clonePath"), format!("'{directory}' is where another project is cloned"));
        }
        let Some(git) = &project.git else {
            found.add(&at, format!("project '{}' is not a git project: only git projects are cloned", project.name));
            continue;
        };
        match git.remote() {
            None => {
                found.add(&format!("{at}.git"), "name one remote, or the one to clone in checkoutFrom.remote".into())
            }
            Some(remote) if !is_network_remote(remote) => found.add(
                &format!("{at}.git.remotes"),
                format!("'{remote}' is not a Git remote this clones: https://, http://, git:// or ssh://"),
            ),
            Some(_) => {}
        }
        if let Some(revision) = git.revision()
            && (revision.starts_with('-') || revision.chars().any(|c| c.is_whitespace() || c.is_control()))
        {
            found.add(&format!("{at}.git.checkoutFrom.revision"), format!("'{revision}' is not a branch or tag name"));
        }
    }
}

/// A remote on the network, never `ext::` (runs a command), a local path or an option.
pub fn is_network_remote(remote: &str) -> bool {
    let Some((scheme, rest)) = remote.split_once("://") else { return false };
    matches!(scheme, "https" | "http" | "git" | "ssh")
        && !rest.is_empty()
        && !rest.starts_with('/')
        && !remote.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A Kubernetes quantity's value (`500m`, `1.5Gi`, `2e3`), or None when it does not parse.
pub fn quantity(text: &str) -> Option<f64> {
    let number_end = text.find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-'))).unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let digits = number.trim_start_matches(['+', '-']);
    let well_formed = !digits.is_empty()
        && number.len() - digits.len() <= 1
        && digits.chars().filter(|c| *c == '.').count() <= 1
        && digits.chars().any(|c| c.is_ascii_digit())
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.');
    if !well_formed || text.len() > 64 {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let multiplier = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent if exponent.starts_with(['e', 'E']) => {
            let power: i32 = exponent[1..].parse().ok()?;
            10f64.powi(power.clamp(-30, 30))
        }
        _ => return None,
    };
    Some(value * multiplier)
}

#[cfg(test)]
mod tests;
