//! The real `wsync agent` as a child process of a test: its flags, logs, metrics and restarts.

use super::{AGENT_NAMESPACE, LABEL_KEY, TEST_LABEL, TestEnv, env, free_port, kubectl, stub};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// The real `wsync agent`, as a child process.
pub struct AgentProcess {
    pub id: String,
    child: Option<Child>,
    args: Vec<String>,
    kubeconfig: PathBuf,
    /// Environment variables set for the process besides the test's own.
    vars: Vec<(String, String)>,
    pub dir: tempfile::TempDir,
    starts: u32,
    /// Delete the agent's WorkspaceSyncStatus and namespaces when dropped.
    cleanup: bool,
    /// Where `/metrics` is served (0: not known).
    pub metrics_port: u16,
    /// Where `PUT /loglevel` is served.
    pub admin_port: u16,
}

impl AgentProcess {
    /// Start an agent with short timings suited to tests; `extra` overrides flags.
    pub fn start(env: &TestEnv, id: &str, control_plane_url: &str, extra: &[&str]) -> Self {
        Self::start_with_token(env, id, control_plane_url, stub::STUB_TOKEN, extra)
    }

    pub fn start_with_token(env: &TestEnv, id: &str, control_plane_url: &str, token: &str, extra: &[&str]) -> Self {
        Self::start_as(env.agent_kubeconfig.clone(), id, control_plane_url, token, extra)
    }

    /// Start an agent with these environment variables set too.
    pub fn start_with_vars(
        env: &TestEnv,
        id: &str,
        url: &str,
        token: &str,
        extra: &[&str],
        vars: &[(&str, &str)],
    ) -> Self {
        let mut agent = Self::start_unspawned(env.agent_kubeconfig.clone(), id, url, token, extra);
        agent.vars = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        agent.spawn();
        agent
    }

    /// Start an agent that authenticates to the apiserver with `kubeconfig`.
    pub fn start_as(kubeconfig: PathBuf, id: &str, control_plane_url: &str, token: &str, extra: &[&str]) -> Self {
        let mut agent = Self::start_unspawned(kubeconfig, id, control_plane_url, token, extra);
        agent.spawn();
        agent
    }

    fn start_unspawned(kubeconfig: PathBuf, id: &str, control_plane_url: &str, token: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, token).expect("write token");
        let mut args: Vec<String> = vec![
            "agent".into(),
            "--agent-id".into(),
            id.into(),
            "--namespace".into(),
            AGENT_NAMESPACE.into(),
            "--control-plane-url".into(),
            control_plane_url.into(),
            "--token-file".into(),
            token_file.display().to_string(),
        ];
        if !extra.contains(&"--request-timeout") {
            args.extend(["--request-timeout".into(), "2s".into()]);
        }
        let metrics_port = match extra.iter().position(|a| *a == "--metrics-address") {
            Some(i) => extra.get(i + 1).and_then(|a| a.rsplit_once(':')?.1.parse().ok()).unwrap_or(0),
            None => {
                let port = free_port();
                args.extend(["--metrics-address".into(), format!("127.0.0.1:{port}")]);
                port
            }
        };
        let admin_port = free_port();
        args.extend(["--admin-address".into(), format!("127.0.0.1:{admin_port}")]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Self {
            id: id.into(),
            child: None,
            args,
            kubeconfig,
            vars: Vec::new(),
            dir,
            starts: 0,
            cleanup: true,
            metrics_port,
            admin_port,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("agent-{}.log", self.starts))
    }

    fn spawn(&mut self) {
        self.starts += 1;
        let log = std::fs::File::create(self.log_path()).expect("agent log");
        let child = agent_command()
            .args(&self.args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "info,wsync=debug")
            .env("NO_COLOR", "1")
            .envs(self.vars.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn wsync agent");
        self.child = Some(child);
    }

    /// kill -9: no cleanup, no final status write.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Stop cleanly (the Lease is released) and start again without `flag` and its value.
    pub fn restart_without(&mut self, flag: &str) {
        self.terminate();
        if let Some(at) = self.args.iter().position(|a| a == flag) {
            self.args.drain(at..(at + 2).min(self.args.len()));
        }
        self.spawn();
    }

    /// SIGTERM, then wait for the exit; returns whether it exited 0.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else { return false };
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        child.wait().map(|status| status.success()).unwrap_or(false)
    }

    /// Every log line this agent wrote, across restarts.
    pub fn logs(&self) -> String {
        (1..=self.starts)
            .map(|n| std::fs::read_to_string(self.dir.path().join(format!("agent-{n}.log"))).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The agent's `/metrics` text; empty while it does not answer.
    pub fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args(["-fs", "--max-time", "2", &format!("http://127.0.0.1:{}/metrics", self.metrics_port)])
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).to_string()).unwrap_or_default()
    }

    /// How many cycles of this update type (`full`, `partial`) succeeded, from the agent's
    /// `/metrics`; 0 while it does not answer.
    pub fn cycles(&self, update_type: &str) -> usize {
        let text = self.metrics();
        let labels = format!("update_type=\"{update_type}\"");
        text.lines()
            .filter(|l| l.starts_with("wsync_sync_cycles_total{") && l.contains(&labels))
            .filter(|l| l.contains("result=\"success\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .map(|n| n as usize)
            .sum()
    }

    /// Leave the agent's objects behind when dropped, for a successor with the same id.
    pub fn keep_cluster_state(mut self) -> Self {
        self.cleanup = false;
        self
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            eprintln!("---- agent {} logs ----\n{}", self.id, self.logs());
        }
        if !self.cleanup {
            return;
        }
        // Leave the shared cluster as we found it; deletion finishes in the background.
        let env = env();
        let _ = kubectl(env, &["-n", AGENT_NAMESPACE, "delete", "wss", &self.id, "--ignore-not-found", "--wait=false"]);
        for selector in [format!("{LABEL_KEY}={}", self.id), format!("{TEST_LABEL}={}", self.id)] {
            let _ = kubectl(env, &["delete", "namespace", "-l", &selector, "--wait=false"]);
        }
    }
}

/// The agent's command line. `WSYNC_AGENT_WRAPPER` (say `hack/heaptrack-agent.sh`) runs it under
/// a profiler; the pid is then the wrapper's, so RSS figures do not apply.
fn agent_command() -> Command {
    let wrapper = std::env::var("WSYNC_AGENT_WRAPPER").unwrap_or_default();
    let mut words = wrapper.split_whitespace();
    match words.next() {
        Some(program) => {
            let mut command = Command::new(program);
            command.args(words).arg(env!("CARGO_BIN_EXE_wsync"));
            command
        }
        None => Command::new(env!("CARGO_BIN_EXE_wsync")),
    }
}
