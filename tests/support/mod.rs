//! Test support for the tiers: the local cluster, the real `wsync` binary as a child process,
//! kubectl, the audit log, and a scripted control-plane stub. Each binary declares it
//! `pub mod support`: it is a library of helpers, each binary using its part.

pub mod agent;
pub mod balancer;
pub mod browser;
pub mod control_plane;
pub mod fault_proxy;
pub mod forging_provider;
pub mod identity_provider;
pub mod kubelet;
pub mod postgres;
pub mod reverse_proxy;
pub mod server_side_apply;
pub mod stub;
pub mod system;
pub mod tls;
pub mod workspace_streams;

pub use agent::AgentProcess;

pub use control_plane::ControlPlaneProcess;
pub use server_side_apply::{retry_after, server_side_apply};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const AGENT_NAMESPACE: &str = "wsync-system";
pub const LABEL_KEY: &str = wsync::protocol::inventory::DEFAULT_WORKSPACE_LABEL_KEY;
/// The user the agent's kubeconfig authenticates as; the audit log names it.
pub const AGENT_USER: &str = "wsync-agent";
/// Marks the namespaces a test created, so that it can clean them up.
pub const TEST_LABEL: &str = "wsync.dev/test";

pub struct TestEnv {
    pub admin_kubeconfig: PathBuf,
    pub agent_kubeconfig: PathBuf,
    pub audit_log: PathBuf,
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The local real apiserver, started (and built, the first time) by the project's script.
/// A missing apiserver fails the test: this tier never skips.
pub fn env() -> &'static TestEnv {
    static ENV: OnceLock<TestEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let script = repo_root().join("hack/local-cluster.sh");
        let status = Command::new(&script).arg("up").status().expect("run hack/local-cluster.sh up");
        assert!(status.success(), "the local apiserver did not come up (hack/local-cluster.sh up failed)");
        let out = Command::new(&script).arg("env").output().expect("run hack/local-cluster.sh env");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let var = |name: &str| -> PathBuf {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("{name} missing from hack/local-cluster.sh env"))
                .into()
        };
        let env = TestEnv {
            admin_kubeconfig: var("WSYNC_TEST_KUBECONFIG"),
            agent_kubeconfig: var("WSYNC_TEST_AGENT_KUBECONFIG"),
            audit_log: var("WSYNC_TEST_AUDIT_LOG"),
        };
        let crds = repo_root().join("crds");
        kubectl_ok(&env, &["apply", "-k", crds.to_str().expect("utf-8 path")]);
        kubectl_ok(
            &env,
            &["wait", "--for=condition=Established", "crd/workspacesyncstatuses.wsync.dev", "--timeout=30s"],
        );
        let _ = kubectl(&env, &["create", "namespace", AGENT_NAMESPACE]);
        env
    })
}

pub fn kubectl(env: &TestEnv, args: &[&str]) -> std::process::Output {
    Command::new("kubectl").args(args).env("KUBECONFIG", &env.admin_kubeconfig).output().expect("kubectl is on PATH")
}

/// Run kubectl and return stdout; panic with stderr on failure.
pub fn kubectl_ok(env: &TestEnv, args: &[&str]) -> String {
    let out = kubectl(env, args);
    assert!(out.status.success(), "kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A copy of the agent's kubeconfig that reaches the apiserver through `proxy` (plain HTTP),
/// and the apiserver's URL and CA, for the proxy's upstream.
pub fn proxied_kubeconfig(env: &TestEnv, proxy_url: &str, dir: &Path) -> PathBuf {
    let original = std::fs::read_to_string(&env.agent_kubeconfig).expect("agent kubeconfig");
    let rewritten: Vec<String> = original
        .lines()
        .filter(|l| !l.trim_start().starts_with("certificate-authority:"))
        .map(|l| match l.trim_start().strip_prefix("server: ") {
            Some(_) => format!("      server: {proxy_url}"),
            None => l.to_string(),
        })
        .collect();
    let path = dir.join("proxied.kubeconfig");
    std::fs::write(&path, rewritten.join("\n")).expect("write kubeconfig");
    path
}

/// The apiserver's URL and its CA certificate (PEM), from the agent's kubeconfig.
pub fn apiserver_upstream(env: &TestEnv) -> (String, Vec<u8>) {
    let config = std::fs::read_to_string(&env.agent_kubeconfig).expect("agent kubeconfig");
    let field = |name: &str| {
        config.lines().find_map(|l| l.trim_start().strip_prefix(name)).map(str::trim).expect(name).to_string()
    };
    let ca = std::fs::read(field("certificate-authority:")).expect("CA file");
    (field("server:"), ca)
}

/// One field of an object, by kubectl's jsonpath; None when the object does not exist.
pub fn get_field(env: &TestEnv, namespace: &str, object: &str, jsonpath: &str) -> Option<String> {
    let out = kubectl(env, &["-n", namespace, "get", object, "-o", &format!("jsonpath={jsonpath}")]);
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).to_string())
}

