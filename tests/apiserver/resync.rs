//! What full resync promises around it (issue 7): prerequisites first, a WorkspaceSyncStatus
//! that comes back when deleted by hand, drift repair, and private registries. The ledger's
//! no-leak promise is in `ledger_leak`.

use crate::support::stub::{Script, StubControlPlane, is_full};
use crate::support::system::System;
use crate::support::*;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn no_sync_runs_until_the_prerequisites_answer_then_a_full_cycle_follows() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("pr");
    create_workspace(&client, &format!("{id}-1"), "ws", Some(&id)).await;
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    stub.set_prerequisites_status(503);
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);

    let message = eventually("PrerequisitesFailed on the WorkspaceSyncStatus", LONG, || {
        let wss = wss_json(env, &id)?;
        let synced = condition(&wss, "Synced")?;
        (synced["reason"] == "PrerequisitesFailed").then(|| synced["message"].to_string())
    })
    .await;
    assert!(message.contains("503"), "{message}");
    eventually("a retry", LONG, || (stub.prerequisites_calls() >= 2).then_some(())).await;
    assert_eq!(stub.count(), 0, "no reconcile request before the prerequisites succeed");

    stub.set_prerequisites_status(200);
    let (index, first) = stub.wait_for("the first cycle", 0, LONG, |_| true).await;
    assert_eq!(index, 0);
    assert!(is_full(&first), "the first cycle after the prerequisites is full");
    assert_eq!(first.request.workspace_agent_infos.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_sync_status_deleted_by_hand_comes_back_and_syncing_goes_on() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("rc");
    let ns = format!("{id}-1");
    create_workspace(&client, &ns, "ws", Some(&id)).await;
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let agent = AgentProcess::start(env, &id, &stub.url, &[]);
    let before = eventually("the WorkspaceSyncStatus", LONG, || {
        let wss = wss_json(env, &id)?;
        wss["status"]["lastFullSyncTime"].is_string().then_some(wss)
    })
    .await;

    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "delete", "wss", &id]);
    let after = eventually("the WorkspaceSyncStatus recreated, with its status", LONG, || {
        let wss = wss_json(env, &id)?;
        (wss["metadata"]["uid"] != before["metadata"]["uid"] && wss["status"]["lastFullSyncTime"].is_string())
            .then_some(wss)
    })
    .await;
    assert_eq!(after["status"]["epoch"], before["status"]["epoch"], "the ledger is written back from memory");

    // Syncing goes on: a change still reaches the control plane.
    let seen = stub.count();
    kubectl_ok(env, &["-n", &ns, "scale", "deployment/ws", "--replicas=0"]);
    stub.wait_for("the change after recreation", seen, LONG, |r| {
        r.request.workspace_agent_infos.iter().any(|i| i.namespace == ns)
    })
    .await;
    assert!(agent.logs().contains("WorkspaceSyncStatus was deleted"), "a log line says what happened");
}

const MANAGED_BY: &str = "{.metadata.labels.app\\.kubernetes\\.io/managed-by}";

#[tokio::test(flavor = "multi_thread")]
async fn hand_edits_are_repaired_by_a_full_cycle_and_partials_never_apply_half_a_config() {
    let env = env();
    let system = System::start("drift").await;
    system.cli(&["create", "dora", "--image", "busybox:1.36"]);
    let workspace = system.wait_actual("dora", "Running").await;
    let ns = workspace["namespace"].as_str().expect("namespace").to_string();
    assert_eq!(get_field(env, &ns, "deployment/dora", MANAGED_BY).as_deref(), Some("wsync"));

    // Edits that leave the workspace Running: the control plane has nothing new to say.
    kubectl_ok(env, &["-n", &ns, "delete", "service", "dora"]);
    kubectl_ok(env, &["-n", &ns, "label", "deployment/dora", "app.kubernetes.io/managed-by=hand", "--overwrite"]);
    let partials = system.agent.cycles("partial");
    eventually("three partial cycles", LONG, || (system.agent.cycles("partial") >= partials + 3).then_some(())).await;
    assert_eq!(get_field(env, &ns, "service/dora", "{.metadata.name}"), None, "partials leave the edit alone");
    assert_eq!(get_field(env, &ns, "deployment/dora", MANAGED_BY).as_deref(), Some("hand"));

    // A full cycle on request puts the control plane's config back.
    let fulls = system.agent.cycles("full");
    let wss = format!("wss/{}", system.id);
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "annotate", &wss, "wsync.dev/resync-requested=drift-1", "--overwrite"]);
    eventually("the Service back and the label restored", LONG, || {
        let service = get_field(env, &ns, "service/dora", "{.metadata.name}");
        let label = get_field(env, &ns, "deployment/dora", MANAGED_BY);
        (service.as_deref() == Some("dora") && label.as_deref() == Some("wsync")).then_some(())
    })
    .await;
    assert!(system.agent.cycles("full") > fulls, "repaired by the requested full cycle");

    // Scaled by hand: depending on what the partial cycles see, the control plane may answer
    // with config (the whole inventory, never a subset that would prune the Service) or not;
    // a full cycle puts replicas back either way.
    kubectl_ok(env, &["-n", &ns, "scale", "deployment/dora", "--replicas=3"]);
    let partials = system.agent.cycles("partial");
    eventually("three partial cycles", LONG, || (system.agent.cycles("partial") >= partials + 3).then_some(())).await;
    assert_eq!(get_field(env, &ns, "service/dora", "{.metadata.name}").as_deref(), Some("dora"));
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "annotate", &wss, "wsync.dev/resync-requested=drift-2", "--overwrite"]);
    eventually("replicas back to 1", LONG, || {
        (get_field(env, &ns, "deployment/dora", "{.spec.replicas}").as_deref() == Some("1")).then_some(())
    })
    .await;
    system.wait_actual("dora", "Running").await;
    assert_eq!(get_field(env, &ns, "service/dora", "{.metadata.name}").as_deref(), Some("dora"));
}

