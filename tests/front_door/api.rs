//! The control plane's HTTP surface in process (its router on a local listener): status codes
//! and bodies as the agent and the CLI see them.

use serde_json::{Value, json};
use std::sync::Arc;
use wsync::control_plane::decisions::pipeline::PipelineConfig;
use wsync::control_plane::decisions::rules::Lifecycle;
use wsync::control_plane::http::{AdminCredential, AppState, router};
use wsync::control_plane::store::Store;
use wsync::protocol::{PREREQUISITES_PATH, RECONCILE_PATH, Settings};

mod devfiles;
mod settings;

struct Server {
    url: String,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
}

/// The admin token every test server is started with.
const ADMIN: &str = "admin-secret";

async fn serve() -> Server {
    wsync::runtime::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&format!("sqlite://{}/cp.db", dir.path().display())).await.unwrap();
    let pipeline = PipelineConfig {
        settings: Settings { full_reconciliation_interval_seconds: 600, partial_reconciliation_interval_seconds: 5 },
        lifecycle: Lifecycle { max_running_ms: i64::MAX, max_stopped_ms: i64::MAX, max_terminated_percent: 100 },
        label_key: "agent.gitlab.com/id".into(),
    };
    let state = Arc::new(AppState::new(store, pipeline, AdminCredential::token(ADMIN)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(state, std::time::Duration::from_secs(60))).await.ok() });
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    Server { url, http, _dir: dir }
}

impl Server {
    async fn send(&self, method: reqwest::Method, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, Value) {
        let mut request = self.http.request(method.clone(), format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        // The JSON API takes only JSON; a body-less write sends an empty object.
        match body {
            Some(body) => request = request.header("content-type", "application/json").body(body.to_string()),
            None if method != reqwest::Method::GET => {
                request = request.header("content-type", "application/json").body("{}");
            }
            None => {}
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// Sign in through the page's form, as a browser on the page's origin would; the cookie.
    async fn sign_in(&self) -> String {
        let answer = self
            .http
            .post(format!("{}/sign-in", self.url))
            .header("origin", &self.url)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={ADMIN}&next=%2F"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 303);
        let cookie = answer.headers()["set-cookie"].to_str().unwrap();
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
        cookie.split(';').next().unwrap().to_string()
    }

    async fn register(&self, id: &str) -> String {
        let (status, body) =
            self.send(reqwest::Method::POST, "/api/v1/agents", Some(ADMIN), Some(&json!({"id": id}).to_string())).await;
        assert_eq!(status, 201, "{body}");
        body["token"].as_str().unwrap().to_string()
    }
}

const EMPTY_PARTIAL: &str = r#"{"update_type": "partial", "workspace_agent_infos": []}"#;

#[tokio::test]
async fn reconcile_answers_201_400_and_401_as_the_protocol_says() {
    let server = serve().await;
    let token = server.register("a1").await;
    let (status, body) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&token), Some(EMPTY_PARTIAL)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["workspace_rails_infos"], json!([]));
    assert_eq!(body["settings"]["partial_reconciliation_interval_seconds"], 5);

    for invalid in [
        r#"{"update_type": "sideways", "workspace_agent_infos": []}"#,
        r#"{"update_type": "full", "workspace_agent_infos": [{"namespace": "ns"}]}"#,
        r#"{"update_type": "full", "workspace_agent_infos": [{"name": "ws", "namespace": ""}]}"#,
        r#"{"update_type": "full"}"#,
        "not json",
    ] {
        let (status, body) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&token), Some(invalid)).await;
        assert_eq!(status, 400, "{invalid}: {body}");
        assert!(body["error"].as_str().is_some_and(|e| !e.is_empty()), "{invalid}: {body}");
    }

    // Unknown and missing tokens get the same answer: nothing says whether an agent exists.
    let (unknown, unknown_body) =
        server.send(reqwest::Method::POST, RECONCILE_PATH, Some("no-such-token"), Some(EMPTY_PARTIAL)).await;
    let (missing, missing_body) = server.send(reqwest::Method::POST, RECONCILE_PATH, None, Some(EMPTY_PARTIAL)).await;
    assert_eq!((unknown, missing), (401, 401));
    assert_eq!(unknown_body, missing_body);

    let (status, body) = server.send(reqwest::Method::GET, PREREQUISITES_PATH, Some(&token), None).await;
    assert_eq!((status, body), (200, json!({"shared_namespace": ""})));
}

