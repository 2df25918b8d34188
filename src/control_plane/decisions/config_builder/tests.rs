use super::*;
use crate::control_plane::decisions::agent_config::AgentConfig;
use crate::control_plane::model::NewWorkspace;
use std::collections::BTreeMap;

/// alice on agent 1, created before agent settings existed.
fn workspace() -> Workspace {
    let new = NewWorkspace {
        cpu: Some("500m".into()),
        memory: Some("256Mi".into()),
        env: BTreeMap::from([("EDITOR".into(), "vim".into())]),
        ..NewWorkspace::new("alice", "busybox:1.36")
    };
    Workspace::created("1", "wsync-1-alice", new, AgentConfig::before_settings().into(), 0)
}

fn with_settings(config: AgentConfig) -> Workspace {
    Workspace { agent_config: config.into(), ..workspace() }
}

/// The config of `workspace` on agent 1, with these pull secrets.
fn config_of(
    workspace: &Workspace,
    pull_secrets: &[ImagePullSecret],
    desired: DesiredState,
    resources: Resources,
) -> String {
    let spec = WorkspaceSpec { workspace, label_key: "agent.gitlab.com/id", image_pull_secrets: pull_secrets };
    build(&spec, desired, resources).unwrap()
}

#[test]
fn pods_name_the_copied_pull_secrets_only_when_there_are_some() {
    let pod = |secrets: &[ImagePullSecret]| {
        let config = config_of(&workspace(), secrets, DesiredState::Running, Resources::All);
        crate::yaml::parse_objects(&config).unwrap()[1].data["spec"]["template"]["spec"].clone()
    };
    assert!(pod(&[]).get("imagePullSecrets").is_none(), "no empty list the server would drop");
    let regcred = ImagePullSecret { name: "regcred".into(), namespace: "registry".into() };
    assert_eq!(pod(&[regcred])["imagePullSecrets"], serde_json::json!([{ "name": "regcred" }]));
}

#[test]
fn the_same_input_gives_the_same_bytes() {
    assert_eq!(
        config_of(&workspace(), &[], DesiredState::Running, Resources::All),
        config_of(&workspace(), &[], DesiredState::Running, Resources::All)
    );
}

#[test]
fn replicas_follow_the_desired_state() {
    let replicas = |desired| objects(&workspace(), desired, Resources::All)[1].data["spec"]["replicas"].as_i64();
    assert_eq!(replicas(DesiredState::Running), Some(1));
    assert_eq!(replicas(DesiredState::Stopped), Some(0));
    assert_eq!(replicas(DesiredState::RestartRequested), Some(0));
}

#[test]
fn inventory_ids_are_unique_per_agent() {
    assert_ne!(inventory_id("1", "ws"), inventory_id("2", "ws"));
    assert_eq!(inventory_id("1", "ws"), inventory_id("1", "ws"));
    assert!(inventory_id("1", "ws").starts_with("ws-workspace-inventory-"));
}

#[test]
fn every_member_belongs_to_the_one_inventory() {
    let objects = objects(&workspace(), DesiredState::Running, Resources::All);
    let kinds: Vec<String> = objects.iter().map(|o| o.types.as_ref().unwrap().kind.clone()).collect();
    assert_eq!(kinds, ["ConfigMap", "Deployment", "Service", "PersistentVolumeClaim", "ServiceAccount"]);
    for member in &objects[1..] {
        let annotations = member.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations[OWNING_INVENTORY_ANNOTATION], inventory_id("1", "alice"));
        assert_eq!(annotations[PARTIAL_RECONCILIATION_ANNOTATION], "true");
        assert_eq!(member.metadata.labels.as_ref().unwrap()["agent.gitlab.com/id"], "1");
    }
    assert_eq!(objects[0].metadata.labels.as_ref().unwrap()[INVENTORY_ID_LABEL], inventory_id("1", "alice"));
}