#[tokio::test(flavor = "multi_thread")]
async fn named_pull_secrets_are_copied_kept_in_sync_and_a_missing_one_is_a_workspace_error() {
    let env = env();
    let registry = unique_id("reg");
    kubectl_ok(env, &["create", "namespace", &registry]);
    kubectl_ok(env, &["label", "namespace", &registry, &format!("{TEST_LABEL}={registry}")]);
    registry_secret(env, &registry, "regcred", "first");
    let source = format!("{registry}/regcred");
    let missing = format!("{registry}/missing");
    let allowed = format!("{source},{missing}");
    let system =
        System::start_configured("pull", &["--image-pull-secret", &source], &["--image-pull-secret-source", &allowed])
            .await;
    system.cli(&["create", "erin", "--image", "registry.example.com/ide:1"]);
    let workspace = system.wait_actual("erin", "Running").await;
    let ns = workspace["namespace"].as_str().expect("namespace").to_string();

    let data = "{.data.\\.dockerconfigjson}";
    let source_data = || get_field(env, &registry, "secret/regcred", data).expect("source secret");
    assert_eq!(get_field(env, &ns, "secret/regcred", data), Some(source_data()), "copied");
    assert_eq!(get_field(env, &ns, "secret/regcred", "{.type}").as_deref(), Some("kubernetes.io/dockerconfigjson"));
    assert_eq!(
        get_field(env, &ns, "deployment/erin", "{.spec.template.spec.imagePullSecrets[0].name}").as_deref(),
        Some("regcred"),
        "the Pods use it"
    );

    // The source changes: the copy follows without any workspace change.
    registry_secret(env, &registry, "regcred", "rotated");
    eventually("the copy to follow the rotated source", LONG, || {
        (get_field(env, &ns, "secret/regcred", data) == Some(source_data())).then_some(())
    })
    .await;

    // A named secret that does not exist fails that workspace, reported like any other error.
    let set = |secrets: &[&str]| {
        let mut args = vec!["agents", "set-image-pull-secrets", system.id.as_str()];
        for secret in secrets {
            args.extend(["--image-pull-secret", secret]);
        }
        system.control_plane.cli(&args)
    };
    set(&[&source, &missing]);
    let failed = system.wait_actual("erin", "Error").await;
    let message = failed["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains(&format!("image pull secret {missing} does not exist")), "{message}");

    // Dropped from the configuration: the copy goes, and the workspace recovers.
    set(&[]);
    system.wait_actual("erin", "Running").await;
    eventually("the copy removed", LONG, || {
        get_field(env, &ns, "secret/regcred", "{.metadata.name}").is_none().then_some(())
    })
    .await;

    // And a copy goes with its workspace.
    set(&[&source]);
    eventually("copied again", LONG, || get_field(env, &ns, "secret/regcred", "{.metadata.name}").map(|_| ())).await;
    system.cli(&["terminate", "erin"]);
    system.wait_actual("erin", "Terminated").await;
    assert_eq!(get_field(env, &ns, "secret/regcred", "{.metadata.name}"), None);
    kubectl_ok(env, &["delete", "namespace", &registry, "--wait=false"]);
}

/// A pull secret's copy follows its source long after the workspace's apply, so it is made
/// only where the agent's label still is: once the label is taken off the namespace (someone
/// else's now), a changed source is not copied there, and the workspace says why.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_pull_secret_is_not_copied_into_a_namespace_no_longer_the_agents() {
    let env = env();
    let registry = unique_id("reg2");
    kubectl_ok(env, &["create", "namespace", &registry]);
    kubectl_ok(env, &["label", "namespace", &registry, &format!("{TEST_LABEL}={registry}")]);
    registry_secret(env, &registry, "regcred", "first");
    let source = format!("{registry}/regcred");
    let system =
        System::start_configured("pull2", &["--image-pull-secret", &source], &["--image-pull-secret-source", &source])
            .await;
    system.cli(&["create", "fay", "--image", "registry.example.com/ide:1"]);
    let workspace = system.wait_actual("fay", "Running").await;
    let ns = workspace["namespace"].as_str().expect("namespace").to_string();
    let data = "{.data.\\.dockerconfigjson}";
    let copied = get_field(env, &ns, "secret/regcred", data).expect("copied");

    kubectl_ok(env, &["label", "namespace", &ns, "agent.gitlab.com/id-"]);
    registry_secret(env, &registry, "regcred", "rotated");
    let failed = system.wait_actual("fay", "Error").await;
    let message = failed["error"]["message"].as_str().unwrap_or_default().to_string();
    assert!(message.contains(&format!("namespace {ns} exists and is not labelled")), "{message}");
    assert_eq!(get_field(env, &ns, "secret/regcred", data), Some(copied), "the old copy, not the new credentials");
    kubectl_ok(env, &["delete", "namespace", &registry, &ns, "--wait=false"]);
}
