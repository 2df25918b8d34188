use super::*;

#[test]
fn gitlabs_defaults_and_its_network_policy() {
    let config = AgentConfig::parse("remote_development:\n  enabled: true\n").err();
    assert!(config.is_some_and(|e| e.contains("enabled")), "unknown keys are refused by name");
    let config = AgentConfig::parse("{}").unwrap();
    assert_eq!(config, AgentConfig::default());
    let spec = config.network_policy_spec(&json!({})).expect("on by default");
    // GitLab's own, as its spec fixture has it (tests/fixtures/gitlab/config_to_apply.yaml).
    assert_eq!(
        spec,
        json!({
            "egress": [
                { "ports": [{ "port": 53, "protocol": "TCP" }, { "port": 53, "protocol": "UDP" }],
                  "to": [{ "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "kube-system" } } }] },
                { "to": [{ "ipBlock": { "cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"] } }] },
            ],
            "ingress": [{ "from": [{
                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "gitlab-workspaces" } },
                "podSelector": { "matchLabels": { "app.kubernetes.io/name": "gitlab-workspaces-proxy" } } }, {
                "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": "gitlab-workspaces" } },
                "podSelector": { "matchLabels": { "app.kubernetes.io/name": "wsync-agent" } } }] }],
            "podSelector": {},
            "policyTypes": ["Ingress", "Egress"],
        })
    );
    assert_eq!(config.resource_quota_hard(), None, "no quota without a maximum");
    assert_eq!(AgentConfig::before_settings().network_policy_spec(&json!({})), None);
}

#[test]
fn a_gitlab_agent_config_block_is_read_whole() {
    let yaml = "remote_development:\n  network_policy:\n    egress:\n      - allow: 0.0.0.0/0\n        except: [10.0.0.0/8]\n      - allow: 10.1.2.0/24\n  default_resources_per_workspace_container:\n    requests: {cpu: 500m, memory: 512Mi}\n    limits: {cpu: '1', memory: 1Gi}\n  max_resources_per_workspace:\n    requests: {cpu: '1', memory: 1Gi}\n    limits: {cpu: '2', memory: 4Gi}\n  labels: {tier: development}\n  annotations: {team: engineering}\n";
    let config = AgentConfig::parse(yaml).unwrap();
    assert_eq!(config.network_policy.egress.len(), 2);
    assert_eq!(
        config.resource_quota_hard(),
        Some(json!({ "limits.cpu": "2", "limits.memory": "4Gi", "requests.cpu": "1", "requests.memory": "1Gi" }))
    );
    let defaulted = config.container_resources(None).unwrap();
    assert_eq!(defaulted["requests"]["cpu"], "500m");
    let own = json!({ "limits": { "cpu": "3" } });
    assert_eq!(config.container_resources(Some(own.clone())), Some(own), "a workspace's own resources win");
}

#[test]
fn what_kubernetes_would_refuse_is_refused_first() {
    for (yaml, field) in [
        ("network_policy: {egress: [{allow: 10.0.0.0}]}", "network_policy.egress"),
        ("network_policy: {egress: [{allow: 10.0.0.0/33}]}", "network_policy.egress"),
        ("network_policy: {egress: [{allow: 0.0.0.0/0, except: [nope]}]}", "network_policy.egress"),
        ("max_resources_per_workspace: {limits: {gpu: '1'}}", "max_resources_per_workspace"),
        ("max_resources_per_workspace: {limits: {cpu: lots}}", "max_resources_per_workspace"),
        ("default_resources_per_workspace_container: {requests: {memory: 1Gb}}", "default_resources"),
        ("labels: {'bad key!': x}", "labels"),
        ("labels: {ok: 'value with spaces'}", "labels"),
        ("annotations: {'-x': v}", "annotations"),
        ("default_runtime_class: Not_A_Name", "default_runtime_class"),
        ("allow_privilege_escalation: true", "allow_privilege_escalation"),
        ("workspaces_quota: -2", "workspaces_quota"),
    ] {
        let error = AgentConfig::parse(yaml).unwrap_err();
        assert!(error.contains(field), "{yaml}: {error}");
    }
    assert!(AgentConfig::parse("labels: {'example.com/tier': dev, app: ''}").is_ok());
    assert!(AgentConfig::parse("network_policy: {egress: [{allow: '::/0'}]}").is_ok());
}

#[test]
fn the_workspaces_quota_counts_what_is_not_terminated() {
    let unlimited = AgentConfig::default();
    assert!(unlimited.admits_another(1_000_000));
    let two = AgentConfig::parse("workspaces_quota: 2").unwrap();
    assert!(two.admits_another(1) && !two.admits_another(2));
    assert!(!AgentConfig::parse("workspaces_quota: 0").unwrap().admits_another(0), "0: no workspaces at all");
}

#[test]
fn a_shared_namespace_follows_gitlabs_rules() {
    let ok = AgentConfig::parse("shared_namespace: workspaces\n").unwrap();
    assert_eq!(ok.shared_namespace, "workspaces");
    for (bad, why) in [
        ("Workspaces", "lowercase"),
        ("-ws", "alphanumeric"),
        ("a.b", "lowercase"),
        ("kube-system", "system namespace"),
        ("default", "system namespace"),
    ] {
        let error = AgentConfig::parse(&format!("shared_namespace: {bad}\n")).unwrap_err();
        assert!(error.contains(why), "{bad}: {error}");
    }
    let long = "a".repeat(64);
    assert!(AgentConfig::parse(&format!("shared_namespace: {long}\n")).is_err());
    let quota = AgentConfig::parse("shared_namespace: ws\nmax_resources_per_workspace: {limits: {cpu: '1'}}\n");
    assert!(quota.unwrap_err().contains("max_resources_per_workspace must be empty"));
}

#[test]
fn in_a_shared_namespace_pull_secrets_are_its_own() {
    use crate::protocol::ImagePullSecret;
    let secret = |namespace: &str| ImagePullSecret { name: "regcred".into(), namespace: namespace.into() };
    let shared = AgentConfig::parse("shared_namespace: ws\n").unwrap();
    assert!(shared.check_pull_secrets(&[secret("ws")]).is_ok());
    assert!(shared.check_pull_secrets(&[secret("registry")]).unwrap_err().contains("registry/regcred"));
    assert!(AgentConfig::default().check_pull_secrets(&[secret("registry")]).is_ok());
}
