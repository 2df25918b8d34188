//! A devfile's Pod, against what GitLab's desired config builds from the same devfile
//! (docs/devfile-gitlab-facts.md §2): the same containers, ports, volumes, init containers and
//! postStart wiring, with wsync's two differences (the cloner, the blocking runner).

use super::super::{WorkspaceSpec, build};
use crate::control_plane::decisions::agent_config::AgentConfig;
use crate::control_plane::decisions::devfile::accept;
use crate::control_plane::decisions::rules::Resources;
use crate::control_plane::model::{NewWorkspace, Workspace};
use crate::protocol::DesiredState;
use serde_json::{Value, json};
use std::sync::Arc;

pub const EXAMPLE: &str = r#"
schemaVersion: 2.2.0
components:
  - name: tooling
    attributes: {gl/inject-editor: true}
    container:
      image: registry.example.com/tools:1
      memoryLimit: 1Gi
      cpuRequest: 250m
      env: [{name: EDITOR, value: vim}]
      endpoints:
        - {name: web, targetPort: 8080}
        - {name: debug, targetPort: 5005, exposure: internal}
        - {name: secret, targetPort: 9999, exposure: none}
      volumeMounts: [{name: cache, path: /cache}]
  - name: database
    attributes: {overrideCommand: false}
    container:
      image: registry.example.com/postgres:16
      command: [postgres]
      args: ["-c", "fsync=off"]
      mountSources: false
      volumeMounts: [{name: scratch}]
  - name: migrate
    container: {image: registry.example.com/migrate:1, args: [up], mountSources: false}
    attributes: {overrideCommand: false}
  - {name: cache, volume: {size: 2Gi}}
  - {name: scratch, volume: {ephemeral: true}}
commands:
  - {id: migrate-db, apply: {component: migrate}}
  - {id: install, exec: {component: tooling, commandLine: "make install"}}
  - {id: greet, exec: {component: tooling, commandLine: "echo hi > greeting", workingDir: "${PROJECTS_ROOT}/o'k"}}
  - {id: warm, exec: {component: database, commandLine: "psql -c 'select 1'"}}
events:
  preStart: [migrate-db]
  postStart: [install, greet, warm]
projects:
  - name: app
    git: {remotes: {origin: "https://git.example.com/app.git"}, checkoutFrom: {revision: main}}
"#;

pub fn workspace_from(devfile: &str, config: AgentConfig) -> Workspace {
    let accepted = accept(devfile.as_bytes()).unwrap_or_else(|refusal| panic!("{refusal}"));
    let new = NewWorkspace { devfile_accepted: Some(Arc::new(accepted.devfile)), ..NewWorkspace::new("web", "") };
    Workspace::created("1", "wsync-1-web", new, config.into(), 0)
}

fn objects(workspace: &Workspace) -> Vec<Value> {
    let spec = WorkspaceSpec { workspace, label_key: "agent.gitlab.com/id", image_pull_secrets: &[] };
    let stream = build(&spec, DesiredState::Running, Resources::All).unwrap_or_else(|e| panic!("{e}"));
    let objects = crate::yaml::parse_objects(&stream).unwrap_or_else(|e| panic!("{e}"));
    objects.into_iter().map(|o| serde_json::to_value(o).unwrap_or_default()).collect()
}

fn kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

