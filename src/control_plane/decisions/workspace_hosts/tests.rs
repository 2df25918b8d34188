use super::*;
use proptest::prelude::*;

fn domain() -> WorkspacesDomain {
    WorkspacesDomain::parse("ws.example.com").unwrap()
}

#[test]
fn a_host_names_its_port_workspace_and_agent() {
    let host = domain().host("agent-1", "ide", 3000);
    assert_eq!(host, format!("3000-ide-{}.ws.example.com", agent_tag("agent-1")));
    let read = domain().workspace_host(&format!("{}:8443", host.to_uppercase())).unwrap();
    assert_eq!((read.port, read.workspace.as_str()), (3000, "ide"));
    assert!(read.is_for_agent("agent-1") && !read.is_for_agent("agent-2"));
    assert_ne!(agent_tag("agent-1"), agent_tag("agent-2"));
}

#[test]
fn the_longest_names_still_make_one_label() {
    let host = domain().host(&"a".repeat(40), &"w".repeat(40), 65535);
    let label = host.split('.').next().unwrap();
    assert!(label.len() <= 63 && crate::names::is_dns_label(label), "{label}");
}

#[test]
fn anything_else_under_the_domain_is_no_workspace_but_still_covered() {
    let tag = agent_tag("a");
    for host in [
        "ws.example.com".to_string(),
        format!("0-ide-{tag}.ws.example.com"),
        format!("03000-ide-{tag}.ws.example.com"),
        format!("70000-ide-{tag}.ws.example.com"),
        format!("3000-{tag}.ws.example.com"),
        format!("3000-ide-{}.ws.example.com", &tag[..9]),
        format!("3000-ide-{}g.ws.example.com", &tag[..9]),
        format!("3000--{tag}.ws.example.com"),
        format!("x.3000-ide-{tag}.ws.example.com"),
        format!("3000-ide_x-{tag}.ws.example.com"),
        format!("p3000-ide-{tag}.ws.example.com"),
    ] {
        assert_eq!(domain().workspace_host(&host), None, "{host}");
    }
    assert!(domain().covers(&format!("x.3000-ide-{tag}.ws.example.com")));
    assert!(domain().covers("anything.ws.example.com:1"));
    for not_covered in ["ws.example.com", "example.com", "evilws.example.com", "ws.example.com.evil", "[::1]:80", ""] {
        assert!(!domain().covers(not_covered), "{not_covered}");
    }
}

#[test]
fn a_domain_is_a_dns_name_of_two_labels_or_more() {
    assert_eq!(WorkspacesDomain::parse("WS.Localhost.").unwrap().as_str(), "ws.localhost");
    for bad in ["", "localhost", "*.ws.example.com", "ws..example.com", "ws.example.com/x", "ws.exa mple.com"] {
        assert!(WorkspacesDomain::parse(bad).is_err(), "{bad}");
    }
}

proptest! {
    #[test]
    fn every_host_made_reads_back(agent in "[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?",
                                  workspace in "[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?",
                                  port in 1u16..) {
        let host = domain().host(&agent, &workspace, port);
        let read = domain().workspace_host(&host).unwrap();
        prop_assert_eq!(read.port, port);
        prop_assert_eq!(&read.workspace, &workspace);
        prop_assert!(read.is_for_agent(&agent));
    }

    #[test]
    fn no_host_reads_as_a_workspace_it_does_not_spell(host in "\\PC{0,80}") {
        if let Some(read) = domain().workspace_host(&host) {
            let lower = host.to_ascii_lowercase();
            let spelled = format!("{}-{}-{}.ws.example.com", read.port, read.workspace, read.agent_tag);
            let with_port = format!("{spelled}:");
            let same = lower.trim_end_matches('.') == spelled || lower.starts_with(&with_port);
            prop_assert!(same, "{} read as {:?}", host, read);
        }
    }
}