#[tokio::test]
async fn the_management_api_validates_and_keeps_agents_apart() {
    let server = serve().await;
    server.register("a1").await;
    server.register("a2").await;
    let (status, _) = server.send(reqwest::Method::POST, "/api/v1/agents", Some(ADMIN), Some(r#"{"id": "a1"}"#)).await;
    assert_eq!(status, 409, "an agent id is registered once");
    let (status, _) =
        server.send(reqwest::Method::POST, "/api/v1/agents", Some(ADMIN), Some(r#"{"id": "Not A Label"}"#)).await;
    assert_eq!(status, 400);

    let create = json!({"name": "ws", "image": "busybox:1.36"}).to_string();
    let (status, body) =
        server.send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces", Some(ADMIN), Some(&create)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["desired_state"], "Running");
    let (status, _) =
        server.send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces", Some(ADMIN), Some(&create)).await;
    assert_eq!(status, 409);
    let (status, _) = server
        .send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces", Some(ADMIN), Some(r#"{"name": "x", "image": ""}"#))
        .await;
    assert_eq!(status, 400);
    // A name the kubelet would drop from the environment, said at the door.
    let bad_env = json!({"name": "y", "image": "busybox:1.36", "env": {"1BAD": "x"}}).to_string();
    let (status, body) =
        server.send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces", Some(ADMIN), Some(&bad_env)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"].as_str().unwrap().contains("\"1BAD\""), "{body}");

    let (_, list) = server.send(reqwest::Method::GET, "/api/v1/agents/a2/workspaces", Some(ADMIN), None).await;
    assert_eq!(list, json!([]), "a2 never sees a1's workspaces");
    let (status, _) = server.send(reqwest::Method::GET, "/api/v1/agents/a2/workspaces/ws", Some(ADMIN), None).await;
    assert_eq!(status, 404);
    let (status, _) = server.send(reqwest::Method::GET, "/api/v1/agents/nobody/workspaces", Some(ADMIN), None).await;
    assert_eq!(status, 404);

    for (action, desired) in
        [("stop", "Stopped"), ("start", "Running"), ("restart", "RestartRequested"), ("terminate", "Terminated")]
    {
        let path = format!("/api/v1/agents/a1/workspaces/ws/{action}");
        let (status, body) = server.send(reqwest::Method::POST, &path, Some(ADMIN), None).await;
        assert_eq!((status, body["desired_state"].clone()), (200, Value::from(desired)), "{action}");
    }
    let (status, body) =
        server.send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces/ws/start", Some(ADMIN), None).await;
    assert_eq!(status, 409, "Terminated is final: {body}");
    let (status, _) =
        server.send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces/ws/explode", Some(ADMIN), None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn the_admin_token_guards_the_management_api_and_the_page_but_not_the_agents() {
    let server = serve().await;
    for token in [None, Some("wrong"), Some("admin-secre")] {
        let (status, _) = server.send(reqwest::Method::POST, "/api/v1/agents", token, Some(r#"{"id": "a1"}"#)).await;
        assert_eq!(status, 401, "{token:?}");
    }
    let (status, body) =
        server.send(reqwest::Method::POST, "/api/v1/agents", Some(ADMIN), Some(r#"{"id": "a1"}"#)).await;
    assert_eq!(status, 201);
    let agent_token = body["token"].as_str().unwrap().to_string();
    let page = server.http.get(format!("{}/agents/a1", server.url)).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 303, "the page wants a session, not a Bearer token");
    assert_eq!(page.headers()["location"], "/sign-in?next=/agents/a1");
    let (status, _) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&agent_token), Some(EMPTY_PARTIAL)).await;
    assert_eq!(status, 201, "agents authenticate with their own token");
    let (status, _) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(ADMIN), Some(EMPTY_PARTIAL)).await;
    assert_eq!(status, 401, "the admin token is no agent token");
    let (status, _) =
        server.send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces/ws/stop", Some(&agent_token), None).await;
    assert_eq!(status, 401, "an agent token is no admin token");
}

#[tokio::test]
async fn the_page_shows_an_error_in_full_and_escaped() {
    let server = serve().await;
    let token = server.register("a1").await;
    let create = json!({"name": "ws", "image": "busybox:1.36"}).to_string();
    server.send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces", Some(ADMIN), Some(&create)).await;
    let report = json!({"update_type": "partial", "workspace_agent_infos": [{
        "name": "ws", "namespace": "wsync-a1-ws",
        "error_details": {"error_type": "applier", "error_message": "<script>alert(1)</script> is invalid"}}]});
    let (status, _) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&token), Some(&report.to_string())).await;
    assert_eq!(status, 201);
    let cookie = server.sign_in().await;
    let page = server.http.get(format!("{}/agents/a1", server.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    assert!(page.headers()["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    let html = page.text().await.unwrap();
    assert!(html.contains("<td>ws</td>") && html.contains("<td>Error</td>"), "{html}");
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt; is invalid"), "{html}");
    assert!(!html.contains("<script>"), "{html}");
}

#[tokio::test]
async fn image_pull_secrets_are_validated_and_come_back_in_every_returned_info() {
    let server = serve().await;
    let token = server.register("agent-p").await;
    let put = |body: Value| {
        let server = &server;
        async move {
            let path = "/api/v1/agents/agent-p/image-pull-secrets";
            server.send(reqwest::Method::PUT, path, Some(ADMIN), Some(&body.to_string())).await
        }
    };
    let collision =
        json!({"image_pull_secrets": [{"name": "regcred", "namespace": "a"}, {"name": "regcred", "namespace": "b"}]});
    let (status, body) = put(collision).await;
    assert_eq!(status, 400, "one name from two namespaces would collide in the workspace: {body}");
    let (status, _) = put(json!({"image_pull_secrets": [{"name": "Bad_Name", "namespace": "a"}]})).await;
    assert_eq!(status, 400);
    let unknown = "/api/v1/agents/nobody/image-pull-secrets";
    let (status, _) =
        server.send(reqwest::Method::PUT, unknown, Some(ADMIN), Some(r#"{"image_pull_secrets": []}"#)).await;
    assert_eq!(status, 404);

    let create = json!({"name": "w1", "image": "busybox:1.36"}).to_string();
    let (status, body) =
        server.send(reqwest::Method::POST, "/api/v1/agents/agent-p/workspaces", Some(ADMIN), Some(&create)).await;
    assert_eq!(status, 201, "{body}");
    let full = r#"{"update_type": "full", "workspace_agent_infos": []}"#;
    let partial = r#"{"update_type": "partial", "workspace_agent_infos": []}"#;
    server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&token), Some(full)).await;
    let (_, idle) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&token), Some(partial)).await;
    assert_eq!(idle["workspace_rails_infos"], json!([]), "nothing changed");

    let (status, _) = put(json!({"image_pull_secrets": [{"name": "regcred", "namespace": "registry"}]})).await;
    assert_eq!(status, 200);
    let (_, answer) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&token), Some(partial)).await;
    let info = &answer["workspace_rails_infos"][0];
    assert_eq!(info["image_pull_secrets"], json!([{"name": "regcred", "namespace": "registry"}]));
    let config = info["config_to_apply"].as_str().unwrap_or_default();
    assert!(config.contains("imagePullSecrets"), "the changed agent config goes out with the config: {config}");
}