#[test]
fn a_devfile_becomes_the_pod_gitlab_builds() {
    let objects = objects(&workspace_from(EXAMPLE, AgentConfig::before_settings()));
    let pod = &kind(&objects, "Deployment")[0]["spec"]["template"]["spec"];
    let names = |list: &Value| list.as_array().map(|l| l.iter().map(|c| c["name"].clone()).collect::<Vec<_>>());
    assert_eq!(names(&pod["containers"]), Some(vec![json!("tooling"), json!("database")]), "migrate is applied");
    assert_eq!(names(&pod["initContainers"]), Some(vec![json!("gl-project-cloner"), json!("migrate-migrate-db-1")]));
    let [tooling, database] = [&pod["containers"][0], &pod["containers"][1]];
    assert_eq!(tooling["command"], json!(["/bin/sh", "-c"]), "the main container's command is overridden");
    assert_eq!(tooling["args"], json!(["tail -f /dev/null\n"]));
    assert_eq!((&database["command"], &database["args"]), (&json!(["postgres"]), &json!(["-c", "fsync=off"])));
    assert_eq!(
        tooling["ports"],
        json!([{"containerPort": 8080, "name": "web", "protocol": "TCP"}, {"containerPort": 5005, "name": "debug", "protocol": "TCP"}]),
        "exposure none is not a port the agent's gate lets a stream reach"
    );
    assert_eq!(
        tooling["env"],
        json!([{"name": "EDITOR", "value": "vim"}, {"name": "PROJECTS_ROOT", "value": "/projects"}, {"name": "PROJECT_SOURCE", "value": "/projects/app"}])
    );
    assert!(database.get("env").is_none(), "no sources mounted, no PROJECT_SOURCE");
    assert_eq!(tooling["resources"], json!({"limits": {"memory": "1Gi"}, "requests": {"cpu": "250m"}}));
    assert_eq!(
        tooling["volumeMounts"],
        json!([
            {"mountPath": "/cache", "name": "cache"},
            {"mountPath": "/projects", "name": "gl-workspace-data"},
            {"mountPath": "/workspace-scripts", "name": "gl-workspace-scripts"}
        ])
    );
    assert_eq!(
        tooling["lifecycle"]["postStart"]["exec"]["command"],
        json!(["/bin/sh", "/workspace-scripts/tooling/gl-run-poststart-commands.sh"])
    );
    assert!(pod["initContainers"][1].get("lifecycle").is_none());
    assert_eq!(
        pod["volumes"],
        json!([
            {"name": "cache", "persistentVolumeClaim": {"claimName": "web-cache"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "gl-workspace-data", "persistentVolumeClaim": {"claimName": "web-gl-workspace-data"}},
            {"name": "gl-workspace-scripts", "projected": {"defaultMode": 365, "sources": [{"configMap": {"name": "web-scripts-configmap", "items": [
                {"key": "install", "path": "tooling/install"},
                {"key": "greet", "path": "tooling/greet"},
                {"key": "warm", "path": "database/warm"},
                {"key": "database-gl-run-poststart-commands.sh", "path": "database/gl-run-poststart-commands.sh"},
                {"key": "tooling-gl-run-poststart-commands.sh", "path": "tooling/gl-run-poststart-commands.sh"}
            ]}}]}}
        ])
    );
    let claims: Vec<(Value, Value)> = kind(&objects, "PersistentVolumeClaim")
        .iter()
        .map(|c| (c["metadata"]["name"].clone(), c["spec"]["resources"]["requests"]["storage"].clone()))
        .collect();
    assert_eq!(claims, [(json!("web-cache"), json!("2Gi")), (json!("web-gl-workspace-data"), json!("50Gi"))]);
    let service = &kind(&objects, "Service")[0]["spec"];
    assert_eq!(
        service["ports"],
        json!([{"name": "web", "port": 8080, "protocol": "TCP", "targetPort": 8080}, {"name": "debug", "port": 5005, "protocol": "TCP", "targetPort": 5005}])
    );
    let scripts = kind(&objects, "ConfigMap").into_iter().find(|c| c["metadata"]["name"] == "web-scripts-configmap");
    let data = &scripts.unwrap_or_else(|| panic!("no scripts ConfigMap"))["data"];
    assert_eq!(data["install"], "make install");
    let runner = data["tooling-gl-run-poststart-commands.sh"].as_str().unwrap_or_default();
    assert!(runner.ends_with("run 'install' '/projects/app'\nrun 'greet' '/projects/o'\\''k'\n"), "{runner}");
    let runner = data["database-gl-run-poststart-commands.sh"].as_str().unwrap_or_default();
    assert!(runner.ends_with("run 'warm' ''\n"), "not the main container: where it starts\n{runner}");
}

#[test]
fn the_cloner_takes_each_project_as_arguments_never_as_shell_text() {
    let objects = objects(&workspace_from(EXAMPLE, AgentConfig::before_settings()));
    let cloner = &kind(&objects, "Deployment")[0]["spec"]["template"]["spec"]["initContainers"][0];
    let command = cloner["command"].as_array().cloned().unwrap_or_default();
    assert_eq!(command[..2], [json!("/bin/sh"), json!("-c")]);
    assert_eq!(
        command[3..],
        [json!("clone"), json!("/projects/app"), json!("https://git.example.com/app.git"), json!("main")]
    );
    assert_eq!(cloner["terminationMessagePolicy"], "FallbackToLogsOnError", "git's own words reach the agent");
    assert_eq!(cloner["volumeMounts"], json!([{"mountPath": "/projects", "name": "gl-workspace-data"}]));
}

#[test]
fn the_agents_settings_reach_every_container() {
    let mut config = AgentConfig::before_settings();
    config.allow_privilege_escalation = Some(false);
    config.inline_env = false;
    config.default_resources_per_workspace_container.limits.insert("memory".into(), "512Mi".into());
    config.default_resources_per_workspace_container.requests.insert("cpu".into(), "100m".into());
    let objects = objects(&workspace_from(EXAMPLE, config));
    let pod = &kind(&objects, "Deployment")[0]["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().into_iter().chain(pod["initContainers"].as_array()).flatten();
    for container in containers {
        assert_eq!(container["securityContext"]["allowPrivilegeEscalation"], false, "{container}");
        assert_eq!(container["envFrom"], json!([{"secretRef": {"name": "web-env-var"}}]), "{container}");
    }
    assert_eq!(pod["containers"][0]["resources"], json!({"limits": {"memory": "1Gi"}, "requests": {"cpu": "250m"}}));
    assert_eq!(pod["containers"][1]["resources"], json!({"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m"}}));
}

#[test]
fn a_one_container_devfile_has_no_service_without_endpoints_and_no_scripts_without_post_start() {
    let devfile = "schemaVersion: 2.2.0\ncomponents:\n- {name: only, container: {image: x, mountSources: false}}\n";
    let objects = objects(&workspace_from(devfile, AgentConfig::before_settings()));
    assert!(kind(&objects, "Service").is_empty());
    assert!(kind(&objects, "PersistentVolumeClaim").is_empty());
    let pod = &kind(&objects, "Deployment")[0]["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"], json!([]));
    assert!(pod.get("initContainers").is_none());
}

