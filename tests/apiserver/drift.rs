//! Drift-aware full resync (#23): a full cycle that finds no drift sends no PATCH to a
//! workspace's objects (counted in the audit log); every out-of-band change is still repaired
//! by the next full cycle, with one PATCH for each drifted object and none for the rest; a
//! desired config that changed is applied.

use crate::support::stub::{Reply, Script, StubControlPlane, is_full};
use crate::support::system::System;
use crate::support::*;
use std::collections::BTreeSet;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(90);

/// An audit mark after which the agent has sent no PATCH in `namespace` for two partial
/// cycles: its applies there have settled, however slow the machine.
async fn settled_mark(agent: &AgentProcess, namespace: &str) -> usize {
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let mark = audit_mark(env());
        let partials = agent.cycles("partial");
        eventually("two partial cycles", LONG, || (agent.cycles("partial") >= partials + 2).then_some(())).await;
        if patches(mark, namespace).is_empty() {
            return mark;
        }
        assert!(std::time::Instant::now() < deadline, "the agent kept writing in {namespace}");
    }
}

/// Ask for a full cycle, and wait until its applies are done: two partial cycles after it.
async fn full_resync(id: &str, agent: &AgentProcess, request: &str) {
    let fulls = agent.cycles("full");
    let wss = format!("wss/{id}");
    kubectl_ok(
        env(),
        &["-n", AGENT_NAMESPACE, "annotate", &wss, &format!("wsync.dev/resync-requested={request}"), "--overwrite"],
    );
    eventually("the requested full cycle", LONG, || (agent.cycles("full") > fulls).then_some(())).await;
    let partials = agent.cycles("partial");
    eventually("two partial cycles after it", LONG, || (agent.cycles("partial") >= partials + 2).then_some(())).await;
}

