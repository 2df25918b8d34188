//! The manifests' RBAC is enough and no more: the agent runs as the wsync-agent ServiceAccount,
//! with a token from the TokenRequest API, and does its whole job.

use crate::support::stub::{Script, StubControlPlane, is_full};
use crate::support::*;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
const SERVICE_ACCOUNT: &str = "system:serviceaccount:wsync-system:wsync-agent";

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_syncs_with_only_the_manifests_permissions() {
    let env = env();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = service_account_kubeconfig(env, dir.path());

    // No more than it needs.
    let denied = [
        ("create", "clusterrolebindings"),
        ("create", "pods/exec"),
        ("list", "secrets -n kube-system"),
        ("get", "secrets -n kube-system"),
        ("get", "secrets -n default"),
        ("watch", "secrets"),
        ("delete", "customresourcedefinitions"),
    ];
    assert_cannot(env, SERVICE_ACCOUNT, &denied);

    let client = admin_client(env).await;
    let id = unique_id("rb");
    let (ns, bad_ns) = (format!("{id}-1"), format!("{id}-bad"));
    create_workspace(&client, &ns, "ws", Some(&id)).await;
    // An allowed pull-secret source in the agent's own namespace, read through the Role there.
    let source = format!("{id}-regcred");
    kubectl_ok(
        env,
        &[
            "-n",
            AGENT_NAMESPACE,
            "create",
            "secret",
            "docker-registry",
            &source,
            "--docker-server=r.example",
            "--docker-username=u",
            "--docker-password=p",
        ],
    );
    let secret_member =
        format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: token\n  namespace: {ns}\nstringData:\n  a: b\n");
    let mut script = Script::with_intervals(300, 1);
    script
        .configs
        .insert((ns.clone(), "ws".into()), inventory_config(&ns, "inv", &[config_map(&ns, "cfg"), secret_member]));
    script.image_pull_secrets.insert((ns.clone(), "ws".into()), vec![(AGENT_NAMESPACE.to_string(), source.clone())]);
    script.always_return.push((bad_ns.clone(), "ws".into()));
    script.configs.insert((bad_ns.clone(), "ws".into()), "kind: [broken".into());
    let stub = StubControlPlane::start(script).await;
    let allowed = format!("{AGENT_NAMESPACE}/{source}");
    let agent = AgentProcess::start_as(
        kubeconfig,
        &id,
        &stub.url,
        crate::support::stub::STUB_TOKEN,
        &["--image-pull-secret-source", &allowed],
    );

    let (_, first) = stub.wait_for("the first cycle", 0, LONG, |_| true).await;
    assert!(is_full(&first));
    eventually("the config applied", LONG, || {
        kubectl(env, &["-n", &ns, "get", "configmap", "cfg"]).status.success().then_some(())
    })
    .await;
    eventually("the pull secret copied and the Secret member applied", LONG, || {
        let copied = kubectl(env, &["-n", &ns, "get", "secret", &source]).status.success();
        (copied && kubectl(env, &["-n", &ns, "get", "secret", "token"]).status.success()).then_some(())
    })
    .await;
    // The Secret leaves the config: pruned with patch and delete alone, never a read.
    let mut pruning = Script::with_intervals(300, 1);
    pruning.configs.insert((ns.clone(), "ws".into()), inventory_config(&ns, "inv", &[config_map(&ns, "cfg")]));
    pruning.image_pull_secrets.insert((ns.clone(), "ws".into()), vec![(AGENT_NAMESPACE.to_string(), source.clone())]);
    pruning.always_return.push((ns.clone(), "ws".into()));
    pruning.always_return.push((bad_ns.clone(), "ws".into()));
    pruning.configs.insert((bad_ns.clone(), "ws".into()), "kind: [broken".into());
    stub.set_script(pruning);
    eventually("the Secret member pruned", LONG, || {
        (!kubectl(env, &["-n", &ns, "get", "secret", "token"]).status.success()).then_some(())
    })
    .await;
    stub.wait_for("the broken config's error reported", 0, LONG, |r| {
        r.request.workspace_agent_infos.iter().any(|i| i.namespace == bad_ns && i.error_details.is_some())
    })
    .await;
    let events = apply_failed_events(env, AGENT_NAMESPACE, &format!("involvedObject.name={id}"));
    assert!(!events.trim().is_empty(), "the ApplyFailed event was emitted");
    stub.wait_for("more cycles", 4, LONG, |_| true).await;
    let logs = agent.logs();
    assert!(!logs.contains("forbidden") && !logs.contains("Forbidden"), "a permission is missing:\n{logs}");
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "delete", "secret", &source]);
}