pub async fn admin_client(env: &TestEnv) -> Client {
    let kubeconfig = Kubeconfig::read_from(&env.admin_kubeconfig).expect("read admin kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("admin kubeconfig");
    Client::try_from(config).expect("admin client")
}

/// A secret token as an operator makes one (`openssl rand -hex 32`): 256 random bits, which
/// the control plane's token files require.
pub fn secret_token(prefix: &str) -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("random bytes");
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}-{hex}")
}

/// A DNS-label id unique to this test run.
pub fn unique_id(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    format!("{prefix}-{:x}{n}", (nanos ^ std::process::id()) & 0xfffff)
}

/// A namespace and a labelled workspace Deployment in it; returns its resourceVersion.
pub async fn create_workspace(client: &Client, namespace: &str, name: &str, agent_label: Option<&str>) -> String {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // Test namespaces are `<test id>-<suffix>`; the label lets the test's cleanup find them.
    // A workspace's namespace carries its agent's label, as one the agent created would.
    let test_id = namespace.rsplit_once('-').map_or(namespace, |(id, _)| id);
    let mut ns_labels = serde_json::Map::new();
    ns_labels.insert(TEST_LABEL.into(), test_id.into());
    if let Some(id) = agent_label {
        ns_labels.insert(LABEL_KEY.into(), id.into());
    }
    let ns = serde_json::from_value(json!({"metadata": {"name": namespace, "labels": ns_labels}})).expect("namespace");
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("create namespace {namespace}: {e}"),
    }
    let labels = match agent_label {
        Some(id) => json!({ LABEL_KEY: id, "app": name }),
        None => json!({ "app": name }),
    };
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "infinity"]}]}
            }
        }
    }))
    .expect("deployment");
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let created = api.create(&PostParams::default(), &deployment).await.expect("create deployment");
    created.metadata.resource_version.unwrap_or_default()
}

/// Where the audit log ends now; pass it to `agent_writes` to see only what follows.
pub fn audit_mark(env: &TestEnv) -> usize {
    std::fs::read_to_string(&env.audit_log).map(|s| s.lines().count()).unwrap_or(0)
}

/// Write requests by the agent's user, after `mark`, that `concerns` this test's objects.
pub fn agent_writes(env: &TestEnv, mark: usize, concerns: impl Fn(&serde_json::Value) -> bool) -> Vec<String> {
    audited(env, mark, AGENT_USER, concerns)
}

/// Requests by `user` the audit log records after `mark` that `concerns` the caller.
pub fn audited(env: &TestEnv, mark: usize, user: &str, concerns: impl Fn(&serde_json::Value) -> bool) -> Vec<String> {
    let text = std::fs::read_to_string(&env.audit_log).unwrap_or_default();
    text.lines()
        .skip(mark)
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| e["user"]["username"] == user && e["stage"] == "ResponseComplete")
        .filter(|e| concerns(e))
        .map(|e| {
            let o = &e["objectRef"];
            format!("{} {}/{}/{} {}", e["verb"], o["resource"], o["namespace"], o["name"], o["subresource"])
        })
        .collect()
}

/// Poll `check` until it returns Some, or panic after `timeout`.
pub async fn eventually<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The agent's WorkspaceSyncStatus as JSON, via kubectl.
pub fn wss_json(env: &TestEnv, agent_id: &str) -> Option<serde_json::Value> {
    let out = kubectl(env, &["-n", AGENT_NAMESPACE, "get", "wss", agent_id, "-o", "json"]);
    out.status.success().then(|| serde_json::from_slice(&out.stdout).ok()).flatten()
}

pub fn condition<'a>(wss: &'a serde_json::Value, type_: &str) -> Option<&'a serde_json::Value> {
    wss["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A workspace config the apply policy accepts: an inventory ConfigMap `<inventory>` and the
/// given members, each annotated as owned by it. `members` are YAML documents without the
/// owning-inventory annotation; it is added here.
pub fn inventory_config(namespace: &str, inventory: &str, members: &[String]) -> String {
    use wsync::protocol::inventory::{INVENTORY_ID_LABEL, OWNING_INVENTORY_ANNOTATION};
    let mut docs = vec![format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {inventory}\n  namespace: {namespace}\n  labels:\n    {INVENTORY_ID_LABEL}: {inventory}\n"
    )];
    for member in members {
        docs.push(member.replacen(
            "metadata:\n",
            &format!("metadata:\n  annotations:\n    {OWNING_INVENTORY_ANNOTATION}: {inventory}\n"),
            1,
        ));
    }
    docs.join("---\n")
}

/// A ConfigMap member document for `inventory_config`.
pub fn config_map(namespace: &str, name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\ndata:\n  greeting: hello\n"
    )
}

