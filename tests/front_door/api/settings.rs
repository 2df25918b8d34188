//! GitLab's agent settings at the door: the quotas, the shared namespace and how it binds
//! pull secrets and names, as the CLI and the agent see them over HTTP.

use super::*;
use reqwest::Method;

/// `workspaces_quota`: creation past it is refused with the count; a terminated workspace
/// frees its place. Settings that Kubernetes would refuse are refused first, by name.
#[tokio::test]
async fn the_workspaces_quota_and_settings_are_checked_at_the_door() {
    let server = serve().await;
    let register = json!({"id": "q1", "config": {"workspaces_quota": 1}}).to_string();
    let (status, _) = server.send(reqwest::Method::POST, "/api/v1/agents", Some(ADMIN), Some(&register)).await;
    assert_eq!(status, 201);
    let create = |name: &str| json!({"name": name, "image": "busybox:1.36"}).to_string();
    let path = "/api/v1/agents/q1/workspaces";
    let (status, _) = server.send(reqwest::Method::POST, path, Some(ADMIN), Some(&create("one"))).await;
    assert_eq!(status, 201);
    let (status, body) = server.send(reqwest::Method::POST, path, Some(ADMIN), Some(&create("two"))).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("workspaces_quota"), "{body}");
    server.send(reqwest::Method::POST, "/api/v1/agents/q1/workspaces/one/terminate", Some(ADMIN), None).await;
    let (status, _) = server.send(reqwest::Method::POST, path, Some(ADMIN), Some(&create("two"))).await;
    assert_eq!(status, 201, "a terminated workspace frees its place");

    for bad in [
        json!({"network_policy": {"egress": [{"allow": "everywhere"}]}}),
        json!({"allow_privilege_escalation": true}),
        json!({"not_a_setting": 1}),
    ] {
        let (status, body) =
            server.send(reqwest::Method::PUT, "/api/v1/agents/q1/config", Some(ADMIN), Some(&bad.to_string())).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, config) = server.send(reqwest::Method::GET, "/api/v1/agents/q1/config", Some(ADMIN), None).await;
    assert_eq!((status, config["workspaces_quota"].clone()), (200, json!(1)), "unchanged by the refusals");
}