#[test]
fn what_cannot_be_built_under_the_agents_settings_is_refused_before_it_is_stored() {
    let mut config = AgentConfig::before_settings();
    config.default_resources_per_workspace_container.limits.insert("memory".into(), "256Mi".into());
    let devfile = "schemaVersion: 2.2.0\ncomponents:\n- {name: m, container: {image: x, memoryRequest: 1Gi}}\n";
    let refused = super::super::refused_devfile(&workspace_from(devfile, config), "agent.gitlab.com/id");
    assert_eq!(
        refused,
        [
            "component 'm': its memory request \"1Gi\" is above its memory limit \"256Mi\" (the agent's default fills what \
          the devfile leaves out): set both"
        ]
    );
    let mut workspace = workspace_from(EXAMPLE, AgentConfig::before_settings());
    assert_eq!(super::super::refused_devfile(&workspace, "agent.gitlab.com/id"), Vec::<String>::new());
    let mut devfile = (**workspace.devfile.as_ref().unwrap()).clone();
    devfile.components[0].container.as_mut().unwrap().env[0].value = "x".repeat(1024 * 1024);
    workspace.devfile = Some(Arc::new(devfile));
    let refused = super::super::refused_devfile(&workspace, "agent.gitlab.com/id");
    assert!(refused.len() == 1 && refused[0].contains("an agent takes at most 1048576"), "{refused:?}");
}

