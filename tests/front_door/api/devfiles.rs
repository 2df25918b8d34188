//! Workspaces from devfiles at the door (#40): accepted whole and shown back, or refused with
//! every fault at its path and nothing stored.

use super::*;
use reqwest::Method;

const EXAMPLE: &str = include_str!("../../../examples/devfile.yaml");

async fn agent(server: &Server) -> &'static str {
    let register = json!({"id": "d1"}).to_string();
    let (status, body) = server.send(Method::POST, "/api/v1/agents", Some(ADMIN), Some(&register)).await;
    assert_eq!(status, 201, "{body}");
    "/api/v1/agents/d1/workspaces"
}

#[tokio::test]
async fn a_devfile_workspace_is_created_shown_and_its_devfile_given_back_as_written() {
    let server = serve().await;
    let path = agent(&server).await;
    let create = json!({"name": "web", "devfile": EXAMPLE}).to_string();
    let (status, body) = server.send(Method::POST, path, Some(ADMIN), Some(&create)).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["image"], "localhost/workspace:3", "the main container's image");
    assert_eq!(
        body["components"],
        json!([
            {"name": "main", "kind": "container", "detail": "localhost/workspace:3"},
            {"name": "cache", "kind": "volume", "detail": "64Mi, ephemeral"}
        ])
    );
    assert_eq!(
        body["endpoints"],
        json!([{"name": "web", "port": 8080, "url": null}, {"name": "ssh", "port": 60022, "url": null}])
    );
    let (status, body) = server.send(Method::GET, &format!("{path}/web/devfile"), Some(ADMIN), None).await;
    assert_eq!((status, body["from_image"].clone()), (200, json!(false)));
    assert_eq!(body["devfile"], EXAMPLE, "as written, comments and all");
    let (status, body) = server.send(Method::GET, &format!("{path}/web"), Some(ADMIN), None).await;
    assert_eq!((status, body["components"][1]["name"].clone()), (200, json!("cache")), "{body}");
}

