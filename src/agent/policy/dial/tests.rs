use super::*;

fn request(port: u16) -> OpenStream {
    OpenStream { namespace: "wsync-a1-ide".into(), workspace: "ide".into(), port }
}

fn endpoints(addresses: &[&str]) -> WorkspaceEndpoints {
    WorkspaceEndpoints {
        key: WorkspaceKey::new("wsync-a1-ide", "ide"),
        ours: true,
        declared_ports: [3000, 22].into(),
        pod_addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
    }
}

#[test]
fn a_declared_port_of_an_own_workspace_is_dialled_at_its_pod() {
    let dialled = dial(&request(3000), Some(&endpoints(&["10.244.0.7"])), &NeverDialled::default());
    assert_eq!(dialled, Ok("10.244.0.7:3000".parse().unwrap()));
}

#[test]
fn everything_else_is_refused_by_name() {
    let never = NeverDialled::new(["::ffff:10.0.0.1".parse().unwrap()]);
    let ours = endpoints(&["10.244.0.7"]);
    let refusals = [
        (dial(&request(3000), None, &never), "not_our_workspace"),
        (dial(&request(3000), Some(&WorkspaceEndpoints { ours: false, ..ours.clone() }), &never), "not_our_workspace"),
        (
            dial(&OpenStream { namespace: "kube-system".into(), ..request(3000) }, Some(&ours), &never),
            "not_our_workspace",
        ),
        (dial(&request(6443), Some(&ours), &never), "undeclared_port"),
        (dial(&request(3000), Some(&endpoints(&[])), &never), "no_pod"),
        (dial(&request(3000), Some(&endpoints(&["169.254.169.254"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["127.0.0.1"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["::ffff:127.0.0.1"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["10.0.0.1"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["::ffff:10.0.0.1"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["fe80::1"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["64:ff9b::a9fe:a9fe"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["64:ff9b:1::a9fe:a9fe"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["::a9fe:a9fe"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["168.63.129.16"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["fd20:ce::254"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["fd00:ec2::254"])), &never), "forbidden_address"),
        (dial(&request(3000), Some(&endpoints(&["0.0.0.0"])), &never), "forbidden_address"),
    ];
    for (n, (refused, label)) in refusals.into_iter().enumerate() {
        assert_eq!(refused.map_err(|e| e.label()), Err(label), "case {n}");
    }
}

#[test]
fn a_forbidden_address_beside_a_good_one_is_skipped() {
    let dialled = dial(&request(22), Some(&endpoints(&["169.254.169.254", "10.244.1.9"])), &NeverDialled::default());
    assert_eq!(dialled, Ok("10.244.1.9:22".parse().unwrap()));
}

#[test]
fn an_open_request_says_a_workspace_and_a_port_and_nothing_else() {
    let good = br#"{"namespace":"wsync-a1-ide","workspace":"ide","port":3000}"#;
    assert_eq!(OpenStream::parse(good), Ok(request(3000)));
    for hostile in [
        &br#"{"namespace":"wsync-a1-ide","workspace":"ide","port":3000,"address":"10.0.0.1"}"#[..],
        br#"{"namespace":"wsync-a1-ide","workspace":"ide","port":3000,"host":"kubernetes.default"}"#,
        br#"{"namespace":"../etc","workspace":"ide","port":3000}"#,
        br#"{"namespace":"wsync-a1-ide","workspace":"IDE","port":3000}"#,
        br#"{"namespace":"wsync-a1-ide","workspace":"ide","port":0}"#,
        br#"{"namespace":"wsync-a1-ide","workspace":"ide","port":70000}"#,
        br#"{"namespace":"wsync-a1-ide","workspace":"ide","port":-1}"#,
        br#"{"namespace":"wsync-a1-ide","workspace":"ide"}"#,
        b"not json",
    ] {
        assert_eq!(
            OpenStream::parse(hostile).map_err(|e| e.label()),
            Err("malformed"),
            "{}",
            String::from_utf8_lossy(hostile)
        );
    }
    let long = format!(r#"{{"namespace":"{}","workspace":"ide","port":1}}"#, "a".repeat(2000));
    assert!(OpenStream::parse(long.as_bytes()).is_err());
}

#[test]
fn declared_ports_are_the_containers_and_the_services_targets() {
    let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({ "spec": { "containers": [
        { "name": "ide", "image": "i", "ports": [{ "containerPort": 3000, "name": "http" }, { "containerPort": 22 }] },
    ]}}))
    .unwrap();
    let service: Service = serde_json::from_value(serde_json::json!({ "spec": { "ports": [
        { "port": 80, "targetPort": "http" }, { "port": 8080, "targetPort": 8081 }, { "port": 9090 },
        { "port": 81, "targetPort": "nonexistent" }, { "port": 82, "targetPort": 70000 },
    ]}}))
    .unwrap();
    assert_eq!(declared_ports(&template, &[service]), [22, 3000, 8081, 9090].into());
    assert!(declared_ports(&PodTemplateSpec::default(), &[]).is_empty());
}

#[test]
fn only_ready_pods_off_the_host_network_are_dialled() {
    let pod = |ready: &str, host_network: bool, ip: &str| -> Pod {
        serde_json::from_value(serde_json::json!({
            "spec": { "containers": [], "hostNetwork": host_network },
            "status": { "podIP": ip, "podIPs": [{ "ip": ip }], "conditions": [{ "type": "Ready", "status": ready }] },
        }))
        .unwrap()
    };
    let pods = [pod("True", false, "10.244.0.7"), pod("False", false, "10.244.0.8"), pod("True", true, "192.168.1.5")];
    assert_eq!(pod_addresses(&pods), vec!["10.244.0.7".parse::<IpAddr>().unwrap()]);
}

proptest::proptest! {
    /// Whatever the control plane asks and whatever the Pods' status says, a dialled address
    /// is one of the workspace's Pods, on a declared port, and never a forbidden one.
    #[test]
    fn a_dialled_address_is_always_a_declared_port_of_an_allowed_pod_address(
        port in proptest::num::u16::ANY,
        addresses in proptest::collection::vec(proptest::prelude::any::<IpAddr>(), 0..4),
        namespace in "[a-z0-9-]{1,12}",
        never in proptest::collection::btree_set(proptest::prelude::any::<IpAddr>(), 0..3),
    ) {
        let asked = OpenStream { namespace: namespace.clone(), workspace: "ide".into(), port };
        let known = WorkspaceEndpoints { pod_addresses: addresses.clone(), ..endpoints(&[]) };
        let never = NeverDialled::new(never);
        if let Ok(dialled) = dial(&asked, Some(&known), &never) {
            proptest::prop_assert!(namespace == "wsync-a1-ide");
            proptest::prop_assert!(known.declared_ports.contains(&dialled.port()));
            proptest::prop_assert!(addresses.iter().any(|a| canonical(*a) == dialled.ip()));
            proptest::prop_assert!(forbidden(dialled.ip()).is_none());
            proptest::prop_assert!(!never.contains(dialled.ip()));
        }
    }
}
