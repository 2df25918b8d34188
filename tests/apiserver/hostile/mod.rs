//! The hostile control plane (DESIGN §2, "Trust"): the real `wsync agent` against the real
//! apiserver, with the stub scripted per attack. Every test shows:
//! - nothing of the attack is in the cluster, as read through the API;
//! - the audit log shows no read of a Secret the agent was not allowed;
//! - the workspace's error names the refusal;
//! - another workspace in the same answer syncs on;
//! - the agent is still up, with its peak RSS (VmHWM) under a bound.
//!
//! When the last of them finishes it prints `hostile control plane: N attacks, N refused, 0
//! landed` (straight to stderr, past the test harness's capture).

mod bounds_and_transport;
mod fields_and_prune;
mod secrets_and_pods;
mod shared_namespace;
mod tunnel;

use crate::support::stub::{Reply, StubControlPlane};
use crate::support::*;
use serde_json::{Value, json};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);
/// Peak RSS an agent may reach under any attack here: it idles near 40 MB, and reads at most
/// the answer cap, 64 MiB, of a huge answer.
const PEAK_RSS_BOUND_KB: u64 = 150 * 1024;
/// The tests in this module, so that the last one to finish prints the summary.
const TESTS: usize = 17;

/// [`TESTS`] is every test here, so that the summary is printed by the last one and not
/// while another is still attacking.
#[test]
fn the_summary_waits_for_every_test() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/apiserver/hostile");
    let sources = std::fs::read_dir(dir).expect("the hostile suite").filter_map(|entry| {
        let path = entry.ok()?.path();
        (path.extension()? == "rs").then(|| std::fs::read_to_string(path).ok()).flatten()
    });
    let tests: usize =
        sources.map(|source| source.lines().filter(|line| line.starts_with("#[tokio::test")).count()).sum();
    assert_eq!(tests, TESTS, "const TESTS in tests/apiserver/hostile/mod.rs");
}

static FINISHED: AtomicUsize = AtomicUsize::new(0);
static ATTACKS: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicUsize = AtomicUsize::new(0);

/// One agent, its stub, a workspace that must keep syncing (`good`), and a namespace the
/// agent must never touch (`victim`).
pub struct Arena {
    pub env: &'static TestEnv,
    pub id: String,
    pub good: String,
    pub victim: String,
    pub stub: StubControlPlane,
    pub agent: AgentProcess,
    attacks: Arc<Mutex<Vec<Value>>>,
    settings: Arc<Mutex<Value>>,
    audit_from: usize,
    allowed_sources: Vec<String>,
    refused: usize,
}

/// An info of a workspace the control plane wants running.
pub fn info(namespace: &str, name: &str, config: &str) -> Value {
    json!({ "name": name, "namespace": namespace, "desired_state": "Running", "actual_state": "Running",
            "config_to_apply": config, "image_pull_secrets": [] })
}

/// A config with one inventory `inv` and the given members.
pub fn config(namespace: &str, members: &[String]) -> String {
    inventory_config(namespace, "inv", members)
}

impl Arena {
    /// `allowed_sources` are `namespace/name` pull-secret sources the agent is configured with.
    pub async fn start(prefix: &str, allowed_sources: &[String], flags: &[&str]) -> Self {
        Self::start_as(&unique_id(prefix), allowed_sources, flags).await
    }

    /// With an id made beforehand (`unique_id`), for namespaces made before the agent starts.
    pub async fn start_as(id: &str, allowed_sources: &[String], flags: &[&str]) -> Self {
        Self::launch(id, allowed_sources, flags, false).await
    }

    /// An agent in shared-namespace mode: every workspace, the good one too, lives in
    /// [`Arena::good`], a namespace the test made, which the stub's prerequisites serve.
    pub async fn start_shared(prefix: &str, flags: &[&str]) -> Self {
        Self::launch(&unique_id(prefix), &[], flags, true).await
    }

    async fn launch(id: &str, allowed_sources: &[String], flags: &[&str], shared: bool) -> Self {
        let env = env();
        let id = id.to_string();
        let (good, victim) = (format!("{id}-good"), format!("{id}-victim"));
        kubectl_ok(env, &["create", "namespace", &victim]);
        kubectl_ok(env, &["label", "namespace", &victim, &format!("{TEST_LABEL}={id}")]);
        if shared {
            kubectl_ok(env, &["create", "namespace", &good]);
            kubectl_ok(env, &["label", "namespace", &good, &format!("{TEST_LABEL}={id}")]);
        }
        let attacks = Arc::new(Mutex::new(Vec::new()));
        let settings = Arc::new(Mutex::new(json!({ "full_reconciliation_interval_seconds": 300,
                                                     "partial_reconciliation_interval_seconds": 1 })));
        let good_info = info(&good, "ws", &inventory_config(&good, "ws-inventory", &[config_map(&good, "cfg")]));
        let stub = StubControlPlane::start(Default::default()).await;
        if shared {
            stub.set_shared_namespace(&good);
        }
        let (attacks_now, settings_now) = (attacks.clone(), settings.clone());
        stub.set_responder(move |_| {
            let mut infos = vec![good_info.clone()];
            infos.extend(attacks_now.lock().unwrap().iter().cloned());
            let settings = settings_now.lock().unwrap().clone();
            Reply::status(201, &json!({ "workspace_rails_infos": infos, "settings": settings }).to_string())
        });
        let sources = allowed_sources.join(",");
        let mut args = flags.to_vec();
        if shared {
            args.extend(["--shared-namespace", &good]);
        }
        if !sources.is_empty() {
            args.extend(["--image-pull-secret-source", &sources]);
        }
        let audit_from = audit_mark(env);
        let agent = AgentProcess::start(env, &id, &stub.url, &args);
        Self {
            env,
            id,
            good,
            victim,
            stub,
            agent,
            attacks,
            settings,
            audit_from,
            allowed_sources: allowed_sources.to_vec(),
            refused: 0,
        }
    }

