//! An agent in an image without the system's CA bundle (#24): it starts whenever it has a
//! usable root (none is needed for http://; its CA file for https://), and otherwise refuses
//! at start, naming the bundle it looked for.

use crate::support::stub::{self, Script, StubControlPlane};
use crate::support::*;
use std::process::Command;
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(60);
/// Where rustls-native-certs then looks, and finds nothing.
const NO_BUNDLE: [(&str, &str); 2] =
    [("SSL_CERT_FILE", "/nonexistent/ca-certificates.crt"), ("SSL_CERT_DIR", "/nonexistent")];

#[tokio::test(flavor = "multi_thread")]
async fn without_system_roots_an_http_control_plane_is_synced() {
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let _agent = AgentProcess::start_with_vars(env(), &unique_id("nr"), &stub.url, stub::STUB_TOKEN, &[], &NO_BUNDLE);
    stub.wait_for("a reconcile", 0, LONG, |_| true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_system_roots_an_https_control_plane_needs_its_ca_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tls = tls::Tls::throwaway(dir.path());
    let control_plane = ControlPlaneProcess::start_tls(
        &format!("sqlite://{}/control-plane.db", dir.path().display()),
        dir.path().join("control-plane.log"),
        &tls,
        &[],
    );
    let id = unique_id("nr");
    let registered: serde_json::Value =
        serde_json::from_str(&control_plane.cli(&["agents", "register", &id, "-o", "json"])).expect("json");
    let token = registered["token"].as_str().expect("a token");

    // No CA file: refused at once, saying what is missing and what to do.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, token).expect("token file");
    let started = Instant::now();
    let refused = Command::new(env!("CARGO_BIN_EXE_wsync"))
        .args(["agent", "--agent-id", &id, "--namespace", AGENT_NAMESPACE, "--control-plane-url", &control_plane.url])
        .arg("--token-file")
        .arg(&token_file)
        .envs(NO_BUNDLE)
        .env("KUBECONFIG", &env().agent_kubeconfig)
        .env("NO_COLOR", "1")
        .output()
        .expect("run wsync agent");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(started.elapsed() < Duration::from_secs(10), "refused at start");
    for words in ["SSL_CERT_FILE=/nonexistent/ca-certificates.crt", "--control-plane-ca-file", "InvalidConfiguration"] {
        assert!(said.contains(words), "names {words:?}: {said}");
    }

    // With the control plane's CA, it syncs.
    let ca = tls.ca.display().to_string();
    let flags = ["--control-plane-ca-file", ca.as_str()];
    let agent = AgentProcess::start_with_vars(env(), &id, &control_plane.url, token, &flags, &NO_BUNDLE);
    eventually("a sync cycle over TLS", LONG, || agent.logs().contains("sync cycle done").then_some(())).await;
}
