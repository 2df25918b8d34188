//! The benchmark's workspaces: N labelled Deployments, 100 to a namespace, each with a config
//! (an inventory and its Deployment) that is exactly what the cluster already holds, so that a
//! resync's applies are true no-ops, as in a steady-state cluster.

use crate::support::{self, LABEL_KEY, TEST_LABEL};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use wsync::protocol::inventory::{INVENTORY_ID_LABEL, MemberRef, OWNING_INVENTORY_ANNOTATION};

pub const PER_NAMESPACE: usize = 100;
pub const FIELD_MANAGER: &str = "wsync";
pub const CONCURRENCY: usize = 16;

pub struct Workload {
    pub id: String,
    pub keys: Vec<(String, String)>,
    pub configs: HashMap<(String, String), String>,
}

pub fn deployment(namespace: &str, name: &str, id: &str, inventory: &str, marker: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { LABEL_KEY: id, "app": name },
            "annotations": { OWNING_INVENTORY_ANNOTATION: inventory, "bench.wsync.dev/desired": marker },
        },
        "spec": {
            "replicas": 0,
            "paused": true,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] },
            },
        },
    })
}

/// The workspace's one Pod, as the agent's Pod watch lists it: labelled for the agent and
/// healthy (no status written, so no failure; the watch keeps none of it).
pub fn pod(namespace: &str, name: &str, id: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": format!("{name}-0"), "namespace": namespace, "labels": { LABEL_KEY: id, "app": name } },
        "spec": { "containers": [{ "name": "main", "image": "busybox:1.36" }] },
    })
}

/// The inventory's key for a workspace's Deployment.
fn deployment_member(namespace: &str, name: &str) -> String {
    MemberRef { namespace: namespace.into(), name: name.into(), group: "apps".into(), kind: "Deployment".into() }.key()
}

pub fn inventory(namespace: &str, name: &str, id: &str) -> Value {
    let inventory = format!("{name}-inventory");
    let member = deployment_member(namespace, name);
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": inventory,
            "namespace": namespace,
            "labels": { INVENTORY_ID_LABEL: inventory, LABEL_KEY: id },
        },
        "data": { member: "" },
    })
}

/// The config the control plane hands out: the inventory and its Deployment, as YAML.
pub fn config(namespace: &str, name: &str, id: &str, marker: &str) -> String {
    let inventory_id = format!("{name}-inventory");
    let documents = [inventory(namespace, name, id), deployment(namespace, name, id, &inventory_id, marker)];
    documents.iter().map(|d| format!("---\n{}", wsync::yaml::to_string(d).expect("yaml"))).collect()
}

pub async fn apply(client: &Client, object: &Value) -> Result<(), kube::Error> {
    support::server_side_apply(client, FIELD_MANAGER, object).await
}

/// Create N workspaces as the agent would leave them, one Pod each, and their configs; the
/// apiserver's refusal, if it refuses one.
pub async fn create(client: &Client, n: usize) -> Result<Workload, kube::Error> {
    let id = support::unique_id("bench");
    let started = Instant::now();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let keys: Vec<(String, String)> =
        (0..n).map(|i| (format!("{id}-{}", i / PER_NAMESPACE), format!("ws-{i}"))).collect();
    let mut names: Vec<&String> = keys.iter().map(|(ns, _)| ns).collect();
    names.dedup();
    for ns in names {
        let object = json!({ "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": ns, "labels": { LABEL_KEY: id, TEST_LABEL: id } } });
        namespaces.patch(ns, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object)).await?;
    }
    let configs: HashMap<(String, String), String> =
        keys.iter().map(|(ns, name)| ((ns.clone(), name.clone()), config(ns, name, &id, "0"))).collect();
    let done = std::sync::atomic::AtomicUsize::new(0);
    futures::stream::iter(&keys)
        .map(|(ns, name)| {
            let (client, id, done) = (client.clone(), id.clone(), &done);
            async move {
                let inventory_id = format!("{name}-inventory");
                apply(&client, &inventory(ns, name, &id)).await?;
                apply(&client, &deployment(ns, name, &id, &inventory_id, "0")).await?;
                apply(&client, &pod(ns, name, &id)).await?;
                let count = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                if count % 1000 == 0 {
                    eprintln!("  created {count}/{n} workspaces ({:.0?})", started.elapsed());
                }
                Ok::<(), kube::Error>(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<(), _>>()?;
    // The deployment controller writes each new Deployment's status once; let it finish, so
    // that what follows measures a quiet cluster.
    wait_until_observed(client, &id, n, Duration::from_secs(600)).await;
    eprintln!("  {n} workspaces ready in {:.1?}", started.elapsed());
    Ok(Workload { id, keys, configs })
}

/// Edit the inventory of `count` workspaces, spread over the workload, as a person would:
/// a merge patch of the one member key the agent's field manager owns, which takes it over.
/// Each is one object the next full resync must repair; returns how many were edited.
pub async fn drift_inventories(client: &Client, workload: &Workload, count: usize) -> usize {
    let stride = (workload.keys.len() / count.max(1)).max(1);
    let mut edited = 0;
    for (namespace, name) in workload.keys.iter().step_by(stride).take(count) {
        let patch = json!({ "data": { deployment_member(namespace, name): "edited by hand" } });
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), namespace);
        let inventory = format!("{name}-inventory");
        api.patch(&inventory, &PatchParams::default(), &Patch::Merge(&patch)).await.expect("edit an inventory");
        edited += 1;
    }
    edited
}

/// Wait until the `n` Deployments labelled for agent `id` all exist and the deployment
/// controller has seen each; false if `timeout` passed first.
pub async fn wait_until_observed(client: &Client, id: &str, n: usize, timeout: Duration) -> bool {
    let api: Api<Deployment> = Api::all(client.clone());
    let params = kube::api::ListParams::default().labels(&format!("{LABEL_KEY}={id}"));
    let deadline = Instant::now() + timeout;
    loop {
        match api.list(&params).await {
            Ok(listed) => {
                let observed =
                    listed.items.iter().filter(|d| d.status.as_ref().and_then(|s| s.observed_generation).is_some());
                if observed.count() == n {
                    return true;
                }
            }
            Err(error) => eprintln!("  listing the Deployments failed, retrying: {error}"),
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Delete the namespaces and wait until they are gone, so the next size starts quiet.
pub async fn delete(client: &Client, workload: &Workload) {
    delete_namespaces(client, &workload.id, &format!("{TEST_LABEL}={}", workload.id)).await;
}

/// Delete the agent's `WorkspaceSyncStatus` and the namespaces `selector` picks, and wait
/// until they are gone.
pub async fn delete_namespaces(client: &Client, agent_id: &str, selector: &str) {
    let env = support::env();
    support::kubectl_ok(env, &["delete", "namespace", "-l", selector, "--wait=false"]);
    let _ = support::kubectl(env, &["-n", support::AGENT_NAMESPACE, "delete", "wss", agent_id, "--ignore-not-found"]);
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(900) {
        let left = namespaces.list(&kube::api::ListParams::default().labels(selector)).await.map(|l| l.items.len());
        if left.unwrap_or(0) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    eprintln!("  cleaned up in {:.1?}", started.elapsed());
}