    /// What the control plane sends besides the good workspace, from the next answer on.
    pub fn attack(&self, infos: Vec<Value>) {
        ATTACKS.fetch_add(infos.len(), Ordering::SeqCst);
        *self.attacks.lock().unwrap() = infos;
    }

    pub fn attacks_now(&self) -> Vec<Value> {
        self.attacks.lock().unwrap().clone()
    }

    /// Change the attack without counting another one.
    pub fn replace_attack(&self, infos: Vec<Value>) {
        *self.attacks.lock().unwrap() = infos;
    }

    pub fn count_attacks(&self, n: usize) {
        ATTACKS.fetch_add(n, Ordering::SeqCst);
    }

    pub fn set_settings(&self, settings: Value) {
        *self.settings.lock().unwrap() = settings;
    }

    pub fn attack_namespace(&self, n: u32) -> String {
        format!("{}-a{n}", self.id)
    }

    /// Wait for the agent to report `name`'s error containing `needle`; returns the message.
    pub async fn refusal(&mut self, name: &str, needle: &str) -> String {
        let what = format!("{name}'s error naming {needle:?}");
        let (_, seen) = self
            .stub
            .wait_for(&what, 0, LONG, |r| {
                r.request.workspace_agent_infos.iter().any(|i| {
                    i.name == name && i.error_details.as_ref().is_some_and(|e| e.error_message.contains(needle))
                })
            })
            .await;
        self.refused_one();
        let info = seen.request.workspace_agent_infos.iter().find(|i| i.name == name).expect("the info");
        info.error_details.as_ref().map(|e| e.error_message.clone()).unwrap_or_default()
    }

    /// An attack that was refused without a workspace error (a cycle-level refusal).
    pub fn refused_one(&mut self) {
        self.refused += 1;
        REFUSED.fetch_add(1, Ordering::SeqCst);
    }

    /// The good workspace's config is in the cluster, and cycles go on after `after`.
    pub async fn good_syncs_on(&self) {
        let env = self.env;
        eventually("the good workspace applied", LONG, || {
            kubectl(env, &["-n", &self.good, "get", "configmap", "cfg"]).status.success().then_some(())
        })
        .await;
        let seen = self.stub.count();
        self.stub.wait_for("two more cycles", seen + 2, LONG, |_| true).await;
        eventually("Synced=True", LONG, || {
            (condition(&wss_json(env, &self.id)?, "Synced")?["status"] == "True").then_some(())
        })
        .await;
    }

    /// Nothing of `kind` named `name` in `namespace`.
    pub fn absent(&self, namespace: &str, kind: &str, name: &str) {
        let out = kubectl(self.env, &["-n", namespace, "get", kind, name, "--ignore-not-found", "-o", "name"]);
        assert!(String::from_utf8_lossy(&out.stdout).trim().is_empty(), "{kind} {namespace}/{name} landed");
    }

    /// The closing checks every attack shares; prints one line, and the summary when last.
    pub fn finish(mut self, attack: &str) {
        assert!(self.agent.is_running(), "the agent died:\n{}", self.agent.logs());
        let pid = self.agent.pid().expect("pid");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
        let peak_kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM");
        assert!(peak_kb < PEAK_RSS_BOUND_KB, "peak RSS {peak_kb} kB, bound {PEAK_RSS_BOUND_KB} kB");
        std::thread::sleep(Duration::from_millis(500));
        let secrets = self.secret_requests();
        let reads: Vec<&String> = secrets
            .iter()
            .filter(|(verb, at)| {
                matches!(verb.as_str(), "get" | "list" | "watch") && !self.allowed_sources.contains(at)
            })
            .map(|(_, at)| at)
            .collect();
        assert!(reads.is_empty(), "the agent read Secrets it was not allowed: {reads:?}");
        let outside: Vec<_> = secrets.iter().filter(|(_, at)| at.starts_with(&format!("{}/", self.victim))).collect();
        assert!(outside.is_empty(), "the agent touched Secrets in a namespace not its own: {outside:?}");
        let line = format!(
            "hostile control plane: {attack}: {} refused, nothing landed, peak RSS {} MB\n",
            self.refused,
            peak_kb / 1024
        );
        let finished = FINISHED.fetch_add(1, Ordering::SeqCst) + 1;
        let mut stderr = std::io::stderr();
        let _ = stderr.write_all(line.as_bytes());
        if finished == TESTS {
            let (attacks, refused) = (ATTACKS.load(Ordering::SeqCst), REFUSED.load(Ordering::SeqCst));
            let landed = attacks.saturating_sub(refused);
            let _ = writeln!(stderr, "hostile control plane: {attacks} attacks, {refused} refused, {landed} landed");
        }
    }

    /// (verb, `namespace/name`) of every request the agent made on Secrets in this arena's
    /// namespaces since it started.
    fn secret_requests(&self) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(&self.env.audit_log).unwrap_or_default();
        let prefix = format!("{}-", self.id);
        text.lines()
            .skip(self.audit_from)
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|e| e["user"]["username"] == AGENT_USER && e["stage"] == "ResponseComplete")
            .filter(|e| e["objectRef"]["resource"] == "secrets")
            .filter(|e| e["objectRef"]["namespace"].as_str().is_some_and(|ns| ns.starts_with(&prefix)))
            .map(|e| {
                let o = &e["objectRef"];
                let at = format!("{}/{}", o["namespace"].as_str().unwrap_or(""), o["name"].as_str().unwrap_or(""));
                (e["verb"].as_str().unwrap_or("").to_string(), at)
            })
            .collect()
    }
}
