//! A shared namespace (DESIGN §2, "Trust": where): one workspace's objects select its own
//! Pods only. NetworkPolicy allows add up, so a policy that selected a neighbour's Pods would
//! open them; a Pod that posed as a neighbour's would fall under its policies.

use super::{Arena, info};
use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn objects_that_select_another_workspaces_pods_are_refused() {
    let kinds = format!("{},policy/PodDisruptionBudget", wsync::agent::policy::kinds::DEFAULT_ALLOWED_KINDS.join(","));
    let mut arena = Arena::start_shared("sn", &["--allowed-kinds", &kinds]).await;
    let shared = arena.good.clone();
    let object = |body: String| {
        let name = body.lines().find_map(|l| l.strip_prefix("  name: ")).unwrap_or_default().to_string();
        info(&shared, &name, &inventory_config(&shared, &format!("{name}-inventory"), &[body]))
    };
    let metadata = |kind: &str, api: &str, name: &str| {
        format!("apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {shared}\n")
    };
    let everyone = metadata("NetworkPolicy", "networking.k8s.io/v1", "everyone")
        + "spec:\n  podSelector: {matchExpressions: [{key: x, operator: DoesNotExist}]}\n  ingress: [{}]\n";
    let neighbour = metadata("NetworkPolicy", "networking.k8s.io/v1", "neighbour")
        + "spec:\n  podSelector: {matchLabels: {app.kubernetes.io/name: ws}}\n  ingress: [{}]\n";
    let budget = metadata("PodDisruptionBudget", "policy/v1beta1", "budget")
        + "spec:\n  maxUnavailable: 0\n  selector: {matchLabels: {app.kubernetes.io/name: ws}}\n";
    let impostor = metadata("Deployment", "apps/v1", "impostor")
        + "spec:\n  selector: {matchLabels: {app.kubernetes.io/name: impostor}}\n  template:\n    metadata: {labels: {app.kubernetes.io/name: ws}}\n    spec: {containers: [{name: main, image: busybox:1.36}]}\n";
    arena.attack(vec![object(everyone), object(neighbour), object(budget), object(impostor)]);
    arena
        .refusal("everyone", "must select its own workspace's Pods by matchLabels app.kubernetes.io/name: everyone")
        .await;
    arena.refusal("neighbour", "app.kubernetes.io/name: neighbour").await;
    arena.refusal("budget", "spec.selector must select its own workspace's Pods").await;
    arena.refusal("impostor", "its Pods must carry the label app.kubernetes.io/name: impostor").await;
    arena.good_syncs_on().await;
    arena.absent(&shared, "networkpolicy", "everyone");
    arena.absent(&shared, "networkpolicy", "neighbour");
    arena.absent(&shared, "poddisruptionbudget", "budget");
    arena.absent(&shared, "deployment", "impostor");
    arena.finish("objects that select another workspace's Pods in a shared namespace");
}
