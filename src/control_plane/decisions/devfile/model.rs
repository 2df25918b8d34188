//! The flattened devfile as the builder reads it: only what a workspace is built from. It is
//! read from a devfile that has passed every check, so a field the schema allows and wsync
//! does not build from is simply not here.

use super::findings::{MAIN_COMPONENT_ATTRIBUTE, truthy};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Devfile {
    pub components: Vec<Component>,
    pub commands: Vec<Command>,
    pub events: Events,
    pub projects: Vec<Project>,
    /// The image that clones the projects: the control plane's setting when the workspace
    /// was created, frozen with it.
    #[serde(rename = "wsyncProjectClonerImage", skip_serializing_if = "Option::is_none")]
    pub project_cloner_image: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Component {
    pub name: String,
    pub attributes: Map<String, Value>,
    pub container: Option<Container>,
    pub volume: Option<Volume>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    pub memory_limit: Option<String>,
    pub memory_request: Option<String>,
    pub cpu_limit: Option<String>,
    pub cpu_request: Option<String>,
    pub mount_sources: Option<bool>,
    pub source_mapping: Option<String>,
    pub volume_mounts: Vec<VolumeMount>,
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VolumeMount {
    pub name: String,
    pub path: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Endpoint {
    pub name: String,
    pub target_port: i64,
    pub exposure: Option<String>,
    pub protocol: Option<String>,
    pub path: Option<String>,
}

impl Endpoint {
    /// `public` unless written otherwise, as the devfile spec says.
    pub fn exposure(&self) -> &str {
        self.exposure.as_deref().unwrap_or("public")
    }

    /// Whether the workspace declares it as a port (`exposure: none` is the container's own:
    /// no container port, so the agent's gate never lets a stream reach it).
    pub fn is_declared(&self) -> bool {
        self.exposure() != "none"
    }
}

impl Container {
    /// Whether the projects are mounted in it: unless `mountSources: false`, as the spec says.
    pub fn mounts_sources(&self) -> bool {
        self.mount_sources != Some(false)
    }

    /// Its endpoints that are declared ports.
    pub fn declared_endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        self.endpoints.iter().filter(|e| e.is_declared())
    }
}

/// A volume component's size when it names none (devfile/library's default).
pub const VOLUME_SIZE: &str = "1Gi";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Volume {
    pub size: Option<String>,
    pub ephemeral: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Command {
    pub id: String,
    pub exec: Option<Exec>,
    pub apply: Option<Apply>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Exec {
    pub command_line: String,
    pub component: String,
    pub working_dir: Option<String>,
    pub label: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Apply {
    pub component: String,
    pub label: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Events {
    pub pre_start: Vec<String>,
    pub post_start: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Project {
    pub name: String,
    pub clone_path: Option<String>,
    pub git: Option<Git>,
}

impl Project {
    /// Where it is cloned, below `/projects`.
    pub fn directory(&self) -> &str {
        self.clone_path.as_deref().filter(|path| !path.is_empty()).unwrap_or(&self.name)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Git {
    pub remotes: std::collections::BTreeMap<String, String>,
    pub checkout_from: Option<CheckoutFrom>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CheckoutFrom {
    pub remote: Option<String>,
    pub revision: Option<String>,
}

impl Git {
    /// The remote to clone: the one `checkoutFrom` names, else the only one.
    pub fn remote(&self) -> Option<&str> {
        match self.checkout_from.as_ref().and_then(|from| from.remote.as_deref()) {
            Some(name) => self.remotes.get(name).map(String::as_str),
            None if self.remotes.len() == 1 => self.remotes.values().next().map(String::as_str),
            None => None,
        }
    }

    pub fn revision(&self) -> Option<&str> {
        self.checkout_from.as_ref().and_then(|from| from.revision.as_deref()).filter(|r| !r.is_empty())
    }
}

impl Devfile {
    /// The main component: the first marked `gl/inject-editor`, else (wsync's difference) the
    /// first container.
    pub fn main_component(&self) -> Option<&Component> {
        let containers = || self.components.iter().filter(|c| c.container.is_some());
        containers().find(|c| truthy(c.attributes.get(MAIN_COMPONENT_ATTRIBUTE))).or_else(|| containers().next())
    }

    /// The ports its containers declare, each with whether it opens in a browser (`public`);
    /// `exposure: none` ports are the container's own and are not listed.
    pub fn declared_ports(&self) -> Vec<(&str, u16, bool)> {
        let containers = self.components.iter().filter_map(|c| c.container.as_ref());
        let endpoints = containers.flat_map(Container::declared_endpoints);
        endpoints
            .filter_map(|e| Some((e.name.as_str(), u16::try_from(e.target_port).ok()?, e.exposure() == "public")))
            .collect()
    }

    /// The init container a preStart apply command becomes: GitLab's (devfile/library's)
    /// `<component>-<command>`, cut to 55, and its place in the preStart list.
    pub fn init_container_name(component: &str, command: &str, index: usize) -> String {
        let stem: String = format!("{component}-{command}").chars().take(55).collect();
        format!("{stem}-{}", index.saturating_add(1))
    }

    pub fn component(&self, name: &str) -> Option<&Component> {
        self.components.iter().find(|c| c.name == name)
    }

    pub fn command(&self, id: &str) -> Option<&Command> {
        self.commands.iter().find(|c| c.id == id)
    }
}

impl Component {
    /// What it is, as shown: `container` and its image, or `volume` and its size.
    pub fn summary(&self) -> (&'static str, String) {
        match (&self.container, &self.volume) {
            (Some(container), _) => ("container", container.image.clone()),
            (None, Some(volume)) => {
                let size = volume.size.clone();
                match volume.ephemeral == Some(true) {
                    true => ("volume", size.map_or_else(|| "ephemeral".into(), |size| format!("{size}, ephemeral"))),
                    false => ("volume", size.unwrap_or_else(|| VOLUME_SIZE.into())),
                }
            }
            (None, None) => ("volume", String::new()),
        }
    }

    /// GitLab's `overrideCommand`: true for the main container and false for the others unless
    /// written; when true, the container's own command is replaced by one that keeps it alive.
    pub fn overrides_command(&self, main: bool) -> bool {
        match self.attributes.get("overrideCommand") {
            Some(Value::Bool(written)) => *written,
            _ => main,
        }
    }
}
