//! GitLab-shaped input (#20): the agent applies a workspace's config exactly as GitLab Rails
//! generates it (tests/fixtures/gitlab/config_to_apply.yaml, transcribed from GitLab's own
//! spec; its header names the source), with every kind GitLab emits: two inventories, a
//! NetworkPolicy, a ResourceQuota, a scripts ConfigMap and the variables' Secrets.

use crate::support::stub::{Script, StubControlPlane};
use crate::support::*;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(90);

/// The fixture with its placeholders filled in for this test's agent and workspace.
fn gitlab_config(agent_id: &str, name: &str, namespace: &str) -> String {
    let fixture = include_str!("../fixtures/gitlab/config_to_apply.yaml");
    fixture
        .replace("gl-rd-ns-991-990-fedcba", namespace)
        .replace("workspace-991-990-fedcba", name)
        .replace("agent.gitlab.com/id: '991'", &format!("agent.gitlab.com/id: '{agent_id}'"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_as_gitlab_generates_it_is_applied_whole_and_runs() {
    let env = env();
    let id = unique_id("gitlab");
    let (name, namespace) = (format!("{id}-ws"), format!("gl-rd-ns-{id}"));
    // The fixture's Pods name a RuntimeClass; a cluster that runs GitLab workspaces has one.
    let runtime_class = "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: standard\nhandler: runc\n";
    kubectl_apply(env, runtime_class);

    let mut script = Script::with_intervals(300, 1);
    let key = (namespace.clone(), name.clone());
    script.configs.insert(key.clone(), gitlab_config(&id, &name, &namespace));
    script.always_return.push(key);
    let stub = StubControlPlane::start(script).await;
    // As the manifests' ServiceAccount: their RBAC covers every kind GitLab sends.
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = service_account_kubeconfig(env, dir.path());
    let _agent = AgentProcess::start_as(kubeconfig, &id, &stub.url, crate::support::stub::STUB_TOKEN, &[]);
    let client = admin_client(env).await;
    let _kubelet = tokio::spawn(kubelet::run(client, Some(format!("{LABEL_KEY}={id}"))));

    let (_, report) = stub
        .wait_for("the workspace reported Running without an error", 0, LONG, |r| {
            r.request.workspace_agent_infos.iter().any(|info| {
                info.name == name
                    && info.error_details.is_none()
                    && wsync::control_plane::decisions::rules::actual_state(info)
                        == wsync::protocol::ActualState::Running
            })
        })
        .await;
    let errors: Vec<_> = report.request.workspace_agent_infos.iter().filter_map(|i| i.error_details.as_ref()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    for object in [
        format!("configmap/{name}-workspace-inventory"),
        format!("configmap/{name}-secrets-inventory"),
        format!("configmap/{name}-scripts-configmap"),
        format!("deployment/{name}"),
        format!("service/{name}"),
        format!("persistentvolumeclaim/{name}-gl-workspace-data"),
        format!("serviceaccount/{name}"),
        format!("networkpolicy/{name}"),
        format!("resourcequota/{name}"),
        format!("secret/{name}-env-var"),
        format!("secret/{name}-file"),
    ] {
        assert!(kubectl(env, &["-n", &namespace, "get", &object]).status.success(), "{object} is in the cluster");
    }
    let egress = get_field(env, &namespace, &format!("networkpolicy/{name}"), "{.spec.egress[1].to[0].ipBlock.except}");
    assert!(egress.is_some_and(|e| e.contains("10.0.0.0/8")), "GitLab's egress rules, as sent");
    let quota = get_field(env, &namespace, &format!("resourcequota/{name}"), "{.spec.hard.limits\\.memory}");
    assert_eq!(quota.as_deref(), Some("4Gi"));
}

/// The reference control plane with GitLab's settings: a workspace gets its NetworkPolicy,
/// its ResourceQuota, the operator's labels and annotations and the default resources, and
/// runs. Settings changed later reach only workspaces created after; the first keeps its own.
#[tokio::test(flavor = "multi_thread")]
async fn gitlabs_agent_settings_shape_the_workspaces_created_under_them() {
    let env = env();
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = dir.path().join("agent-config.yaml");
    std::fs::write(
        &settings,
        "remote_development:\n  network_policy:\n    egress:\n      - allow: 0.0.0.0/0\n        except: [10.0.0.0/8]\n  \
         default_resources_per_workspace_container:\n    requests: {cpu: 100m, memory: 64Mi}\n    limits: {cpu: 500m, memory: 256Mi}\n  \
         max_resources_per_workspace:\n    requests: {cpu: '1', memory: 1Gi}\n    limits: {cpu: '2', memory: 2Gi}\n  \
         labels: {tier: development}\n  annotations: {team: engineering}\n",
    )
    .expect("write settings");
    let config = settings.display().to_string();
    let system = crate::support::system::System::start_with("gl-set", &["--config", &config]).await;
    system.cli(&["create", "first", "--image", "busybox:1.36"]);
    let first = system.wait_actual("first", "Running").await;
    let ns = first["namespace"].as_str().expect("namespace").to_string();
    let except = get_field(env, &ns, "networkpolicy/first", "{.spec.egress[1].to[0].ipBlock.except[0]}");
    assert_eq!(except.as_deref(), Some("10.0.0.0/8"));
    assert_eq!(get_field(env, &ns, "resourcequota/first", "{.spec.hard.limits\\.memory}").as_deref(), Some("2Gi"));
    assert_eq!(get_field(env, &ns, "deployment/first", "{.metadata.labels.tier}").as_deref(), Some("development"));
    assert_eq!(get_field(env, &ns, "service/first", "{.metadata.annotations.team}").as_deref(), Some("engineering"));
    let cpu = get_field(env, &ns, "deployment/first", "{.spec.template.spec.containers[0].resources.limits.cpu}");
    assert_eq!(cpu.as_deref(), Some("500m"), "the default resources, which the quota needs");

    std::fs::write(&settings, "network_policy: {enabled: false}\nlabels: {tier: production}\n").expect("write");
    system.control_plane.cli(&["agents", "set-config", &system.id, &config]);
    system.cli(&["create", "second", "--image", "busybox:1.36"]);
    let second = system.wait_actual("second", "Running").await;
    let second_ns = second["namespace"].as_str().expect("namespace").to_string();
    assert_eq!(
        get_field(env, &second_ns, "deployment/second", "{.metadata.labels.tier}").as_deref(),
        Some("production")
    );
    assert!(!kubectl(env, &["-n", &second_ns, "get", "networkpolicy/second"]).status.success(), "policy off for it");
    // The first workspace's next config (its Stop) is built from the settings it was created under.
    system.cli(&["stop", "first"]);
    system.wait_actual("first", "Stopped").await;
    assert_eq!(get_field(env, &ns, "deployment/first", "{.metadata.labels.tier}").as_deref(), Some("development"));
    assert!(kubectl(env, &["-n", &ns, "get", "networkpolicy/first"]).status.success());
}
