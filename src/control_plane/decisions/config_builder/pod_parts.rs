//! What a workspace's Pod is made of, before what every workspace gets (its environment, the
//! agent's settings): from its devfile (devfile_pod.rs), or from its image alone, the shape
//! every workspace had before devfiles, kept byte for byte so that no workspace restarts.

use crate::control_plane::model::Workspace;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The ports every workspace declares, by name: its IDE's, and its sshd's on GitLab's port
/// for it (60022). A devfile declares its own.
pub const DECLARED_PORTS: [(&str, u16); 2] = [("ide", 8080), ("ssh", SSH_PORT)];
/// The port `wsync workspaces ssh` opens.
pub const SSH_PORT: u16 = 60022;

#[derive(Debug, Default)]
pub struct PodParts {
    pub containers: Vec<Value>,
    pub init_containers: Vec<Value>,
    pub volumes: Vec<Value>,
    /// The Service's ports; no Service when there are none.
    pub service_ports: Vec<Value>,
    /// PersistentVolumeClaims: name and size.
    pub claims: Vec<(String, String)>,
    /// The postStart scripts ConfigMap: its name and data.
    pub scripts: Option<(String, BTreeMap<String, String>)>,
}

/// A workspace made from an image: one container, its IDE and SSH ports, a home volume.
pub fn from_image(workspace: &Workspace) -> PodParts {
    let mut own = serde_json::Map::new();
    if let Some(cpu) = &workspace.cpu {
        own.insert("cpu".into(), Value::from(cpu.as_str()));
    }
    if let Some(memory) = &workspace.memory {
        own.insert("memory".into(), Value::from(memory.as_str()));
    }
    let own = (!own.is_empty()).then(|| json!({ "requests": own.clone(), "limits": own }));
    let mut container = json!({
        "name": "workspace",
        "image": workspace.image,
        "ports": DECLARED_PORTS.iter().map(|(name, port)| json!({ "containerPort": port, "name": name, "protocol": "TCP" })).collect::<Vec<_>>(),
        "volumeMounts": [{ "mountPath": "/home/workspace", "name": "home" }],
    });
    if let Some(resources) = workspace.agent_config.container_resources(own) {
        container["resources"] = resources;
    }
    let home = format!("{}-home", workspace.name);
    PodParts {
        containers: vec![container],
        volumes: vec![json!({ "name": "home", "persistentVolumeClaim": { "claimName": home } })],
        service_ports: vec![json!({ "name": "ide", "port": 80, "protocol": "TCP", "targetPort": DECLARED_PORTS[0].1 })],
        claims: vec![(home, "1Gi".into())],
        ..PodParts::default()
    }
}
