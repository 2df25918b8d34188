//! A real OpenID Provider for the tests: panva's `oidc-provider` (a certified implementation)
//! under Debian's nodejs, from `oidc_provider/` (its package-lock pins it). On `localhost`,
//! while the control plane is on `127.0.0.1`: another site, as a company's provider is.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where the provider's script and its `node_modules` live.
fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/oidc_provider")
}

/// `npm ci` once, when its packages are missing (`hack/test.sh` runs it up front).
fn installed() {
    static INSTALL: Mutex<bool> = Mutex::new(false);
    let mut done = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if *done || folder().join("node_modules/oidc-provider").exists() {
        *done = true;
        return;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(folder())
        .status()
        .expect("npm, from hack/install-prerequisites.sh --tests");
    assert!(status.success(), "npm ci in {}", folder().display());
    *done = true;
}

pub struct OpenIdProvider {
    child: Child,
    /// `http://localhost:<port>`.
    pub issuer: String,
    log: PathBuf,
}

impl OpenIdProvider {
    /// A provider on `port` with these clients (`client_id`, `client_secret`,
    /// `redirect_uris`) and accounts (a login name → its claims: `email`, `name`, `groups`).
    pub fn start(port: u16, clients: serde_json::Value, accounts: serde_json::Value, log: PathBuf) -> Self {
        installed();
        let issuer = format!("http://localhost:{port}");
        let stderr = std::fs::File::create(&log).expect("provider log");
        let mut child = Command::new("node")
            .arg(folder().join("provider.mjs"))
            .env("OIDC_ISSUER", &issuer)
            .env("OIDC_CLIENTS", clients.to_string())
            .env("OIDC_ACCOUNTS", accounts.to_string())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("node, from hack/install-prerequisites.sh --tests");
        let stdout = child.stdout.take().expect("its stdout");
        let (ready, said) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("ready ") {
                    let _ = ready.send(());
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let provider = Self { child, issuer, log };
        assert!(
            said.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok(),
            "the OpenID Provider did not start:\n{}",
            provider.logs()
        );
        provider
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The provider goes down, as an identity provider on a bad day does.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for OpenIdProvider {
    fn drop(&mut self) {
        self.stop();
    }
}