#[tokio::test]
async fn a_full_sync_of_thousands_of_workspaces_is_not_refused_for_its_size() {
    let server = serve().await;
    let token = server.register("agent-big").await;
    // About 6 MB: what a full sync of 5,000 workspaces' Deployment projections weighs.
    let padding = "x".repeat(1000);
    let infos: Vec<Value> = (0..5000)
        .map(|i| {
            json!({"name": format!("ws-{i}"), "namespace": format!("ns-{i}"),
                   "latest_k8s_deployment_info": {"metadata": {"name": format!("ws-{i}"), "resourceVersion": "1",
                                                                "annotations": {"padding": padding}}}})
        })
        .collect();
    let body = json!({"update_type": "full", "workspace_agent_infos": infos}).to_string();
    assert!(body.len() > 5_000_000);
    let (status, answer) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&token), Some(&body)).await;
    assert_eq!(status, 201, "{answer}");
}

/// An unauthenticated upload is refused before its body is read: of a 64 MiB upload the
/// client gets rid of only what the sockets' buffers hold before the 401 comes back. A
/// management body past its small limit is refused too.
#[tokio::test]
async fn bodies_are_bounded_before_authentication() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = serve().await;
    let address = server.url.trim_start_matches("http://").to_string();
    let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    const TOTAL: usize = 64 * 1024 * 1024;
    let head = format!(
        "POST {RECONCILE_PATH} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer not-a-token\r\n\
         Content-Type: application/json\r\nContent-Length: {TOTAL}\r\n\r\n"
    );
    write.write_all(head.as_bytes()).await.unwrap();
    let uploader = tokio::spawn(async move {
        let chunk = vec![b' '; 64 * 1024];
        let mut sent = 0;
        while sent < TOTAL {
            match tokio::time::timeout(std::time::Duration::from_secs(2), write.write_all(&chunk)).await {
                Ok(Ok(())) => sent += chunk.len(),
                _ => break, // The server stopped reading, or closed.
            }
        }
        sent
    });
    let mut answer = vec![0u8; 512];
    let n = tokio::time::timeout(std::time::Duration::from_secs(10), read.read(&mut answer)).await.unwrap().unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    let sent = uploader.await.unwrap();
    assert!(sent < 32 * 1024 * 1024, "{sent} bytes of 64 MiB went out before the 401");

    // A management body: without the admin token refused unread, with it capped at 64 KiB.
    let big = json!({ "id": "x".repeat(128 * 1024) });
    let url = format!("{}/api/v1/agents", server.url);
    let answer = server.http.post(&url).json(&big).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let answer = server.http.post(&url).bearer_auth(ADMIN).json(&big).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 413);
}

