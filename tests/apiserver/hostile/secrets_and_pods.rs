//! Which Secrets the agent reads, and what its Pods may do (DESIGN §2, "Trust": which
//! Secrets, what): rules 1 and 3, and the attacks that read any Secret, ran a host-level Pod
//! or intercepted traffic with `externalIPs`.

use super::{Arena, LONG, config, info};
use crate::support::*;
use serde_json::json;

fn secret(env: &TestEnv, namespace: &str, name: &str, type_: &str) {
    kubectl_ok(env, &["create", "namespace", namespace]);
    let id = namespace.rsplit_once('-').map_or(namespace, |(id, _)| id);
    kubectl_ok(env, &["label", "namespace", namespace, &format!("{TEST_LABEL}={id}")]);
    let manifest = json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": name, "namespace": namespace },
                           "type": type_, "data": { ".dockerconfigjson": "e30=" } });
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), manifest.to_string()).expect("write");
    kubectl_ok(env, &["apply", "-f", path_str(file.path())]);
}

fn with_pull_secrets(mut info: serde_json::Value, sources: &[(&str, &str)]) -> serde_json::Value {
    info["image_pull_secrets"] = sources.iter().map(|(ns, name)| json!({ "namespace": ns, "name": name })).collect();
    info
}

#[tokio::test(flavor = "multi_thread")]
async fn a_secret_the_operator_did_not_allow_is_never_read() {
    let env = env();
    let id = unique_id("hs");
    let registry = format!("{id}-reg");
    secret(env, &registry, "regcred", "kubernetes.io/dockerconfigjson");
    let opaque_ns = format!("{id}-opq");
    secret(env, &opaque_ns, "opaque", "Opaque");
    let allowed = [format!("{registry}/regcred"), format!("{opaque_ns}/opaque")];
    let mut arena = Arena::start_as(&id, &allowed, &[]).await;
    kubectl_ok(env, &["-n", &arena.victim, "create", "secret", "generic", "token", "--from-literal=token=hunter2"]);
    let (a1, a2, a3) = (arena.attack_namespace(1), arena.attack_namespace(2), arena.attack_namespace(3));
    let plain = |ns: &str| config(ns, &[config_map(ns, "cfg")]);
    arena.count_attacks(3);
    arena.replace_attack(vec![
        with_pull_secrets(info(&a1, "steal", &plain(&a1)), &[(&arena.victim, "token")]),
        with_pull_secrets(info(&a2, "opaque", &plain(&a2)), &[(&opaque_ns, "opaque")]),
        with_pull_secrets(info(&a3, "allowed", &plain(&a3)), &[(&registry, "regcred")]),
    ]);
    let message = arena.refusal("steal", "not an allowed source").await;
    assert!(message.contains(&format!("{}/token", arena.victim)), "names the Secret: {message}");
    let message = arena.refusal("opaque", "is not one of kubernetes.io/dockerconfigjson").await;
    assert!(message.contains("Opaque"), "{message}");
    arena.good_syncs_on().await;
    eventually("the allowed source copied", LONG, || get_field(env, &a3, "secret/regcred", "{.type}")).await;
    arena.absent(&a1, "secret", "token");
    arena.absent(&a1, "configmap", "cfg");
    arena.absent(&a2, "secret", "opaque");

    // The operator withdraws the allowed source: the next full cycle (the first of a new
    // agent) deletes the copy it made.
    arena.agent.restart_without("--image-pull-secret-source");
    let message = arena.refusal("allowed", "not an allowed source").await;
    assert!(message.contains(&format!("{registry}/regcred")), "{message}");
    eventually("the copy of a withdrawn source deleted", LONG, || {
        get_field(env, &a3, "secret/regcred", "{.metadata.name}").is_none().then_some(())
    })
    .await;
    arena.finish("a Secret the operator did not allow");
}

fn deployment(namespace: &str, name: &str, pod_spec: serde_json::Value) -> String {
    let manifest = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "selector": { "matchLabels": { "app": name } },
                  "template": { "metadata": { "labels": { "app": name } }, "spec": pod_spec } }
    });
    wsync::yaml::to_string(&manifest).expect("yaml")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_level_pod_is_refused_and_namespaces_carry_pod_security_labels() {
    let env = env();
    let mut arena = Arena::start("hp", &[], &[]).await;
    let a1 = arena.attack_namespace(1);
    let host = json!({ "hostPID": true, "hostNetwork": true,
        "containers": [{ "name": "c", "image": "busybox", "volumeMounts": [{ "name": "root", "mountPath": "/host" }] }],
        "volumes": [{ "name": "root", "hostPath": { "path": "/" } }] });
    arena.attack(vec![info(&a1, "host", &config(&a1, &[deployment(&a1, "host", host)]))]);
    let message = arena.refusal("host", "hostPID").await;
    for field in ["hostNetwork", "hostPath"] {
        assert!(message.contains(field), "names {field}: {message}");
    }
    arena.good_syncs_on().await;
    arena.absent(&a1, "deployment", "host");

    // The namespaces the agent creates carry the labels; one edited by hand gets them back.
    let level = |ns: &str| {
        get_field(env, ns, &format!("namespace/{ns}"), "{.metadata.labels.pod-security\\.kubernetes\\.io/enforce}")
    };
    assert_eq!(level(&arena.good).as_deref(), Some("baseline"));
    kubectl_ok(
        env,
        &["label", "namespace", &arena.good, "pod-security.kubernetes.io/enforce=privileged", "--overwrite"],
    );
    eventually("the label set again", LONG, || (level(&arena.good).as_deref() == Some("baseline")).then_some(())).await;
    arena.finish("a host-level Pod");
}