/// The agent's PATCHes in `namespace` since `mark`, as `resource/name`.
fn patches(mark: usize, namespace: &str) -> Vec<String> {
    audited(env(), mark, AGENT_USER, |e| e["verb"] == "patch" && e["objectRef"]["namespace"] == namespace)
        .iter()
        .filter_map(|line| {
            let (_, object) = line.split_once(' ')?;
            let mut parts = object.split('/');
            let resource = parts.next()?.trim_matches('"').to_string();
            let _namespace = parts.next()?;
            let name = parts.next()?.split(' ').next()?.trim_matches('"').to_string();
            Some(format!("{resource}/{name}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_resync_sends_only_what_drifted_and_repairs_all_of_it() {
    let env = env();
    let system = System::start("dr").await;
    system.cli(&["create", "erin", "--image", "busybox:1.36", "--env", "GREETING=hello"]);
    let workspace = system.wait_actual("erin", "Running").await;
    let ns = workspace["namespace"].as_str().expect("namespace").to_string();
    let inventories = kubectl_ok(env, &["-n", &ns, "get", "configmaps", "-o", "name"]);
    let workspace_inventory = inventories.lines().find(|l| l.contains("workspace-inventory")).expect("an inventory");
    let secrets_inventory = inventories.lines().find(|l| l.contains("secrets-inventory")).expect("an inventory");

    // No drift: the only PATCHes are the config's Secrets, which the agent never reads.
    let mark = audit_mark(env);
    full_resync(&system.id, &system.agent, "no-drift").await;
    let sent = patches(mark, &ns);
    assert!(
        sent.iter().all(|p| p.starts_with("secrets/")),
        "a full resync without drift PATCHes only Secrets: {sent:?}"
    );
    assert!(system.agent.logs().contains("listed what the agent applied, for the drift check"));

    // Out-of-band changes that no partial cycle sees (it reports Deployments only).
    kubectl_ok(env, &["-n", &ns, "delete", "service", "erin"]);
    kubectl_ok(env, &["-n", &ns, "label", "serviceaccount/erin", "app.kubernetes.io/managed-by=hand", "--overwrite"]);
    let owner = "config.k8s.io/owning-inventory";
    kubectl_ok(env, &["-n", &ns, "annotate", "pvc/erin-home", &format!("{owner}=hand"), "--overwrite"]);
    let data: serde_json::Value =
        serde_json::from_str(&kubectl_ok(env, &["-n", &ns, "get", workspace_inventory, "-o", "json"])).expect("json");
    let member = data["data"].as_object().and_then(|d| d.keys().next().cloned()).expect("an inventory member");
    let edit = serde_json::json!({"data": {member.as_str(): "edited"}}).to_string();
    kubectl_ok(env, &["-n", &ns, "patch", workspace_inventory, "--type", "merge", "-p", &edit]);
    kubectl_ok(env, &["-n", &ns, "delete", secrets_inventory]);

    let mark = audit_mark(env);
    full_resync(&system.id, &system.agent, "drift").await;
    let field = |object: &str, path: &str| get_field(env, &ns, object, path);
    let repaired = || {
        let service = field("service/erin", "{.metadata.name}");
        let label = field("serviceaccount/erin", "{.metadata.labels.app\\.kubernetes\\.io/managed-by}");
        let owner = field("pvc/erin-home", "{.metadata.annotations.config\\.k8s\\.io/owning-inventory}");
        let inventory_now = kubectl_ok(env, &["-n", &ns, "get", workspace_inventory, "-o", "json"]);
        let data: Option<serde_json::Value> = serde_json::from_str(&inventory_now).ok();
        let data = data.and_then(|d| d["data"][member.as_str()].as_str().map(str::to_string));
        let inventory = field(secrets_inventory, "{.metadata.name}");
        service.as_deref() == Some("erin")
            && label.as_deref() == Some("wsync")
            && owner.is_some_and(|o| o != "hand")
            && data.as_deref() == Some("")
            && inventory.is_some()
    };
    eventually(
        "every drift repaired: the Service, the label, the annotation, the ConfigMap, the inventory",
        LONG,
        || repaired().then_some(()),
    )
    .await;

    let sent: Vec<String> = patches(mark, &ns).into_iter().filter(|p| !p.starts_with("secrets/")).collect();
    let inventory_name = |object: &str| object.trim_start_matches("configmap/").to_string();
    let drifted = BTreeSet::from([
        "services/erin".to_string(),
        "serviceaccounts/erin".to_string(),
        "persistentvolumeclaims/erin-home".to_string(),
        format!("configmaps/{}", inventory_name(workspace_inventory)),
        format!("configmaps/{}", inventory_name(secrets_inventory)),
    ]);
    assert_eq!(sent.iter().cloned().collect::<BTreeSet<_>>(), drifted, "one PATCH for each drifted object: {sent:?}");
    assert_eq!(sent.len(), drifted.len(), "and only one: {sent:?}");

    // Scaled and re-imaged: the control plane may answer the partial report with config, which
    // a partial cycle applies; whatever is left, the full cycle repairs, and touches nothing else.
    kubectl_ok(env, &["-n", &ns, "scale", "deployment/erin", "--replicas=3"]);
    kubectl_ok(env, &["-n", &ns, "set", "image", "deployment/erin", "workspace=busybox:evil"]);
    // What the partial cycles apply (and apply again, once the first apply changed the
    // Deployment back) settles before the full cycle is measured.
    let mark = settled_mark(&system.agent, &ns).await;
    full_resync(&system.id, &system.agent, "deployment-drift").await;
    eventually("the Deployment scaled back and re-imaged", LONG, || {
        let replicas = field("deployment/erin", "{.spec.replicas}");
        let image = field("deployment/erin", "{.spec.template.spec.containers[0].image}");
        (replicas.as_deref() == Some("1") && image.as_deref() == Some("busybox:1.36")).then_some(())
    })
    .await;
    let sent: Vec<String> = patches(mark, &ns).into_iter().filter(|p| !p.starts_with("secrets/")).collect();
    assert!(sent.iter().all(|p| p == "deployments/erin"), "only the Deployment, if anything: {sent:?}");
    system.wait_actual("erin", "Running").await;
}

/// A config that changed is applied by a full cycle; the same config again sends nothing.
/// The stub answers with config only in full cycles, so no partial cycle applies it.
#[tokio::test(flavor = "multi_thread")]
async fn a_changed_config_is_applied_by_a_full_resync_and_an_unchanged_one_is_not() {
    let env = env();
    let id = unique_id("dc");
    let ns = format!("{id}-1");
    let client = admin_client(env).await;
    create_workspace(&client, &ns, "ws", Some(&id)).await;
    let config = |value: &str| {
        let member = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\n  labels: {{{LABEL_KEY}: {id}}}\ndata:\n  greeting: {value}\n"
        );
        // Both carry the agent's label, as GitLab's and the reference control plane's do: the
        // drift check lists by it (an object without it is applied every full cycle).
        inventory_config(&ns, "ws-inventory", &[member]).replacen(
            "  labels:\n",
            &format!("  labels:\n    {LABEL_KEY}: {id}\n"),
            1,
        )
    };
    let script = |value: &str| {
        let mut script = Script::with_intervals(300, 1);
        script.configs.insert((ns.clone(), "ws".to_string()), config(value));
        script
    };
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let full_only = |script: Script| {
        move |request: &wsync::protocol::ReconcileRequest| {
            let full = request.update_type == wsync::protocol::UpdateType::Full;
            Reply::created(&if full {
                script.respond(request)
            } else {
                Script::with_intervals(300, 1).respond(request)
            })
        }
    };
    stub.set_responder(full_only(script("hello")));
    let agent = AgentProcess::start(env, &id, &stub.url, &[]);
    eventually("the first full cycle's apply", LONG, || {
        (get_field(env, &ns, "configmap/settings", "{.data.greeting}").as_deref() == Some("hello")).then_some(())
    })
    .await;

    stub.set_responder(full_only(script("goodbye")));
    full_resync(&id, &agent, "changed").await;
    assert_eq!(get_field(env, &ns, "configmap/settings", "{.data.greeting}").as_deref(), Some("goodbye"));

    let mark = audit_mark(env);
    full_resync(&id, &agent, "unchanged").await;
    assert!(stub.requests().iter().any(is_full));
    assert_eq!(patches(mark, &ns), Vec::<String>::new(), "nothing drifted, nothing sent");
}
