//! A kubelet stand-in for the local cluster, which has no scheduler and no kubelet: it marks
//! every Pending Pod Running and Ready, so that the real deployment controller writes real
//! Deployment status. Never part of the agent. On kind, a real kubelet does this.
//!
//! Some images fail instead, with the status fields a real kubelet writes for that failure
//! (as `real-node.md` recorded them from kubelet 1.20 and containerd): the phase, the
//! container's `state.waiting` reason and message, its `lastState.terminated` and restart
//! count, and the Pod's conditions:
//!
//! | image                         | status                                                       |
//! |-------------------------------|--------------------------------------------------------------|
//! | `standin/image-pull-backoff`  | Pending, `ImagePullBackOff` "Back-off pulling image …"       |
//! | `standin/oomkilled`           | Running, not ready, `CrashLoopBackOff`, last `OOMKilled` 137 |
//! | `standin/config-error`        | Pending, `CreateContainerConfigError` "secret … not found"    |
//! | `standin/unschedulable`       | Pending, `PodScheduled` False `Unschedulable`                |
//! | `standin/pull-recovers`       | `ImagePullBackOff`, then Running and Ready 4 s later          |
//! | `standin/first-pull-fails`    | `ErrImagePull` (no back-off yet), then Running 1 s later      |
//! | `standin/serves-here`         | Running, its address this machine's (`host_address`)         |
//! | `standin/link-local`          | Running, its address the metadata service's                  |
//! | `standin/loopback`            | Running, its address 127.0.0.1                               |

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use std::time::Duration;

/// Run until the task is dropped. `selector` limits it to some Pods, e.g. one test's.
pub async fn run(client: Client, selector: Option<String>) {
    let pods: Api<Pod> = Api::all(client.clone());
    let mut config = watcher::Config::default();
    if let Some(selector) = &selector {
        config = config.labels(selector);
    }
    let mut events = std::pin::pin!(watcher(pods, config).default_backoff().applied_objects());
    let mut seen = std::collections::HashSet::new();
    loop {
        let pod = match events.try_next().await {
            Ok(Some(pod)) => pod,
            Ok(None) => return,
            Err(_) => continue,
        };
        let is_running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if is_running || pod.metadata.deletion_timestamp.is_some() || !seen.insert(pod.uid().unwrap_or_default()) {
            continue;
        }
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let containers = containers(&pod);
        let image = containers.first().map(|(_, image)| image.clone()).unwrap_or_default();
        let name = pod.name_any();
        let write = |status: Value| {
            let (api, name) = (api.clone(), name.clone());
            async move {
                let _ =
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({ "status": status }))).await;
            }
        };
        match image.as_str() {
            "standin/image-pull-backoff" => write(waiting(&containers, "ImagePullBackOff", &back_off(&image))).await,
            "standin/oomkilled" => write(crash_loop(&containers)).await,
            "standin/config-error" => {
                write(waiting(&containers, "CreateContainerConfigError", "secret \"missing\" not found")).await
            }
            "standin/unschedulable" => write(unschedulable()).await,
            "standin/pull-recovers" | "standin/first-pull-fails" => {
                let (reason, message, after) = if image == "standin/pull-recovers" {
                    ("ImagePullBackOff", back_off(&image), Duration::from_secs(4))
                } else {
                    (
                        "ErrImagePull",
                        format!("rpc error: failed to pull and unpack image {image:?}"),
                        Duration::from_secs(1),
                    )
                };
                write(waiting(&containers, reason, &message)).await;
                let (ready, api, name) = (running(&containers), api.clone(), name.clone());
                tokio::spawn(async move {
                    tokio::time::sleep(after).await;
                    let _ = api
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({ "status": ready })))
                        .await;
                });
            }
            "standin/serves-here" => write(running_at(&containers, &host_address().to_string())).await,
            "standin/link-local" => write(running_at(&containers, "169.254.169.254")).await,
            "standin/loopback" => write(running_at(&containers, "127.0.0.1")).await,
            _ => write(running(&containers)).await,
        }
    }
}

