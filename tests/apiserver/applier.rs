//! Applier scenarios on the real apiserver: isolation of a broken workspace, inventories and
//! pruning, termination with real namespace finalization, the apply policy, and `paused`.

use crate::support::stub::{Recorded, Reply, Script, StubControlPlane, summary};
use crate::support::*;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wsync::protocol::{ActualState, DesiredState, ErrorType, ReconcileRequest, TerminationProgress};

const LONG: Duration = Duration::from_secs(90);

fn error_for<'a>(r: &'a Recorded, namespace: &str) -> Option<&'a wsync::protocol::ErrorDetails> {
    r.request.workspace_agent_infos.iter().find(|i| i.namespace == namespace)?.error_details.as_ref()
}

fn exists(env: &TestEnv, namespace: &str, kind: &str, name: &str) -> bool {
    kubectl(env, &["-n", namespace, "get", kind, name]).status.success()
}

/// A Deployment the apiserver rejects with 422: its container has no image.
fn invalid_deployment(namespace: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ws\n  namespace: {namespace}\nspec:\n  replicas: 0\n  selector:\n    matchLabels:\n      app: ws\n  template:\n    metadata:\n      labels:\n        app: ws\n    spec:\n      containers:\n      - name: main\n"
    )
}

/// Hands out each workspace's config once, as a control plane does when nothing changed.
fn configs_once(script: Script) -> impl Fn(&ReconcileRequest) -> Reply + Send + Sync + 'static {
    let delivered: Mutex<HashSet<(String, String)>> = Mutex::new(HashSet::new());
    move |req| {
        let mut response = script.respond(req);
        let mut delivered = delivered.lock().unwrap();
        for info in &mut response.workspace_rails_infos {
            if !delivered.insert((info.namespace.clone(), info.name.clone())) {
                info.config_to_apply.clear();
            }
        }
        Reply::created(&response)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_broken_workspace_never_blocks_twenty_good_ones() {
    let env = env();
    let id = unique_id("aa");
    let bad_ns = format!("{id}-bad");
    let mut script = Script::with_intervals(300, 1);
    for n in 0..20 {
        let ns = format!("{id}-{n}");
        script.always_return.push((ns.clone(), "ws".into()));
        script.configs.insert((ns.clone(), "ws".into()), inventory_config(&ns, "inv", &[config_map(&ns, "cfg")]));
    }
    script.always_return.push((bad_ns.clone(), "ws".into()));
    script
        .configs
        .insert((bad_ns.clone(), "ws".into()), inventory_config(&bad_ns, "inv", &[invalid_deployment(&bad_ns)]));
    // Two more kinds of broken: unparsable YAML (for a workspace whose Deployment exists, so
    // its Event lands on the Deployment) and a refused kind.
    let (yaml_ns, refused_ns) = (format!("{id}-yaml"), format!("{id}-refused"));
    create_workspace(&admin_client(env).await, &yaml_ns, "ws", Some(&id)).await;
    script.configs.insert((yaml_ns.clone(), "ws".into()), "kind: [unterminated".into());
    script.always_return.push((refused_ns.clone(), "ws".into()));
    let job = format!("apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: miner\n  namespace: {refused_ns}\n");
    script.configs.insert((refused_ns.clone(), "ws".into()), inventory_config(&refused_ns, "inv", &[job]));
    let stub = StubControlPlane::start(Script::default()).await;
    stub.set_responder(configs_once(script));
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    for (ns, words) in [(&yaml_ns, "invalid YAML"), (&refused_ns, "Job.batch")] {
        let (_, r) = stub.wait_for("each broken workspace's error", 0, LONG, |r| error_for(r, ns).is_some()).await;
        let message = &error_for(&r, ns).expect("error").error_message;
        assert!(message.contains(words), "{ns}: {message}");
    }
    let on_deployment = apply_failed_events(env, &yaml_ns, "involvedObject.kind=Deployment");
    assert!(on_deployment.contains("invalid YAML"), "ApplyFailed event on the Deployment: {on_deployment:?}");

    let (reported, request) =
        stub.wait_for("the broken workspace's error", 0, LONG, |r| error_for(r, &bad_ns).is_some()).await;
    let error = error_for(&request, &bad_ns).expect("error details");
    assert_eq!(error.error_type, ErrorType::Applier);
    assert!(
        error.error_message.contains("Deployment apps/") || error.error_message.contains("Deployment.apps"),
        "{}",
        error.error_message
    );
    assert!(error.error_message.contains("Required value"), "the apiserver's own words: {}", error.error_message);
    for n in 0..20 {
        let ns = format!("{id}-{n}");
        eventually("every good workspace applied", LONG, || exists(env, &ns, "configmap", "cfg").then_some(())).await;
    }

    // The stub returned the workspace with its error: acknowledged, so cleared and not resent.
    eventually("the error cleared", LONG, || (wss_json(env, &id)?["status"]["pendingErrorCount"] == 0).then_some(()))
        .await;
    stub.wait_for("two more cycles", reported + 3, LONG, |_| true).await;
    let later: Vec<Recorded> = stub.requests().into_iter().skip(reported + 1).collect();
    assert!(later.iter().all(|r| error_for(r, &bad_ns).is_none()), "an acknowledged error was sent again");

    // The failure is an Event on the WorkspaceSyncStatus, since the Deployment never existed.
    let events = apply_failed_events(env, AGENT_NAMESPACE, &format!("involvedObject.name={id}"));
    assert!(events.contains("Required value"), "ApplyFailed event: {events:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn members_that_leave_the_inventory_are_pruned_and_nothing_else() {
    let env = env();
    let id = unique_id("ac");
    let ns = format!("{id}-1");
    let members =
        |names: &[&str]| inventory_config(&ns, "inv", &names.iter().map(|n| config_map(&ns, n)).collect::<Vec<_>>());
    let mut script = Script::with_intervals(300, 1);
    script.always_return.push((ns.clone(), "ws".into()));
    script.configs.insert((ns.clone(), "ws".into()), members(&["keep", "drop", "adopted", "unowned"]));
    let stub = StubControlPlane::start(script.clone()).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    for name in ["keep", "drop", "adopted", "unowned"] {
        eventually("the first config applied", LONG, || exists(env, &ns, "configmap", name).then_some(())).await;
    }
    let inventory = kubectl_ok(env, &["-n", &ns, "get", "configmap", "inv", "-o", "jsonpath={.data}"]);
    assert!(inventory.contains(&format!("{ns}_drop__ConfigMap")), "cli-utils keys: {inventory}");

    // Hold the config back while the objects are changed by hand.
    let mut quiet = script.clone();
    quiet.configs.clear();
    stub.set_script(quiet);
    let settled = stub.count() + 2;
    stub.wait_for("a cycle without config", settled, LONG, |_| true).await;
    kubectl_ok(
        env,
        &["-n", &ns, "annotate", "configmap", "adopted", "config.k8s.io/owning-inventory=someone-else", "--overwrite"],
    );
    kubectl_ok(env, &["-n", &ns, "annotate", "configmap", "unowned", "config.k8s.io/owning-inventory-"]);
    kubectl_ok(env, &["-n", &ns, "create", "configmap", "bystander", "--from-literal=a=b"]);

    let mut smaller = script.clone();
    smaller.configs.insert((ns.clone(), "ws".into()), members(&["keep"]));
    stub.set_script(smaller);
    eventually("the dropped member pruned", LONG, || (!exists(env, &ns, "configmap", "drop")).then_some(())).await;
    eventually("the inventory lists only what is left", LONG, || {
        let data = kubectl_ok(env, &["-n", &ns, "get", "configmap", "inv", "-o", "jsonpath={.data}"]);
        (data.contains(&format!("{ns}_keep__ConfigMap")) && !data.contains("adopted")).then_some(())
    })
    .await;
    for survivor in ["keep", "adopted", "unowned", "bystander"] {
        assert!(exists(env, &ns, "configmap", survivor), "{survivor} must not be pruned");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn termination_runs_to_terminated_and_the_namespace_is_gone() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("ad");
    let ns = format!("{id}-1");
    create_workspace(&client, &ns, "ws", Some(&id)).await;
    kubectl_ok(env, &["-n", &ns, "create", "configmap", "home", "--from-literal=a=b"]);

    // Desired Terminated from the start; actual follows what the agent reports, as Rails does.
    let mut script = Script::with_intervals(300, 1);
    script.always_return.push((ns.clone(), "ws".into()));
    let terminated_reported = Arc::new(Mutex::new(false));
    let seen = terminated_reported.clone();
    let stub = StubControlPlane::start(Script::default()).await;
    let key = ns.clone();
    stub.set_responder(move |req| {
        let mut response = script.respond(req);
        let reported =
            req.workspace_agent_infos.iter().find(|i| i.namespace == key).and_then(|i| i.termination_progress);
        let mut done = seen.lock().unwrap();
        *done |= reported == Some(TerminationProgress::Terminated);
        for info in response.workspace_rails_infos.iter_mut().filter(|i| i.namespace == key) {
            info.desired_state = DesiredState::Terminated;
            info.actual_state = match (*done, reported) {
                (true, _) => ActualState::Terminated,
                (false, Some(_)) => ActualState::Terminating,
                (false, None) => ActualState::Running,
            };
        }
        Reply::created(&response)
    });
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);

    let progress = |r: &Recorded| {
        r.request.workspace_agent_infos.iter().find(|i| i.namespace == ns).and_then(|i| i.termination_progress)
    };
    let (terminating, _) =
        stub.wait_for("Terminating", 0, LONG, |r| progress(r) == Some(TerminationProgress::Terminating)).await;
    let (terminated, _) =
        stub.wait_for("Terminated", terminating, LONG, |r| progress(r) == Some(TerminationProgress::Terminated)).await;
    let gone = kubectl(env, &["get", "namespace", &ns]);
    assert!(!gone.status.success(), "the namespace is really gone");

    // Once the control plane says Terminated, the agent forgets the workspace.
    eventually("the workspace forgotten", LONG, || {
        let wss = wss_json(env, &id)?;
        let tracked = wss["status"]["terminations"].as_object().is_some_and(|t| t.contains_key(&format!("{ns}/ws")));
        (!tracked).then_some(())
    })
    .await;
    let after = stub.count();
    stub.wait_for("two more cycles", after + 1, LONG, |_| true).await;
    assert!(
        stub.requests()[terminated + 1..].iter().skip(1).all(|r| progress(r).is_none()),
        "forgotten workspaces are not reported"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn refused_streams_change_nothing_and_name_the_object() {
    let env = env();
    let id = unique_id("ae");
    let (rbac_ns, secret_ns, victim_ns) = (format!("{id}-1"), format!("{id}-2"), format!("{id}-victim"));
    let binding = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {id}-admin\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: default\n  namespace: {rbac_ns}\n"
    );
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: stolen\n  namespace: {victim_ns}\nstringData:\n  a: b\n"
    );
    let mut script = Script::with_intervals(300, 1);
    for (ns, refused) in [(&rbac_ns, binding), (&secret_ns, secret)] {
        script.always_return.push((ns.clone(), "ws".into()));
        let config = inventory_config(ns, "inv", &[config_map(ns, "innocent"), refused]);
        script.configs.insert((ns.clone(), "ws".into()), config);
    }
    let stub = StubControlPlane::start(Script::default()).await;
    stub.set_responder(configs_once(script));
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);

    let (_, r) = stub.wait_for("the RBAC refusal", 0, LONG, |r| error_for(r, &rbac_ns).is_some()).await;
    let message = &error_for(&r, &rbac_ns).expect("error").error_message;
    assert!(
        message.contains(&format!("ClusterRoleBinding.rbac.authorization.k8s.io {rbac_ns}/{id}-admin")),
        "{message}"
    );
    let (_, r) = stub.wait_for("the namespace refusal", 0, LONG, |r| error_for(r, &secret_ns).is_some()).await;
    let message = &error_for(&r, &secret_ns).expect("error").error_message;
    assert!(message.contains(&format!("Secret {victim_ns}/stolen")) && message.contains("outside"), "{message}");

    for ns in [&rbac_ns, &secret_ns] {
        assert!(
            !kubectl(env, &["get", "namespace", ns]).status.success(),
            "a refused stream creates nothing, not even {ns}"
        );
    }
    assert!(!kubectl(env, &["get", "clusterrolebinding", &format!("{id}-admin")]).status.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_agent_applies_nothing_but_still_reports() {
    let env = env();
    let client = admin_client(env).await;
    let id = unique_id("af");
    let ns = format!("{id}-1");
    create_workspace(&client, &ns, "ws", Some(&id)).await;
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    stub.wait_for("the first full cycle", 0, LONG, crate::support::stub::is_full).await;
    eventually("the WorkspaceSyncStatus", LONG, || wss_json(env, &id)).await;

    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "patch", "wss", &id, "--type=merge", "-p", r#"{"spec":{"paused":true}}"#]);
    // Give the spec change a cycle to land, then offer a config.
    let mark = stub.count() + 2;
    stub.wait_for("cycles after pausing", mark, LONG, |_| true).await;
    let mut script = Script::with_intervals(300, 1);
    script.configs.insert((ns.clone(), "ws".into()), inventory_config(&ns, "inv", &[config_map(&ns, "paused-cfg")]));
    stub.set_script(script);
    kubectl_ok(env, &["-n", &ns, "scale", "deployment/ws", "--replicas=0"]);
    let (reported, _) = stub
        .wait_for("the change reported while paused", mark, LONG, |r| {
            r.request.workspace_agent_infos.iter().any(|i| i.namespace == ns)
        })
        .await;
    stub.wait_for("two more cycles", reported + 2, LONG, |_| true).await;
    assert!(!exists(env, &ns, "configmap", "paused-cfg"), "a paused agent applies nothing");

    kubectl_ok(
        env,
        &["-n", AGENT_NAMESPACE, "patch", "wss", &id, "--type=merge", "-p", r#"{"spec":{"paused":false}}"#],
    );
    kubectl_ok(env, &["-n", &ns, "scale", "deployment/ws", "--replicas=1"]);
    eventually("applied once unpaused", LONG, || exists(env, &ns, "configmap", "paused-cfg").then_some(())).await;
}

/// The Deployment's resourceVersion as the apiserver holds it now.
fn deployment_rv(env: &TestEnv, namespace: &str) -> String {
    kubectl_ok(env, &["-n", namespace, "get", "deployment", "ws", "-o", "jsonpath={.metadata.resourceVersion}"])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_whose_apply_recovers_is_reported_again_without_its_error() {
    let env = env();
    let id = unique_id("ag");
    let ns = format!("{id}-1");
    create_workspace(&admin_client(env).await, &ns, "ws", Some(&id)).await;
    // The config is handed out once per change; the stub returns the workspace every cycle,
    // so its error is acknowledged as soon as it is reported.
    let config: Arc<Mutex<(u32, String)>> = Arc::new(Mutex::new((1, "kind: [unterminated".into())));
    let delivered = Mutex::new(0u32);
    let mut script = Script::with_intervals(300, 1);
    script.always_return.push((ns.clone(), "ws".into()));
    let stub = StubControlPlane::start(Script::default()).await;
    let offered = config.clone();
    stub.set_responder(move |req| {
        let mut response = script.respond(req);
        let (version, text) = offered.lock().unwrap().clone();
        let mut delivered = delivered.lock().unwrap();
        if *delivered < version {
            *delivered = version;
            response.workspace_rails_infos.iter_mut().for_each(|info| info.config_to_apply = text.clone());
        }
        Reply::created(&response)
    });
    let _agent = AgentProcess::start(env, &id, &stub.url, &[]);
    stub.wait_for("the broken config's error", 0, LONG, |r| error_for(r, &ns).is_some()).await;
    eventually("the error acknowledged", LONG, || {
        (wss_json(env, &id)?["status"]["pendingErrorCount"] == 0).then_some(())
    })
    .await;

    // Let the Deployment settle (the controller-manager writes its status) and be acknowledged.
    let settled_rv = eventually("the Deployment settled and acknowledged", LONG, || {
        let rv = deployment_rv(env, &ns);
        let acknowledged = wss_json(env, &id)?["status"]["acknowledged"][format!("{ns}/ws")].as_str()?.to_string();
        std::thread::sleep(Duration::from_secs(2));
        (deployment_rv(env, &ns) == rv && acknowledged == rv).then_some(rv)
    })
    .await;

    // A config that applies, and leaves the Deployment as it is.
    let mark = stub.count();
    *config.lock().unwrap() = (2, inventory_config(&ns, "inv", &[config_map(&ns, "cfg")]));
    eventually("the fixed config applied", LONG, || exists(env, &ns, "configmap", "cfg").then_some(())).await;
    let (_, report) = stub
        .wait_for("the workspace reported again", mark, LONG, |r| {
            r.request.workspace_agent_infos.iter().any(|i| i.namespace == ns && i.latest_k8s_deployment_info.is_some())
        })
        .await;
    let info = report.request.workspace_agent_infos.iter().find(|i| i.namespace == ns).expect("the info");
    assert!(info.error_details.is_none(), "reported without an error, which clears it: {}", summary(&report));
    let sent = info.latest_k8s_deployment_info.as_ref().and_then(|d| d.resource_version());
    assert_eq!(sent.as_deref(), Some(settled_rv.as_str()), "the unchanged Deployment, read again");
    assert_eq!(deployment_rv(env, &ns), settled_rv, "nothing changed the Deployment: the recovery did the reporting");
}