#[test]
fn gitlabs_settings_add_its_network_policy_quota_labels_and_resources() {
    let config = AgentConfig::parse(
        "max_resources_per_workspace: {limits: {cpu: '2', memory: 4Gi}}\n\
         default_resources_per_workspace_container: {requests: {cpu: 100m}}\n\
         labels: {tier: dev, agent.gitlab.com/id: forged}\nannotations: {team: eng}\n",
    )
    .unwrap();
    let workspace = Workspace { cpu: None, memory: None, ..with_settings(config) };
    let objects = objects(&workspace, DesiredState::Running, Resources::All);
    let kinds: Vec<String> = objects.iter().map(|o| o.types.as_ref().unwrap().kind.clone()).collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap",
            "Deployment",
            "Service",
            "PersistentVolumeClaim",
            "ServiceAccount",
            "NetworkPolicy",
            "ResourceQuota",
            "ConfigMap",
            "Secret"
        ]
    );
    for member in &objects[1..7] {
        let labels = member.metadata.labels.as_ref().unwrap();
        assert_eq!((labels["tier"].as_str(), labels["agent.gitlab.com/id"].as_str()), ("dev", "1"), "ours win");
        let annotations = member.metadata.annotations.as_ref().unwrap();
        assert_eq!(annotations["team"], "eng");
        assert_eq!(annotations[OWNING_INVENTORY_ANNOTATION], inventory_id("1", "alice"));
    }
    let quota = &objects[6];
    assert!(!quota.metadata.annotations.as_ref().unwrap().contains_key(PARTIAL_RECONCILIATION_ANNOTATION));
    assert_eq!(quota.data["spec"]["hard"]["limits.memory"], "4Gi");
    let container = &objects[1].data["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["resources"]["requests"]["cpu"], "100m", "the agent's default resources");
    assert_eq!(objects[1].data["spec"]["template"]["metadata"]["labels"]["tier"], "dev");
}

#[test]
fn runtime_class_user_namespaces_and_escalation_reach_the_pod() {
    let pod = |config: AgentConfig| {
        objects(&with_settings(config), DesiredState::Running, Resources::All)[1].data["spec"]["template"]["spec"]
            .clone()
    };
    let before = pod(AgentConfig::before_settings());
    assert!(before.get("runtimeClassName").is_none() && before.get("hostUsers").is_none());
    assert!(before["containers"][0].get("securityContext").is_none(), "an old workspace builds as it did");
    let gitlab = pod(AgentConfig::default());
    assert_eq!(
        gitlab["containers"][0]["securityContext"],
        json!({ "allowPrivilegeEscalation": false, "privileged": false })
    );
    let config = AgentConfig::parse(
        "default_runtime_class: gvisor\nuse_kubernetes_user_namespaces: true\nallow_privilege_escalation: true\n",
    )
    .unwrap();
    let contained = pod(config);
    assert_eq!(
        (contained["runtimeClassName"].as_str(), contained["hostUsers"].as_bool()),
        (Some("gvisor"), Some(false))
    );
    assert_eq!(contained["containers"][0]["securityContext"]["allowPrivilegeEscalation"], true);
}

#[test]
fn a_terminated_workspace_gets_its_inventory_alone() {
    let objects = objects(&workspace(), DesiredState::Terminated, Resources::All);
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0].metadata.name.as_deref(), Some(inventory_id("1", "alice").as_str()));
}

#[test]
fn a_rollout_has_a_progress_deadline() {
    let objects = objects(&workspace(), DesiredState::Running, Resources::All);
    assert_eq!(objects[1].data["spec"]["progressDeadlineSeconds"], PROGRESS_DEADLINE_SECONDS);
}

fn gitlab(settings: &str) -> Workspace {
    with_settings(AgentConfig::parse(settings).unwrap())
}

fn objects(workspace: &Workspace, desired: DesiredState, resources: Resources) -> Vec<kube::api::DynamicObject> {
    crate::yaml::parse_objects(&config_of(workspace, &[], desired, resources)).unwrap()
}

