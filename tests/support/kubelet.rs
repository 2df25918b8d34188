//! A kubelet stand-in for the local cluster, which has no scheduler and no kubelet: it marks
//! every Pending Pod Running and Ready, so that the real deployment controller writes real
//! Deployment status. Never part of the agent. On kind, a real kubelet does this.

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

/// Run until the task is dropped. `selector` limits it to some Pods, e.g. one test's.
pub async fn run(client: Client, selector: Option<String>) {
    let pods: Api<Pod> = Api::all(client.clone());
    let mut config = watcher::Config::default();
    if let Some(selector) = &selector {
        config = config.labels(selector);
    }
    let mut events = std::pin::pin!(watcher(pods, config).default_backoff().applied_objects());
    loop {
        let pod = match events.try_next().await {
            Ok(Some(pod)) => pod,
            Ok(None) => return,
            Err(_) => continue,
        };
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if running || pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let namespace = pod.namespace().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let now = jiff::Timestamp::now().to_string();
        let containers: Vec<_> =
            pod.spec.as_ref().map(|s| s.containers.iter().map(|c| c.name.clone()).collect()).unwrap_or_default();
        let statuses: Vec<_> = containers
            .iter()
            .map(|name| json!({
                "name": name, "ready": true, "started": true, "restartCount": 0, "image": "standin", "imageID": "standin",
                "state": {"running": {"startedAt": now}},
            }))
            .collect();
        let condition = |type_: &str| json!({"type": type_, "status": "True", "lastTransitionTime": now});
        let status = json!({"status": {
            "phase": "Running",
            "podIP": "10.244.0.10",
            "startTime": now,
            "conditions": [condition("PodScheduled"), condition("Initialized"), condition("ContainersReady"), condition("Ready")],
            "containerStatuses": statuses,
        }});
        let _ = api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await;
    }
}