/// Each container's name and image.
fn containers(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .as_ref()
        .map(|s| s.containers.iter().map(|c| (c.name.clone(), c.image.clone().unwrap_or_default())).collect())
        .unwrap_or_default()
}

/// The status a kubelet writes for `pod` once pulling its image backs off.
pub fn image_pull_back_off(pod: &Pod) -> Value {
    let containers = containers(pod);
    let image = containers.first().map(|(_, image)| image.clone()).unwrap_or_default();
    waiting(&containers, "ImagePullBackOff", &back_off(&image))
}

fn now() -> String {
    jiff::Timestamp::now().to_string()
}

fn back_off(image: &str) -> String {
    format!("Back-off pulling image {image:?}")
}

fn condition(type_: &str, status: &str) -> Value {
    json!({"type": type_, "status": status, "lastTransitionTime": now()})
}

fn running(containers: &[(String, String)]) -> Value {
    running_at(containers, "10.244.0.10")
}

fn running_at(containers: &[(String, String)], address: &str) -> Value {
    let statuses: Vec<Value> = containers
        .iter()
        .map(|(name, image)| {
            json!({
                "name": name, "ready": true, "started": true, "restartCount": 0, "image": image, "imageID": "standin",
                "state": {"running": {"startedAt": now()}},
            })
        })
        .collect();
    json!({
        "phase": "Running",
        "podIP": address,
        "podIPs": [{"ip": address}],
        "startTime": now(),
        "conditions": [condition("PodScheduled", "True"), condition("Initialized", "True"), condition("ContainersReady", "True"), condition("Ready", "True")],
        "containerStatuses": statuses,
    })
}

/// Scheduled, but every container waits: Pending, not ready.
fn waiting(containers: &[(String, String)], reason: &str, message: &str) -> Value {
    let statuses: Vec<Value> = containers
        .iter()
        .map(|(name, image)| {
            json!({
                "name": name, "ready": false, "started": false, "restartCount": 0, "image": image, "imageID": "",
                "state": {"waiting": {"reason": reason, "message": message}},
            })
        })
        .collect();
    json!({
        "phase": "Pending",
        "hostIP": "10.0.0.1",
        "startTime": now(),
        "conditions": [
            condition("Initialized", "True"),
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now()},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": now()},
            condition("PodScheduled", "True"),
        ],
        "containerStatuses": statuses,
    })
}

/// Killed for memory four times, backing off before the fifth start.
fn crash_loop(containers: &[(String, String)]) -> Value {
    let mut status = waiting(containers, "CrashLoopBackOff", "back-off 40s restarting failed container");
    status["phase"] = json!("Running");
    for container in status["containerStatuses"].as_array_mut().into_iter().flatten() {
        container["restartCount"] = json!(4);
        container["lastState"] = json!({"terminated": {
            "exitCode": 137, "reason": "OOMKilled", "startedAt": now(), "finishedAt": now(), "containerID": "containerd://standin",
        }});
    }
    status
}

/// No node takes it: Pending, never scheduled.
fn unschedulable() -> Value {
    json!({
        "phase": "Pending",
        "conditions": [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": now(),
            "message": "0/1 nodes are available: 1 Insufficient cpu.",
        }],
    })
}

/// This machine's first address that is not loopback (`ip`): where a test listens when a
/// stand-in Pod must be reachable at an address the agent's gate accepts.
pub fn host_address() -> std::net::IpAddr {
    let shown =
        std::process::Command::new("ip").args(["-4", "-o", "addr", "show", "scope", "global"]).output().expect("ip");
    let text = String::from_utf8_lossy(&shown.stdout);
    let address = text.split_whitespace().skip_while(|word| *word != "inet").nth(1).expect("a global address");
    address.split('/').next().unwrap_or_default().parse().expect("an address")
}