#[test]
fn a_main_container_without_sources_runs_its_post_start_where_it_starts() {
    let devfile = "schemaVersion: 2.2.0\ncomponents:\n- {name: m, container: {image: x, mountSources: false}}\n\
                   commands:\n- {id: hi, exec: {component: m, commandLine: 'echo hi'}}\nevents: {postStart: [hi]}\n";
    let objects = objects(&workspace_from(devfile, AgentConfig::before_settings()));
    let scripts = kind(&objects, "ConfigMap").into_iter().find(|c| c["metadata"]["name"] == "web-scripts-configmap");
    let runner = scripts.map(|s| s["data"]["m-gl-run-poststart-commands.sh"].clone()).unwrap_or_default();
    assert!(runner.as_str().is_some_and(|r| r.ends_with("run 'hi' ''\n")), "{runner}");
    assert!(kind(&objects, "PersistentVolumeClaim").is_empty(), "no projects volume");
}

/// GitLab's own example (its fixture `example.devfile.yaml`, re-expressed), against what its
/// desired config builds from it (docs/devfile-gitlab-facts.md §2), less what GitLab injects
/// (its tools injector, editor, internal postStart commands): the same containers and
/// commands, the projects volume in each, the postStart commands in GitLab's order and
/// directories, hooks only where there are commands.
#[test]
fn gitlabs_example_devfile_builds_what_gitlab_builds() {
    let devfile = crate::control_plane::decisions::devfile::gitlab_cases::devfile_of("devfile");
    let objects = objects(&workspace_from(devfile, AgentConfig::before_settings()));
    let pod = &kind(&objects, "Deployment")[0]["spec"]["template"]["spec"];
    let containers = pod["containers"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = containers.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["tools", "database", "own-entrypoint"]);
    assert_eq!(containers[0]["command"], json!(["/bin/sh", "-c"]), "the main one kept alive");
    assert!(containers[1].get("command").is_none(), "overrideCommand is false for the others");
    assert_eq!((&containers[2]["command"], &containers[2]["args"]), (&json!(["sleep"]), &json!(["infinity"])));
    for container in &containers {
        let mounts = container["volumeMounts"].as_array().cloned().unwrap_or_default();
        assert!(mounts.contains(&json!({"mountPath": "/projects", "name": "gl-workspace-data"})), "{container}");
        let env = container["env"].as_array().cloned().unwrap_or_default();
        assert!(env.ends_with(&[
            json!({"name": "PROJECTS_ROOT", "value": "/projects"}),
            json!({"name": "PROJECT_SOURCE", "value": "/projects"})
        ]));
    }
    assert_eq!(containers[1]["env"][0], json!({"name": "POSTGRES_PASSWORD", "value": "not-a-secret"}));
    let hooked: Vec<bool> = containers.iter().map(|c| c.get("lifecycle").is_some()).collect();
    assert_eq!(hooked, [true, true, false], "a hook where there are postStart commands");
    let claims: Vec<&Value> =
        kind(&objects, "PersistentVolumeClaim").into_iter().map(|c| &c["metadata"]["name"]).collect();
    assert_eq!(claims, [&json!("web-gl-workspace-data")]);
    assert!(pod.get("initContainers").is_none(), "no preStart, no projects");
    let scripts = kind(&objects, "ConfigMap").into_iter().find(|c| c["metadata"]["name"] == "web-scripts-configmap");
    let data = &scripts.unwrap_or_else(|| panic!("no scripts ConfigMap"))["data"];
    let runner = |component: &str| {
        data[format!("{component}-gl-run-poststart-commands.sh")].as_str().unwrap_or_default().to_string()
    };
    assert!(runner("database").ends_with("run 'seed-in-dir' 'tmp'\nrun 'seed' ''\n"), "{}", runner("database"));
    assert!(runner("tools").ends_with("run 'setup' '/projects'\nrun 'setup-in-dir' 'tmp'\n"), "{}", runner("tools"));
    let items = &pod["volumes"][1]["projected"]["sources"][0]["configMap"]["items"];
    let paths: Vec<&str> = items.as_array().into_iter().flatten().filter_map(|i| i["path"].as_str()).collect();
    assert_eq!(
        paths,
        [
            "database/seed-in-dir",
            "database/seed",
            "tools/setup",
            "tools/setup-in-dir",
            "database/gl-run-poststart-commands.sh",
            "tools/gl-run-poststart-commands.sh"
        ]
    );
}
