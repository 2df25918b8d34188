//! What an allowed kind may carry, and what prune may delete (DESIGN §2, "Trust": where,
//! what): rules 2 and 4, and the attack that pruned across namespaces.

use super::{Arena, LONG, config, info};
use crate::support::*;
use wsync::protocol::inventory::OWNING_INVENTORY_ANNOTATION;

#[tokio::test(flavor = "multi_thread")]
async fn fields_that_reach_outside_the_workspace_are_refused() {
    let mut arena = Arena::start("fp", &[], &[]).await;
    let ns: Vec<String> = (1..=4).map(|n| arena.attack_namespace(n)).collect();
    let claim = format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: home\n  namespace: {}\nspec:\n  volumeName: retained-volume-of-another-tenant\n  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n",
        ns[0]
    );
    let owned = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned\n  namespace: {}\n  ownerReferences: [{{apiVersion: v1, kind: Namespace, name: kube-system, uid: 0b6a7e53-0000-0000-0000-000000000000}}]\n",
        ns[1]
    );
    let stuck = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stuck\n  namespace: {}\n  finalizers: [example.com/never-done]\n",
        ns[2]
    );
    let node_port = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: open\n  namespace: {}\nspec:\n  type: NodePort\n  ports: [{{port: 80}}]\n",
        ns[3]
    );
    arena.attack(vec![
        info(&ns[0], "claim", &config(&ns[0], &[claim])),
        info(&ns[1], "owned", &config(&ns[1], &[owned])),
        info(&ns[2], "stuck", &config(&ns[2], &[stuck])),
        info(&ns[3], "open", &config(&ns[3], &[node_port])),
    ]);
    arena.refusal("claim", "spec.volumeName").await;
    arena.refusal("owned", "metadata.ownerReferences").await;
    arena.refusal("stuck", "metadata.finalizers").await;
    arena.refusal("open", "spec.type: NodePort").await;
    arena.good_syncs_on().await;
    arena.absent(&ns[0], "persistentvolumeclaim", "home");
    arena.absent(&ns[1], "configmap", "owned");
    arena.absent(&ns[2], "configmap", "stuck");
    arena.absent(&ns[3], "service", "open");
    arena.finish("fields that reach outside the workspace");
}

#[tokio::test(flavor = "multi_thread")]
async fn prune_never_leaves_the_workspace_and_an_inventory_cannot_list_itself() {
    let env = env();
    let mut arena = Arena::start("pr", &[], &[]).await;
    let (a1, a2) = (arena.attack_namespace(1), arena.attack_namespace(2));
    let first = config(&a1, &[config_map(&a1, "cfg")]);
    arena.replace_attack(vec![info(&a1, "prune", &first)]);
    eventually("the first config applied", LONG, || {
        kubectl(env, &["-n", &a1, "get", "configmap", "cfg"]).status.success().then_some(())
    })
    .await;

    // Anyone who can write a ConfigMap in the workspace namespace lists a stranger's object,
    // in another namespace and annotated as the inventory's, and a kind the policy refuses.
    let victim = arena.victim.clone();
    kubectl_ok(env, &["-n", &victim, "create", "configmap", "precious", "--from-literal=keep=me"]);
    kubectl_ok(
        env,
        &["-n", &victim, "annotate", "configmap", "precious", &format!("{OWNING_INVENTORY_ANNOTATION}=inv")],
    );
    let foreign = format!("{victim}_precious__ConfigMap");
    let role = format!("{a1}_reader_rbac.authorization.k8s.io_Role");
    let patch = format!(r#"{{"data":{{"{foreign}":"","{role}":""}}}}"#);
    kubectl_ok(env, &["-n", &a1, "patch", "configmap", "inv", "--type", "merge", "-p", &patch]);
    // Labelled as the agent's, as the reference control plane's inventories are, so that the
    // agent's watch sees the edit.
    kubectl_ok(env, &["-n", &a1, "label", "configmap", "inv", &format!("{LABEL_KEY}={}", arena.id)]);
    arena.count_attacks(1);
    std::thread::sleep(std::time::Duration::from_secs(2));
    // The next config drops `cfg`: prune runs, and must delete only that.
    arena.replace_attack(vec![
        info(&a1, "prune", &config(&a1, &[config_map(&a1, "cfg2")])),
        info(&a2, "itself", &config(&a2, &[config_map(&a2, "inv")])),
    ]);
    arena.count_attacks(1);
    eventually("cfg pruned", LONG, || {
        (!kubectl(env, &["-n", &a1, "get", "configmap", "cfg"]).status.success()).then_some(())
    })
    .await;
    assert!(
        kubectl(env, &["-n", &victim, "get", "configmap", "precious"]).status.success(),
        "pruned across namespaces"
    );
    let data = get_field(env, &a1, "configmap/inv", "{.data}").unwrap_or_default();
    assert!(!data.contains(&foreign) && !data.contains("rbac"), "the foreign names were dropped: {data}");
    assert!(arena.agent.logs().contains("dropping a member the inventory may not hold"));
    arena.refused_one();
    arena.refusal("itself", "cannot be the inventory itself").await;
    arena.good_syncs_on().await;
    arena.absent(&a2, "configmap", "inv");
    arena.finish("prune outside the workspace");
}
