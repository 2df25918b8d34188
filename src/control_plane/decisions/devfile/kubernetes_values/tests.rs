//! What Kubernetes would refuse, refused at creation, each at its path.

use super::super::{Stage, accept};
use super::*;

fn refused(yaml: &str) -> Vec<String> {
    match accept(yaml.as_bytes()) {
        Ok(_) => Vec::new(),
        Err(refusal) => {
            assert_eq!(refusal.stage, Stage::KubernetesValues, "{refusal}");
            refusal.violations.iter().map(ToString::to_string).collect()
        }
    }
}

const HEAD: &str = "schemaVersion: 2.2.0\n";

#[test]
fn quantities_parse_as_kubernetes_parses_them() {
    for good in ["1", "500m", "1.5Gi", "2e3", "0.5", "1Ki", "100M", "+1", ".5"] {
        assert!(quantity(good).is_some(), "{good}");
    }
    for bad in ["", "Gi", "1GB", "1..5", "1 Gi", "--1", "one", "1e", "1.5.5Mi", "0x10"] {
        assert_eq!(quantity(bad), None, "{bad}");
    }
    assert_eq!(quantity("500m"), Some(0.5));
    assert_eq!(quantity("1Gi"), Some(1073741824.0));
}

#[test]
fn every_value_kubernetes_would_refuse_is_named_at_its_path() {
    let devfile = format!(
        "{HEAD}components:
- name: main
  container:
    image: registry.example.com/tools:1
    memoryLimit: 1GB
    cpuRequest: '2'
    cpuLimit: 500m
    env: [{{name: PROJECT_SOURCE, value: x}}, {{name: '1bad', value: why}}]
    volumeMounts: [{{name: cache, path: relative}}, {{name: missing}}]
    endpoints:
    - {{name: web, targetPort: 0}}
    - {{name: api, targetPort: 70000}}
    - {{name: tls, targetPort: 8443, protocol: https}}
    - {{name: dns, targetPort: 53, protocol: udp}}
- name: side
  container:
    image: 'two words'
    endpoints: [{{name: web, targetPort: 8443}}]
- name: cache
  volume: {{size: lots}}
commands:
- {{id: build, exec: {{component: cache, commandLine: make}}}}
- {{id: init, exec: {{component: main, commandLine: make}}}}
events:
  preStart: [init]
projects:
- {{name: app, git: {{remotes: {{origin: 'ext::sh -c touch% /tmp/pwned'}}}}}}
- {{name: up, clonePath: ../etc, git: {{remotes: {{a: https://example.com/a.git, b: https://example.com/b.git}}}}}}
- {{name: rev, git: {{remotes: {{origin: https://example.com/r.git}}, checkoutFrom: {{revision: --upload-pack=x}}}}}}
"
    );
    let found = refused(&devfile);
    for expected in [
        "components[0].container.memoryLimit: '1GB' is not a Kubernetes quantity",
        "components[0].container.cpuRequest: cpuRequest is greater than cpuLimit",
        "components[0].container.env[0].name: env variable PROJECT_SOURCE is reserved",
        "components[0].container.env[1].name: '1bad' is not an environment variable name",
        "components[0].container.volumeMounts[0].path: 'relative' is not an absolute path",
        "components[0].container.volumeMounts[1].name: no volume component is named 'missing'",
        "components[0].container.endpoints[0].targetPort: 0 is not a port",
        "components[0].container.endpoints[1].targetPort: 70000 is not a port",
        "components[0].container.endpoints[2].protocol: 'https' is not served",
        "components[0].container.endpoints[3].protocol: 'udp' is not served",
        "components[1].container.image: an image is a name",
        "components[1].container.endpoints[0].name: endpoint name 'web' is used at components[0].container.endpoints[0] too",
        "components[1].container.endpoints[0].targetPort: port 8443 is declared at components[0].container.endpoints[2] too",
        "components[2].volume.size: 'lots' is not a Kubernetes quantity",
        "commands[0].exec.component: the command \"build\" is invalid",
        "events.preStart[0]: preStart event 'init' should map to an apply command",
        "projects[0].git.remotes: 'ext::sh -c touch% /tmp/pwned' is not a Git remote",
        "projects[1].clonePath: '../etc' must be a relative path",
        "projects[1].git: name one remote",
        "projects[2].git.checkoutFrom.revision: '--upload-pack=x' is not a branch or tag name",
    ] {
        assert!(found.iter().any(|f| f.starts_with(expected)), "{expected}\n{found:#?}");
    }
    assert_eq!(found.len(), 20, "{found:#?}");
}

#[test]
fn a_volume_marked_as_the_main_component_is_refused() {
    let devfile = format!(
        "{HEAD}components:\n- name: data\n  attributes: {{gl/inject-editor: true}}\n  volume: {{}}\n- name: c\n  container: {{image: x}}\n"
    );
    assert_eq!(refused(&devfile), ["components[0]: the main component 'data' is not a container"]);
}

#[test]
fn network_remotes_only() {
    for good in ["https://example.com/a.git", "git://host:9418/a", "ssh://git@host/a.git", "http://10.0.0.1/a"] {
        assert!(is_network_remote(good), "{good}");
    }
    for bad in ["ext::sh -c x", "file:///etc", "/srv/a.git", "-uhttps://x", "https://", "git@host:a.git", "fd::3"] {
        assert!(!is_network_remote(bad), "{bad}");
    }
}