/// Assert that `user` may do none of `denied` (`(verb, "resource [-n namespace]")`), as
/// `kubectl auth can-i --as` says.
pub fn assert_cannot(env: &TestEnv, user: &str, denied: &[(&str, &str)]) {
    for (verb, resource) in denied {
        let mut args = vec!["auth", "can-i", verb];
        args.extend(resource.split(' '));
        args.extend(["--as", user]);
        let out = kubectl(env, &args);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no", "{user} may {verb} {resource}");
    }
}

/// `kubectl apply -f -` of `yaml`, as the admin; panics when it fails.
pub fn kubectl_apply(env: &TestEnv, yaml: &str) {
    apply_stdin(env, &[], yaml)
}

/// [`kubectl_apply`], with `namespace` for the objects that name none (and no other).
pub fn kubectl_apply_in(env: &TestEnv, namespace: &str, yaml: &str) {
    apply_stdin(env, &["-n", namespace], yaml)
}

fn apply_stdin(env: &TestEnv, flags: &[&str], yaml: &str) {
    use std::io::Write;
    let applied = Command::new("kubectl")
        .args(flags)
        .args(["apply", "-f", "-"])
        .env("KUBECONFIG", &env.admin_kubeconfig)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            child.stdin.take().expect("stdin").write_all(yaml.as_bytes())?;
            child.wait()
        })
        .expect("kubectl");
    assert!(applied.success(), "kubectl apply of:\n{yaml}");
}

/// A kubeconfig for the manifests' `wsync-agent` ServiceAccount (its RBAC applied from
/// manifests/base/rbac.yaml, a token from the TokenRequest API), written into `dir`.
pub fn service_account_kubeconfig(env: &TestEnv, dir: &Path) -> PathBuf {
    let rbac = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/base/rbac.yaml");
    kubectl_ok(env, &["-n", AGENT_NAMESPACE, "apply", "-f", rbac]);
    kubeconfig_of(env, "wsync-agent", dir)
}

/// A kubeconfig for the ServiceAccount `name` in the agent's namespace, with a token from the
/// TokenRequest API, written into `dir`.
pub fn kubeconfig_of(env: &TestEnv, name: &str, dir: &Path) -> PathBuf {
    let token = kubectl_ok(env, &["-n", AGENT_NAMESPACE, "create", "token", name, "--duration=1h"]);
    let admin = std::fs::read_to_string(&env.admin_kubeconfig).expect("admin kubeconfig");
    let kubeconfig = dir.join("service-account.kubeconfig");
    let admin_token = admin.lines().find_map(|l| l.trim().strip_prefix("token: ")).expect("admin token").to_string();
    std::fs::write(&kubeconfig, admin.replace(&admin_token, token.trim())).expect("write kubeconfig");
    kubeconfig
}

/// A port that was free a moment ago, for a child process to listen on. Below the kernel's
/// ephemeral range (32768–60999 by default), where port 0 would pick it: any outgoing
/// connection takes its local port from that range, and did take one before a child could
/// bind it. Each test process walks the range from its own offset, and each port is tried.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let offset = std::process::id().wrapping_mul(7_919);
    for _ in 0..SPAN {
        let port = FIRST + offset.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % SPAN;
        let port = u16::try_from(port).expect("below 32768");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}..{}", FIRST + SPAN)
}

/// Whether a GET of `url` answers 2xx (curl, which the prerequisites install).
/// Quiet: callers poll it until a server answers, so a refused connection is expected.
pub fn http_ok(url: &str) -> bool {
    Command::new("curl").args(["-fs", "-o", "/dev/null", "--max-time", "2", url]).status().is_ok_and(|s| s.success())
}

/// The messages of the `ApplyFailed` Events in `namespace` whose object matches `involved`
/// (a field selector such as `involvedObject.name=x` or `involvedObject.kind=Deployment`).
pub fn apply_failed_events(env: &TestEnv, namespace: &str, involved: &str) -> String {
    let selector = format!("{involved},reason=ApplyFailed");
    kubectl_ok(
        env,
        &["-n", namespace, "get", "events", "--field-selector", &selector, "-o", "jsonpath={.items[*].message}"],
    )
}

/// A dockerconfigjson Secret in `namespace`, created or replaced.
pub fn registry_secret(env: &TestEnv, namespace: &str, name: &str, password: &str) {
    let yaml = kubectl_ok(
        env,
        &[
            "-n",
            namespace,
            "create",
            "secret",
            "docker-registry",
            name,
            "--docker-server=registry.example.com",
            "--docker-username=dev",
            &format!("--docker-password={password}"),
            "--dry-run=client",
            "-o",
            "yaml",
        ],
    );
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), yaml).expect("write secret");
    kubectl_ok(env, &["apply", "-f", path_str(file.path())]);
}
