use super::PodSecurityLevel::{Baseline, Restricted};
use super::*;
use serde_json::json;

const PREFIX: &str = "spec.template.spec";

fn restricted_pod() -> Value {
    json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "app",
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"httpGet": {"port": 8080, "path": "/ready"}},
            "securityContext": {
                "allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            },
        }],
        "volumes": [{"name": "config", "configMap": {"name": "app"}}, {"name": "scratch"}],
    })
}

/// `pod` with `key` set to `value` in the object at JSON pointer `parent`.
fn with(mut pod: Value, parent: &str, key: &str, value: Value) -> Value {
    pod.pointer_mut(parent).unwrap().as_object_mut().unwrap().insert(key.into(), value);
    pod
}

#[test]
fn a_clean_restricted_pod_passes_both_levels() {
    assert_eq!(check(Baseline, PREFIX, &restricted_pod()), Ok(()));
    assert_eq!(check(Restricted, PREFIX, &restricted_pod()), Ok(()));
}

#[test]
fn each_baseline_violation_names_its_field_at_both_levels() {
    let c = "/containers/0/securityContext";
    let caps = format!("{c}/capabilities");
    let cases = [
        ("", "hostPID", json!(true), "spec.template.spec.hostPID: true is not allowed at baseline"),
        ("", "hostNetwork", json!(true), "spec.template.spec.hostNetwork: true"),
        ("/volumes/0", "hostPath", json!({"path": "/"}), "spec.template.spec.volumes[0].hostPath: "),
        (c, "privileged", json!(true), "spec.template.spec.containers[0].securityContext.privileged: true"),
        (caps.as_str(), "add", json!(["SYS_ADMIN"]), "capabilities.add[0]: \"SYS_ADMIN\""),
        ("/containers/0/ports/0", "hostPort", json!(8080), "containers[0].ports[0].hostPort: 8080"),
        ("/securityContext/seccompProfile", "type", json!("Unconfined"), "securityContext.seccompProfile.type"),
        ("/securityContext", "sysctls", json!([{"name": "kernel.msgmax"}]), "sysctls[0].name: \"kernel.msgmax\""),
        (c, "procMount", json!("Unmasked"), "containers[0].securityContext.procMount: \"Unmasked\""),
        (c, "seLinuxOptions", json!({"user": "system_u"}), "securityContext.seLinuxOptions.user: must not"),
        (c, "appArmorProfile", json!({"type": "Unconfined"}), "securityContext.appArmorProfile.type"),
        (c, "windowsOptions", json!({"hostProcess": true}), "securityContext.windowsOptions.hostProcess"),
        ("/containers/0/readinessProbe/httpGet", "host", json!("10.0.0.1"), "readinessProbe.httpGet.host"),
    ];
    for (parent, key, value, expected) in cases {
        let pod = with(restricted_pod(), parent, key, value);
        for level in [Baseline, Restricted] {
            let error = check(level, PREFIX, &pod).unwrap_err();
            // Restricted may add more (a pod's Unconfined seccomp leaves its containers unset).
            assert!(error.contains(expected) && (level == Restricted || !error.contains("; ")), "{key}: {error}");
        }
    }
    let safe = with(restricted_pod(), "/securityContext", "sysctls", json!([{"name": "net.ipv4.tcp_fin_timeout"}]));
    assert_eq!(check(Restricted, PREFIX, &safe), Ok(()));
}

#[test]
fn a_baseline_pod_without_hardening_fails_restricted() {
    let pod = json!({"containers": [{"name": "app", "image": "app:1"}], "volumes": [{"name": "d", "nfs": {}}]});
    assert_eq!(check(Baseline, PREFIX, &pod), Ok(()));
    let error = check(Restricted, PREFIX, &pod).unwrap_err();
    for expected in [
        "containers[0].securityContext.allowPrivilegeEscalation: must be set to false",
        "containers[0].securityContext.runAsNonRoot: must be true, here or in spec.template.spec.securityContext",
        "containers[0].securityContext.seccompProfile.type: must be RuntimeDefault or Localhost",
        "containers[0].securityContext.capabilities.drop: must include \"ALL\"",
        "volumes[0].nfs: nfs volumes are not allowed at restricted",
    ] {
        assert!(error.contains(expected), "{expected}: {error}");
    }
    let c = "/containers/0/securityContext";
    let caps = format!("{c}/capabilities");
    let cases = [
        (c, "runAsNonRoot", json!(false), "containers[0].securityContext.runAsNonRoot: false"),
        ("/securityContext", "runAsUser", json!(0), "spec.template.spec.securityContext.runAsUser: 0"),
        (c, "allowPrivilegeEscalation", json!(true), "allowPrivilegeEscalation: true"),
        (caps.as_str(), "add", json!(["CHOWN"]), "add[0]: \"CHOWN\" is not allowed at restricted"),
    ];
    for (parent, key, value, expected) in cases {
        let pod = with(restricted_pod(), parent, key, value);
        assert_eq!(check(Baseline, PREFIX, &pod), Ok(()), "{key}");
        assert!(check(Restricted, PREFIX, &pod).unwrap_err().contains(expected), "{key}");
    }
}