#[tokio::test(flavor = "multi_thread")]
async fn at_restricted_a_pod_baseline_allows_is_refused() {
    let env = env();
    let mut arena = Arena::start("rs", &[], &["--pod-security-level", "restricted"]).await;
    let a1 = arena.attack_namespace(1);
    let plain = json!({ "containers": [{ "name": "c", "image": "busybox" }] });
    arena.attack(vec![info(&a1, "root", &config(&a1, &[deployment(&a1, "root", plain)]))]);
    let message = arena.refusal("root", "at restricted").await;
    assert!(message.contains("runAsNonRoot") && message.contains("allowPrivilegeEscalation"), "{message}");
    arena.good_syncs_on().await;
    arena.absent(&a1, "deployment", "root");
    let enforce = get_field(env, &arena.good, &format!("namespace/{}", arena.good), "{.metadata.labels}");
    assert!(enforce.is_some_and(|l| l.contains("\"pod-security.kubernetes.io/enforce\":\"restricted\"")));
    arena.finish("a root Pod at restricted");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_service_with_external_ips_is_refused() {
    let mut arena = Arena::start("ei", &[], &[]).await;
    let a1 = arena.attack_namespace(1);
    let service = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: intercept\n  namespace: {a1}\nspec:\n  ports: [{{port: 443}}]\n  externalIPs: [\"8.8.8.8\"]\n"
    );
    arena.attack(vec![info(&a1, "intercept", &config(&a1, &[service]))]);
    arena.refusal("intercept", "spec.externalIPs").await;
    arena.good_syncs_on().await;
    arena.absent(&a1, "service", "intercept");
    arena.finish("a Service with externalIPs");
}

/// What a template puts on every Pod, and what the cluster creates from it: finalizers the
/// ReplicaSet controller copies into each Pod (one no controller removes holds the namespace
/// `Terminating` for ever), an AppArmor annotation that unconfines a container (1.20 has no
/// field for it), a generic ephemeral volume whose claim picks another tenant's volume, and a
/// finalizer Kubernetes removes from claims only, put on a ConfigMap.
#[tokio::test(flavor = "multi_thread")]
async fn what_a_template_puts_on_its_pods_is_checked() {
    let mut arena = Arena::start("tm", &[], &[]).await;
    let ns: Vec<String> = (1..=4).map(|n| arena.attack_namespace(n)).collect();
    let container = json!([{ "name": "c", "image": "busybox" }]);
    let with_template_metadata = |namespace: &str, name: &str, mut metadata: serde_json::Value| {
        metadata["labels"] = json!({ "app": name });
        let manifest = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name, "namespace": namespace },
            "spec": { "selector": { "matchLabels": { "app": name } },
                      "template": { "metadata": metadata, "spec": { "containers": container } } }
        });
        wsync::yaml::to_string(&manifest).expect("yaml")
    };
    let pinned = with_template_metadata(&ns[0], "pinned", json!({ "finalizers": ["example.com/never-done"] }));
    let unconfined = with_template_metadata(
        &ns[1],
        "unconfined",
        json!({ "annotations": { "container.apparmor.security.beta.kubernetes.io/c": "unconfined" } }),
    );
    let scratch = json!({ "containers": container, "volumes": [{ "name": "scratch", "ephemeral": { "volumeClaimTemplate": {
        "spec": { "volumeName": "retained-volume-of-another-tenant", "accessModes": ["ReadWriteOnce"],
                  "resources": { "requests": { "storage": "1Gi" } } } } } }] });
    let stuck = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: stuck\n  namespace: {}\n  finalizers: [kubernetes.io/pvc-protection]\n",
        ns[3]
    );
    arena.attack(vec![
        info(&ns[0], "pinned", &config(&ns[0], &[pinned])),
        info(&ns[1], "unconfined", &config(&ns[1], &[unconfined])),
        info(&ns[2], "scratch", &config(&ns[2], &[deployment(&ns[2], "scratch", scratch)])),
        info(&ns[3], "stuck", &config(&ns[3], &[stuck])),
    ]);
    arena.refusal("pinned", "spec.template.metadata.finalizers").await;
    arena.refusal("unconfined", "spec.template.metadata.annotations.container.apparmor").await;
    arena.refusal("scratch", "ephemeral.volumeClaimTemplate.spec.volumeName").await;
    arena.refusal("stuck", "metadata.finalizers").await;
    arena.good_syncs_on().await;
    arena.absent(&ns[0], "deployment", "pinned");
    arena.absent(&ns[1], "deployment", "unconfined");
    arena.absent(&ns[2], "deployment", "scratch");
    arena.absent(&ns[3], "configmap", "stuck");
    arena.finish("what a template puts on its Pods");
}
