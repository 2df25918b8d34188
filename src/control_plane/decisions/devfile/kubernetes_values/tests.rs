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

#[test]
fn the_main_container_is_never_only_an_init_container() {
    let devfile = format!(
        "{HEAD}components:\n- name: c\n  container: {{image: x}}\n- name: d\n  container: {{image: y}}\ncommands:\n- {{id: once, apply: {{component: c}}}}\nevents:\n  preStart: [once]\n"
    );
    assert_eq!(
        refused(&devfile),
        ["events.preStart: the main component 'c' runs as a preStart init container: it must run as the workspace"]
    );
}

/// What the apiserver would refuse of the Pod the builder makes: mounts over the workspace's
/// own, port names it does not take, an event listed twice (a duplicate projected path), a
/// postStart in a container that never runs, an init container named as a component.
#[test]
fn what_the_built_pod_would_collide_on_is_refused() {
    let devfile = format!(
        "{HEAD}components:
- name: main
  container:
    image: x
    volumeMounts: [{{name: projects}}, {{name: cache, path: /workspace-scripts}}, {{name: cache, path: /a/../b}}]
    endpoints: [{{name: '8080', targetPort: 8080}}, {{name: a--b, targetPort: 8081}}]
- {{name: projects, volume: {{}}}}
- {{name: cache, volume: {{}}}}
- name: once
  container: {{image: y}}
- name: once-setup-1
  container: {{image: y}}
commands:
- {{id: setup, apply: {{component: once}}}}
- {{id: hi, exec: {{component: once, commandLine: echo}}}}
- {{id: ok, exec: {{component: main, commandLine: echo}}}}
events:
  preStart: [setup]
  postStart: [hi, ok, ok]
projects:
- {{name: p, clonePath: .gl-cloning, git: {{remotes: {{o: https://example.com/p.git}}}}}}
"
    );
    let found = refused(&devfile);
    for expected in [
        "components[0].container.volumeMounts[0].path: '/projects' is where the workspace's own volume is mounted",
        "components[0].container.volumeMounts[1].path: '/workspace-scripts' is where the workspace's own volume is mounted",
        "components[0].container.volumeMounts[2].path: '/a/../b' is not an absolute path",
        "components[0].container.endpoints[0].name: '8080' is not a port name",
        "components[0].container.endpoints[1].name: 'a--b' is not a port name",
        "events.postStart[2]: 'ok' is listed twice",
        "events.postStart[0]: 'hi' runs in 'once', which runs only as a preStart init container",
        "events.preStart[0]: its init container 'once-setup-1' has a component's name",
        "projects[0].clonePath: '.gl-cloning' must be a relative path below /projects",
    ] {
        assert!(found.iter().any(|f| f.starts_with(expected)), "{expected}\n{found:#?}");
    }
    assert_eq!(found.len(), 9, "{found:#?}");
}

#[test]
fn a_hostile_devfiles_refusal_is_no_larger_than_a_friendly_ones() {
    let name = "a".repeat(60_000);
    let endpoints = "{name: gl-x}, ".repeat(10_000);
    let devfile = format!("{HEAD}components:\n- name: {name}\n  container: {{image: x, endpoints: [{endpoints}]}}\n");
    let refusal = accept(devfile.as_bytes()).expect_err("refused");
    assert_eq!(refusal.violations.len(), 101, "100 and a line for the rest");
    assert!(refusal.to_string().len() < 64 * 1024, "{}", refusal.to_string().len());
    assert!(refusal.violations[100].message.contains("more faults"), "{:?}", refusal.violations[100]);
}
