//! The real `wsync control-plane` as a child process, and its CLI.

use super::{free_port, http_ok};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The real `wsync control-plane`, as a child process.
pub struct ControlPlaneProcess {
    child: Option<Child>,
    args: Vec<String>,
    pub url: String,
    log: PathBuf,
}

impl ControlPlaneProcess {
    pub fn start(database_url: &str, log: PathBuf, extra: &[&str]) -> Self {
        let port = free_port();
        let mut args: Vec<String> = vec![
            "control-plane".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--database-url".into(),
            database_url.into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut process = Self { child: None, args, url: format!("http://127.0.0.1:{port}"), log };
        process.spawn();
        process
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("control-plane log");
        let child = Command::new(env!("CARGO_BIN_EXE_wsync"))
            .args(&self.args)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn wsync control-plane");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !http_ok(&format!("{}/healthz", self.url)) {
            assert!(Instant::now() < deadline, "the control plane did not come up:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn restart(&mut self) {
        self.restart_after(|| {});
    }

    /// Stop, run `meanwhile` (restore the database from a backup, say), start again.
    pub fn restart_after(&mut self, meanwhile: impl FnOnce()) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        meanwhile();
        self.spawn();
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Run `wsync <args>` against this control plane; stdout on success, panic otherwise.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_wsync"))
            .args(args)
            .env("WSYNC_SERVER", &self.url)
            .output()
            .expect("run wsync");
        assert!(out.status.success(), "wsync {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    }
}

impl Drop for ControlPlaneProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("---- control plane logs ----\n{}", self.logs());
        }
    }
}