#[tokio::test]
async fn an_image_workspace_stands_for_a_one_container_devfile() {
    let server = serve().await;
    let path = agent(&server).await;
    let create = json!({"name": "img", "image": "busybox:1.36", "cpu": "100m"}).to_string();
    assert_eq!(server.send(Method::POST, path, Some(ADMIN), Some(&create)).await.0, 201);
    let (status, body) = server.send(Method::GET, &format!("{path}/img/devfile"), Some(ADMIN), None).await;
    assert_eq!((status, body["from_image"].clone()), (200, json!(true)));
    let devfile = body["devfile"].as_str().unwrap();
    assert!(devfile.contains("image: busybox:1.36") && devfile.contains("cpuLimit: 100m"), "{devfile}");
    // What it prints is a devfile the control plane takes.
    let again = json!({"name": "img2", "devfile": devfile}).to_string();
    let (status, body) = server.send(Method::POST, path, Some(ADMIN), Some(&again)).await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn a_refused_devfile_names_every_fault_at_its_path_and_nothing_is_stored() {
    let server = serve().await;
    let path = agent(&server).await;
    let faulty = EXAMPLE
        .replace("targetPort: 8080", "targetPort: 70000")
        .replace("memoryLimit: 128Mi", "memoryLimit: 128MB")
        .replace("size: 64Mi", "size: lots");
    let refusals = [
        (
            json!({"name": "a", "devfile": faulty}),
            vec![
                "Devfile values Kubernetes would refuse:",
                "components[0].container.memoryLimit: '128MB' is not a Kubernetes quantity",
                "components[0].container.endpoints[0].targetPort: 70000 is not a port",
                "components[1].volume.size: 'lots' is not a Kubernetes quantity",
            ],
        ),
        (
            json!({"name": "b", "devfile": EXAMPLE.replace("name: main", "name: gl-main").replace("2.2.0", "2.1.0")}),
            vec![
                "Devfile restrictions failed:",
                "schemaVersion: 'schemaVersion' '2.1.0' is not supported, it must be '2.2.0'",
                "components[0].name: Component name 'gl-main' must not start with 'gl-'",
            ],
        ),
        (
            json!({"name": "c", "devfile": EXAMPLE.replace("    volume:\n", "    volume:\n      colour: blue\n")}),
            vec![
                "Devfile schema validation failed:",
                "components[1].volume: Additional property 'colour' is not allowed",
            ],
        ),
        (json!({"name": "d", "devfile": "a: &x [1]\nb: *x\n"}), vec!["anchors or aliases"]),
        (
            json!({"name": "e", "devfile": format!("{}1{}", "[".repeat(100), "]".repeat(100))}),
            vec!["nests deeper than 32"],
        ),
        (
            json!({"name": "f", "devfile": format!("schemaVersion: 2.2.0\nx: '{}'\n", "a".repeat(1024 * 1024))}),
            vec!["the devfile is 1048603 bytes; at most 262144 are accepted"],
        ),
        (json!({"name": "g", "devfile": "- a list"}), vec!["YAML parsing resulted in 'Array' type instead of 'Hash'"]),
        (json!({"name": "h", "devfile": EXAMPLE, "image": "busybox"}), vec!["give it without an image"]),
        (json!({"name": "i", "devfile": EXAMPLE, "memory": "1Gi"}), vec!["give it without an image, cpu or memory"]),
    ];
    for (create, expected) in refusals {
        let (status, body) = server.send(Method::POST, path, Some(ADMIN), Some(&create.to_string())).await;
        let error = body["error"].as_str().unwrap_or_default();
        assert_eq!(status, 400, "{}: {body}", create["name"]);
        for words in expected {
            assert!(error.contains(words), "{}: {words:?} not in\n{error}", create["name"]);
        }
    }
    let (status, body) = server.send(Method::GET, path, Some(ADMIN), None).await;
    assert_eq!((status, body), (200, json!([])), "nothing of a refused devfile is stored");
}

#[tokio::test]
async fn the_agent_gets_the_pod_the_devfile_describes() {
    let server = serve().await;
    let token = server.register("d2").await;
    let create = json!({"name": "web", "devfile": EXAMPLE}).to_string();
    let path = "/api/v1/agents/d2/workspaces";
    assert_eq!(server.send(Method::POST, path, Some(ADMIN), Some(&create)).await.0, 201);
    let full = r#"{"update_type": "full", "workspace_agent_infos": []}"#;
    let (status, body) = server.send(Method::POST, RECONCILE_PATH, Some(&token), Some(full)).await;
    assert_eq!(status, 201, "{body}");
    let config = body["workspace_rails_infos"][0]["config_to_apply"].as_str().unwrap();
    let objects = wsync::yaml::parse_objects(config).unwrap();
    let kinds: Vec<(&str, &str)> = objects
        .iter()
        .map(|o| (o.types.as_ref().unwrap().kind.as_str(), o.metadata.name.as_deref().unwrap()))
        .collect();
    assert!(
        !kinds.iter().any(|(kind, _)| *kind == "PersistentVolumeClaim"),
        "an ephemeral volume is no claim, and no sources are mounted: {kinds:?}"
    );
    assert!(kinds.contains(&("ConfigMap", "web-scripts-configmap")), "{kinds:?}");
    let deployment = objects.iter().find(|o| o.types.as_ref().unwrap().kind == "Deployment").unwrap();
    let container = &deployment.data["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "main");
    assert!(container.get("command").is_none(), "overrideCommand: false runs the image's own entrypoint");
    assert_eq!(
        container["lifecycle"]["postStart"]["exec"]["command"][1],
        "/workspace-scripts/main/gl-run-poststart-commands.sh"
    );
}

/// A multipart body as a browser sends the create form: text fields, and a devfile file.
fn multipart(fields: &[(&str, &str)], file: Option<&[u8]>) -> (String, Vec<u8>) {
    let boundary = "----wsync-test-boundary";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").bytes(),
        );
    }
    if let Some(file) = file {
        body.extend(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"devfile_file\"; filename=\"devfile.yaml\"\r\n\
                 Content-Type: application/yaml\r\n\r\n"
            )
            .bytes(),
        );
        body.extend(file);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{boundary}--\r\n").bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test]
async fn the_page_creates_from_an_uploaded_or_pasted_devfile_and_shows_it_escaped() {
    let server = serve().await;
    agent(&server).await;
    let (status, alice) =
        server.send(Method::POST, "/api/v1/users", Some(ADMIN), Some(r#"{"username": "alice"}"#)).await;
    assert_eq!(status, 201, "{alice}");
    let signed_in = server
        .http
        .post(format!("{}/sign-in", server.url))
        .header("origin", &server.url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={}&next=%2F", alice["token"].as_str().unwrap()))
        .send()
        .await
        .unwrap();
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let home = server.http.get(format!("{}/", server.url)).header("cookie", &cookie).send().await.unwrap();
    let html = home.text().await.unwrap();
    assert!(html.contains("enctype=\"multipart/form-data\"") && html.contains("name=\"devfile_file\""), "{html}");
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).and_then(|rest| rest.split('"').next()).unwrap().to_string();
    let post = |content_type: String, body: Vec<u8>| {
        server
            .http
            .post(format!("{}/workspaces", server.url))
            .header("cookie", &cookie)
            .header("origin", &server.url)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let hostile = EXAMPLE.replace("hello from the devfile", "</pre><script>alert(1)</script>");
    let (content_type, body) = multipart(&[("csrf", &csrf), ("agent", "d1"), ("name", "up")], Some(hostile.as_bytes()));
    assert_eq!(post(content_type, body).await.unwrap().status().as_u16(), 303, "created from the upload");
    let pasted = EXAMPLE.replace("targetPort: 8080", "targetPort: 99999");
    let (content_type, body) =
        multipart(&[("csrf", &csrf), ("agent", "d1"), ("name", "bad"), ("devfile", &pasted)], None);
    let refused = post(content_type, body).await.unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    let html = refused.text().await.unwrap();
    assert!(html.contains("components[0].container.endpoints[0].targetPort: 99999 is not a port"), "{html}");
    let (content_type, body) = multipart(&[("csrf", &csrf), ("agent", "d1"), ("name", "bin")], Some(b"a: \xff\n"));
    let refused = post(content_type, body).await.unwrap();
    assert_eq!(refused.status().as_u16(), 400);
    assert!(refused.text().await.unwrap().contains("not UTF-8 text (a byte at offset 3 is not)"));
    let (content_type, body) =
        multipart(&[("csrf", "forged"), ("agent", "d1"), ("name", "x")], Some(EXAMPLE.as_bytes()));
    assert_eq!(post(content_type, body).await.unwrap().status().as_u16(), 403, "the CSRF token is checked");

    let page = server.http.get(format!("{}/agents/d1/workspaces/up/devfile", server.url)).header("cookie", &cookie);
    let html = page.send().await.unwrap().text().await.unwrap();
    assert!(html.contains("&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;"), "{html}");
    assert!(
        !html.contains("<script>") && html.contains("<td>cache</td><td>volume</td><td>64Mi, ephemeral</td>"),
        "{html}"
    );
    let (status, body) = server.send(Method::GET, "/api/v1/agents/d1/workspaces", Some(ADMIN), None).await;
    let names: Vec<&str> = body.as_array().unwrap().iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!((status, names), (200, vec!["up"]), "only the accepted one is stored");
}