/// `shared_namespace`: served in the prerequisites, every new workspace created in it, names
/// unique within it across agents, pull secrets its own, and fixed while a workspace lives.
#[tokio::test]
async fn a_shared_namespace_is_served_and_binds_names_and_pull_secrets() {
    let server = serve().await;
    let shared = json!({"id": "s1", "config": {"shared_namespace": "workspaces"}}).to_string();
    let (status, body) = server.send(Method::POST, "/api/v1/agents", Some(ADMIN), Some(&shared)).await;
    assert_eq!(status, 201, "{body}");
    let token = body["token"].as_str().unwrap().to_string();
    let (status, body) = server.send(Method::GET, PREREQUISITES_PATH, Some(&token), None).await;
    assert_eq!((status, body), (200, json!({"shared_namespace": "workspaces"})));

    let create = json!({"name": "alice", "image": "busybox:1.36"}).to_string();
    let (status, alice) = server.send(Method::POST, "/api/v1/agents/s1/workspaces", Some(ADMIN), Some(&create)).await;
    assert_eq!((status, alice["namespace"].as_str()), (201, Some("workspaces")), "{alice}");
    let other = json!({"id": "s2", "config": {"shared_namespace": "workspaces"}}).to_string();
    server.send(Method::POST, "/api/v1/agents", Some(ADMIN), Some(&other)).await;
    let (status, body) = server.send(Method::POST, "/api/v1/agents/s2/workspaces", Some(ADMIN), Some(&create)).await;
    assert_eq!(status, 409, "one name, one Deployment: {body}");
    assert!(body["error"].as_str().unwrap().contains("\"alice\" is taken"), "{body}");

    let elsewhere = json!({"image_pull_secrets": [{"name": "regcred", "namespace": "registry"}]}).to_string();
    let path = "/api/v1/agents/s1/image-pull-secrets";
    let (status, body) = server.send(Method::PUT, path, Some(ADMIN), Some(&elsewhere)).await;
    assert_eq!(status, 409, "{body}");
    assert!(body["error"].as_str().unwrap().contains("must be in workspaces"), "{body}");
    let own = json!({"image_pull_secrets": [{"name": "regcred", "namespace": "workspaces"}]}).to_string();
    assert_eq!(server.send(Method::PUT, path, Some(ADMIN), Some(&own)).await.0, 200);

    let (status, body) = server.send(Method::PUT, "/api/v1/agents/s1/config", Some(ADMIN), Some("{}")).await;
    assert_eq!(status, 409, "alice lives in the shared namespace: {body}");
    assert!(body["error"].as_str().unwrap().contains("shared_namespace cannot change"), "{body}");
    let quota = json!({"shared_namespace": "workspaces", "max_resources_per_workspace": {"limits": {"cpu": "1"}}});
    let (status, body) =
        server.send(Method::PUT, "/api/v1/agents/s1/config", Some(ADMIN), Some(&quota.to_string())).await;
    assert_eq!(status, 400, "GitLab's rule: no quota object in a shared namespace: {body}");
    server.send(Method::POST, "/api/v1/agents/s1/workspaces/alice/terminate", Some(ADMIN), None).await;
    let (status, body) = server.send(Method::PUT, "/api/v1/agents/s1/config", Some(ADMIN), Some("{}")).await;
    assert_eq!(status, 200, "no workspace alive: {body}");
    let back = json!({"shared_namespace": "elsewhere"}).to_string();
    let (status, body) = server.send(Method::PUT, "/api/v1/agents/s1/config", Some(ADMIN), Some(&back)).await;
    assert_eq!(status, 409, "its pull secrets are in workspaces, not elsewhere: {body}");
}

/// `workspaces_per_user_quota`: GitLab's count and message; an unnamed owner cannot be counted.
#[tokio::test]
async fn the_per_user_quota_counts_each_owners_live_workspaces() {
    let server = serve().await;
    let register = json!({"id": "u1", "config": {"workspaces_per_user_quota": 1}}).to_string();
    assert_eq!(server.send(Method::POST, "/api/v1/agents", Some(ADMIN), Some(&register)).await.0, 201);
    let path = "/api/v1/agents/u1/workspaces";
    let create =
        |name: &str, owner: Option<&str>| json!({"name": name, "image": "busybox:1.36", "owner": owner}).to_string();
    let (status, one) = server.send(Method::POST, path, Some(ADMIN), Some(&create("one", Some("alice")))).await;
    assert_eq!((status, one["owner"].as_str()), (201, Some("alice")), "{one}");
    let (status, body) = server.send(Method::POST, path, Some(ADMIN), Some(&create("two", Some("alice")))).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["error"],
        "You cannot create a workspace because you already have '1' existing workspaces for the given agent which \
         has a per user quota of '1' workspaces"
    );
    assert_eq!(server.send(Method::POST, path, Some(ADMIN), Some(&create("three", Some("bob")))).await.0, 201);
    let (status, body) = server.send(Method::POST, path, Some(ADMIN), Some(&create("four", None))).await;
    assert!(status == 409 && body["error"].as_str().unwrap().contains("name the workspace's owner"), "{body}");
    let (status, _) = server.send(Method::POST, path, Some(ADMIN), Some(&create("five", Some("a b")))).await;
    assert_eq!(status, 400, "an owner is a username");
    server.send(Method::POST, "/api/v1/agents/u1/workspaces/one/terminate", Some(ADMIN), None).await;
    assert_eq!(server.send(Method::POST, path, Some(ADMIN), Some(&create("two", Some("alice")))).await.0, 201);
}
