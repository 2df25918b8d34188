//! The real `wsync control-plane` as a child process, and its CLI.

use super::free_port;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// This tree's `wsync`.
fn this_tree() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wsync"))
}

/// A new admin token, written to a file beside `log`: the token, and the file's path.
fn admin_token_beside(log: &std::path::Path) -> (String, String) {
    let admin_token = super::secret_token("admin");
    let admin_token_file = log.with_extension("admin-token");
    std::fs::write(&admin_token_file, &admin_token).expect("write the admin token");
    (admin_token, admin_token_file.display().to_string())
}

/// The real `wsync control-plane`, as a child process.
pub struct ControlPlaneProcess {
    child: Option<Child>,
    /// The `wsync` binary it runs: this tree's, or another release's.
    program: PathBuf,
    args: Vec<String>,
    pub url: String,
    log: PathBuf,
    /// What the process printed on stdout (the generated admin token, on a first start).
    stdout: PathBuf,
    /// The admin token, and the file the process and the CLI read it from.
    pub admin_token: String,
    pub admin_token_file: PathBuf,
    /// The CA that signed its certificate, when it serves TLS.
    pub ca_file: Option<PathBuf>,
}

impl ControlPlaneProcess {
    /// A control plane with an admin token in a file beside its log.
    pub fn start(database_url: &str, log: PathBuf, extra: &[&str]) -> Self {
        Self::start_release(&this_tree(), database_url, log, extra)
    }

    /// [`Self::start`] with another release's binary (`hack/previous-release.sh`).
    pub fn start_release(program: &std::path::Path, database_url: &str, log: PathBuf, extra: &[&str]) -> Self {
        let (admin_token, file) = admin_token_beside(&log);
        let args = [&["--admin-token-file", file.as_str()], extra].concat();
        Self::launch(program.to_path_buf(), "127.0.0.1", database_url, log, &args, admin_token, None)
    }

    /// Serving TLS with a certificate of `tls`'s throw-away CA, which the CLI trusts.
    pub fn start_tls(database_url: &str, log: PathBuf, tls: &super::tls::Tls, extra: &[&str]) -> Self {
        Self::start_tls_on("127.0.0.1", database_url, log, tls, extra)
    }

    /// [`Self::start_tls`], listening on `host` (which `tls`'s certificate must name).
    pub fn start_tls_on(host: &str, database_url: &str, log: PathBuf, tls: &super::tls::Tls, extra: &[&str]) -> Self {
        let (cert, key) = (tls.cert.display().to_string(), tls.key.display().to_string());
        let tls_args = ["--tls-cert-file", &cert, "--tls-key-file", &key];
        let (admin_token, file) = admin_token_beside(&log);
        let args = [&tls_args[..], &["--admin-token-file", &file], extra].concat();
        Self::launch(this_tree(), host, database_url, log, &args, admin_token, Some(tls.ca.clone()))
    }

    /// A control plane with exactly `extra`: without `--admin-token-file` it generates its
    /// admin token and prints it, which [`Self::printed`] shows.
    pub fn start_bare(database_url: &str, log: PathBuf, extra: &[&str], admin_token: String) -> Self {
        Self::launch(this_tree(), "127.0.0.1", database_url, log, extra, admin_token, None)
    }

    fn launch(
        program: PathBuf,
        host: &str,
        database_url: &str,
        log: PathBuf,
        extra: &[&str],
        admin_token: String,
        ca_file: Option<PathBuf>,
    ) -> Self {
        let port = free_port();
        let mut args: Vec<String> = vec![
            "control-plane".into(),
            "--listen".into(),
            format!("{host}:{port}"),
            "--database-url".into(),
            database_url.into(),
        ];
        let scheme = if ca_file.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{host}:{port}");
        // `{url}` in a flag is this process's own URL (for --advertise-url).
        args.extend(extra.iter().map(|s| s.replace("{url}", &url)));
        let admin_token_file = log.with_extension("admin-token");
        let stdout = log.with_extension("stdout");
        let mut process = Self { child: None, program, args, url, log, stdout, admin_token, admin_token_file, ca_file };
        process.spawn();
        process
    }

    /// The process's resident memory, in bytes (from /proc).
    pub fn rss_bytes(&self) -> u64 {
        let pid = self.child.as_ref().map(Child::id).expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok());
        kib.expect("VmRSS") * 1024
    }

    /// Everything the process printed on stdout, across restarts.
    pub fn printed(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("control-plane log");
        let stdout = std::fs::OpenOptions::new().create(true).append(true).open(&self.stdout).expect("stdout file");
        let child = Command::new(&self.program)
            .args(&self.args)
            .env("NO_COLOR", "1")
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .expect("spawn wsync control-plane");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        // Up when it answers at all: a failpoint may have it answer 503 at once.
        while self.health().0 == 0 {
            assert!(Instant::now() < deadline, "the control plane did not come up:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether `/healthz` answers 200.
    pub fn healthy(&self) -> bool {
        self.health().0 == 200
    }

    /// What `/healthz` answers: its status (0 when nothing answers) and body.
    pub fn health(&self) -> (u16, String) {
        let mut command = Command::new("curl");
        command.args(["-s", "--max-time", "2", "-w", "\n%{http_code}"]);
        if let Some(ca) = &self.ca_file {
            command.arg("--cacert").arg(ca);
        }
        let out = command.arg(format!("{}/healthz", self.url)).output().expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, status) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (status.trim().parse().unwrap_or(0), body.to_string())
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

    /// Stop, start again with `extra` added to its arguments (a failpoint, say).
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.args.extend(extra.iter().map(|s| s.to_string()));
        self.restart();
    }

    /// Stop, start again without `flag` and its value.
    pub fn restart_without(&mut self, flag: &str) {
        if let Some(at) = self.args.iter().position(|a| a == flag) {
            self.args.drain(at..(at + 2).min(self.args.len()));
        }
        self.restart();
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Run `wsync <args>` against this control plane; stdout on success, panic otherwise.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.try_cli(args);
        assert!(out.status.success(), "wsync {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Run `wsync <args>` against this control plane, with its admin token and CA.
    pub fn try_cli(&self, args: &[&str]) -> std::process::Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_wsync"));
        command.args(args).env("WSYNC_SERVER", &self.url).env("WSYNC_ADMIN_TOKEN", &self.admin_token);
        if let Some(ca) = &self.ca_file {
            command.env("WSYNC_CA_FILE", ca);
        }
        command.output().expect("run wsync")
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