#[test]
fn init_and_ephemeral_containers_are_checked() {
    let clean = restricted_pod()["containers"][0].clone();
    let privileged = with(clean.clone(), "/securityContext", "privileged", json!(true));
    let pod = with(restricted_pod(), "", "initContainers", json!([clean, privileged]));
    let error = check(Baseline, PREFIX, &pod).unwrap_err();
    assert!(error.starts_with("spec.template.spec.initContainers[1].securityContext.privileged: true"), "{error}");
    let pod = with(restricted_pod(), "", "ephemeralContainers", json!([{"name": "debug"}]));
    assert_eq!(check(Baseline, PREFIX, &pod), Ok(()));
    let error = check(Restricted, PREFIX, &pod).unwrap_err();
    assert!(error.contains("ephemeralContainers[0].securityContext.allowPrivilegeEscalation"), "{error}");
}

#[test]
fn garbage_is_a_violation_not_a_panic() {
    let garbage = [
        (json!("a string"), "spec: must be an object"),
        (json!({"containers": 3}), "spec.containers: must be an array"),
        (json!({"containers": [1, null]}), "spec.containers[1]: must be an object"),
        (json!({"hostPID": "yes"}), "spec.hostPID: must be a boolean"),
        (json!({"securityContext": "x"}), "spec.securityContext: must be an object"),
        (json!({"securityContext": {"sysctls": {"name": "x"}}}), "spec.securityContext.sysctls: must be an array"),
        (json!({"volumes": ["x"]}), "spec.volumes[0]: must be an object"),
        (json!({"containers": [{"ports": [{"hostPort": "80"}]}]}), "hostPort: must be an integer"),
        (json!({"containers": [{"securityContext": {"capabilities": {"add": [5]}}}]}), "add[0]: must be a string"),
        (json!({"containers": [{"livenessProbe": []}]}), "spec.containers[0].livenessProbe: must be an object"),
    ];
    for (spec, expected) in garbage {
        for level in [Baseline, Restricted] {
            assert!(check(level, "spec", &spec).unwrap_err().contains(expected), "{level} {spec}");
        }
    }
    let deployment = json!({"spec": "nonsense"});
    let (path, spec) = pod_spec("apps", "Deployment", &deployment).unwrap();
    assert_eq!(check(Baseline, path, spec).unwrap_err(), "spec.template.spec: must be an object");
}

#[test]
fn the_message_is_capped() {
    let containers: Vec<_> = (1..=15).map(|port| json!({"ports": [{"hostPort": port}]})).collect();
    let error = check(Baseline, "spec", &json!({ "containers": containers })).unwrap_err();
    assert!(error.ends_with("spec.containers[9].ports[0].hostPort: 10 is not allowed at baseline; and 5 more"));
    assert_eq!(error.matches("; ").count(), 10);
}

#[test]
fn pod_spec_finds_each_kind() {
    let spec = json!({"containers": []});
    let template = json!({"template": {"spec": spec}});
    let cases = [
        ("", "Pod", json!({ "spec": spec }), "spec"),
        ("", "PodTemplate", template.clone(), "template.spec"),
        ("", "ReplicationController", json!({ "spec": template }), "spec.template.spec"),
        ("apps", "Deployment", json!({ "spec": template }), "spec.template.spec"),
        ("apps", "StatefulSet", json!({ "spec": template }), "spec.template.spec"),
        ("apps", "DaemonSet", json!({ "spec": template }), "spec.template.spec"),
        ("apps", "ReplicaSet", json!({ "spec": template }), "spec.template.spec"),
        ("batch", "Job", json!({ "spec": template }), "spec.template.spec"),
        (
            "batch",
            "CronJob",
            json!({"spec": {"jobTemplate": {"spec": template}}}),
            "spec.jobTemplate.spec.template.spec",
        ),
    ];
    for (group, kind, data, path) in cases {
        assert_eq!(pod_spec(group, kind, &data), Some((path, &spec)), "{kind}");
    }
    assert_eq!(pod_spec("", "ConfigMap", &json!({})), None);
    assert_eq!(pod_spec("example.com", "Deployment", &json!({ "spec": template })), None);
}

#[test]
fn levels_parse_and_print() {
    assert_eq!("baseline".parse::<PodSecurityLevel>(), Ok(Baseline));
    assert_eq!("restricted".parse::<PodSecurityLevel>().map(|l| l.to_string()), Ok("restricted".to_string()));
    for bad in ["privileged", "Restricted", ""] {
        let error = bad.parse::<PodSecurityLevel>().unwrap_err();
        assert!(error.contains("\"baseline\"") && error.contains("\"restricted\""), "{error}");
    }
    assert_eq!(PodSecurityLevel::default().label_value(), "baseline");
}