fn find<'a>(objects: &'a [kube::api::DynamicObject], kind: &str, name: &str) -> Option<&'a kube::api::DynamicObject> {
    objects
        .iter()
        .find(|o| o.types.as_ref().is_some_and(|t| t.kind == kind) && o.metadata.name.as_deref() == Some(name))
}

#[test]
fn the_environment_is_a_secret_of_its_own_inventory_sent_with_all_resources_only() {
    let spec = gitlab("{}");
    let all = objects(&spec, DesiredState::Running, Resources::All);
    let container = &all[1].data["spec"]["template"]["spec"]["containers"][0];
    assert!(container.get("env").is_none(), "no value inline: {container}");
    assert_eq!(container["envFrom"], json!([{ "secretRef": { "name": "alice-env-var" } }]));
    let secret = find(&all, "Secret", "alice-env-var").expect("the env Secret");
    assert_eq!(secret.data["data"], json!({ "EDITOR": "dmlt" }), "base64 of vim");
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(annotations[OWNING_INVENTORY_ANNOTATION], secrets_inventory_id("1", "alice"));
    assert!(!annotations.contains_key(PARTIAL_RECONCILIATION_ANNOTATION), "as GitLab: not partial");
    let inventory = find(&all, "ConfigMap", &secrets_inventory_id("1", "alice")).expect("the secrets inventory");
    assert_eq!(inventory.metadata.labels.as_ref().unwrap()[INVENTORY_ID_LABEL], secrets_inventory_id("1", "alice"));
    let workspace_inventory = find(&all, "ConfigMap", &inventory_id("1", "alice")).expect("the inventory");
    assert_eq!(workspace_inventory.metadata.annotations.as_ref().unwrap()[PARTIAL_RECONCILIATION_ANNOTATION], "true");

    let partial = objects(&spec, DesiredState::Running, Resources::Partial);
    assert_eq!(partial.len(), all.len() - 2, "the secrets inventory and its Secret stay out");
    assert!(find(&partial, "Secret", "alice-env-var").is_none());
    assert_eq!(partial[1].data, all[1].data, "the Deployment is the same either way");
}

#[test]
fn a_workspace_from_before_settings_keeps_its_environment_inline() {
    let objects = objects(&workspace(), DesiredState::Running, Resources::All);
    let container = &objects[1].data["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["env"], json!([{ "name": "EDITOR", "value": "vim" }]));
    assert!(container.get("envFrom").is_none() && find(&objects, "Secret", "alice-env-var").is_none());
    assert!(objects[0].metadata.annotations.is_none(), "its inventory written as it was");
}

#[test]
fn a_terminated_workspace_gets_both_its_inventories_empty() {
    let spec = gitlab("{}");
    let terminated = objects(&spec, DesiredState::Terminated, Resources::All);
    let names: Vec<_> = terminated.iter().filter_map(|o| o.metadata.name.clone()).collect();
    assert_eq!(names, [inventory_id("1", "alice"), secrets_inventory_id("1", "alice")]);
    assert!(terminated.iter().all(|o| o.data.get("data").is_none()));
}

#[test]
fn in_a_shared_namespace_there_is_no_quota_and_the_policy_selects_the_workspaces_pods() {
    let spec = Workspace { namespace: "workspaces".into(), ..gitlab("shared_namespace: workspaces\n") };
    let objects = objects(&spec, DesiredState::Running, Resources::All);
    assert!(objects.iter().all(|o| o.types.as_ref().is_some_and(|t| t.kind != "ResourceQuota")));
    let policy = find(&objects, "NetworkPolicy", "alice").expect("the policy");
    assert_eq!(policy.data["spec"]["podSelector"], json!({ "matchLabels": { "app.kubernetes.io/name": "alice" } }));
    assert_eq!(policy.data["spec"]["podSelector"]["matchLabels"], objects[1].data["spec"]["selector"]["matchLabels"]);
    assert!(objects.iter().all(|o| o.metadata.namespace.as_deref() == Some("workspaces")));
}