/// The answer as Rails shapes it: every info carries `image_pull_secrets` (`[]`) and
/// `deployment_resource_version` (`null` until known), in creation order, not name order.
#[tokio::test]
async fn answers_have_gitlabs_shape_and_order() {
    let server = serve().await;
    let token = server.register("a1").await;
    for name in ["zeta", "alpha", "mid"] {
        let create = json!({"name": name, "image": "busybox:1.36"}).to_string();
        let (status, _) =
            server.send(reqwest::Method::POST, "/api/v1/agents/a1/workspaces", Some(ADMIN), Some(&create)).await;
        assert_eq!(status, 201);
    }
    let full = r#"{"update_type": "full", "workspace_agent_infos": []}"#;
    let (status, body) = server.send(reqwest::Method::POST, RECONCILE_PATH, Some(&token), Some(full)).await;
    assert_eq!(status, 201);
    let infos = body["workspace_rails_infos"].as_array().unwrap();
    let names: Vec<&str> = infos.iter().map(|i| i["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["zeta", "alpha", "mid"], "creation order");
    for info in infos {
        let info = info.as_object().unwrap();
        assert_eq!(info["image_pull_secrets"], json!([]), "{info:?}");
        assert!(info.contains_key("deployment_resource_version") && info["deployment_resource_version"].is_null());
    }
}
