//! The monitoring pieces (manifests/monitoring): the alert rules pass their promtool unit
//! tests (promtool from Debian's `prometheus` package, hack/promtool.sh), and every metric the
//! rules and the Grafana dashboard name is one a live agent exports.

use crate::support::stub::{Script, StubControlPlane};
use crate::support::*;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

const MONITORING: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/monitoring");

fn read(file: &str) -> String {
    std::fs::read_to_string(format!("{MONITORING}/{file}")).expect("a monitoring file")
}

fn promtool() -> String {
    let out =
        Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/hack/promtool.sh")).output().expect("hack/promtool.sh");
    assert!(out.status.success(), "no promtool: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `program args` in `dir`, which must succeed: what it printed, both streams.
pub fn run(program: &str, args: &[&str], dir: &std::path::Path) -> String {
    let out = Command::new(program).args(args).current_dir(dir).output().expect("run");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{program} {args:?}:\n{said}");
    said
}

#[test]
fn the_alert_rules_pass_their_promtool_tests() {
    let rule = wsync::yaml::parse_value(&read("prometheusrule.yaml")).expect("the PrometheusRule");
    let dir = tempfile::tempdir().expect("tempdir");
    // JSON is YAML: the PrometheusRule's groups, as the rule file the tests name.
    let rules = serde_json::json!({ "groups": rule["spec"]["groups"] });
    std::fs::write(dir.path().join("rules.yaml"), rules.to_string()).expect("rules.yaml");
    std::fs::write(dir.path().join("alerts_test.yaml"), read("alerts_test.yaml")).expect("alerts_test.yaml");
    let promtool = promtool();
    assert!(run(&promtool, &["check", "rules", "rules.yaml"], dir.path()).contains("SUCCESS: 7 rules found"));
    assert!(run(&promtool, &["test", "rules", "alerts_test.yaml"], dir.path()).contains("SUCCESS"));
    let built = run("kubectl", &["kustomize", MONITORING], dir.path());
    for object in
        ["kind: ServiceMonitor", "kind: PrometheusRule", "name: wsync-agent-dashboard", "grafana_dashboard: \"1\""]
    {
        assert!(built.contains(object), "{object} missing from:\n{built}");
    }
}

/// The pinned prometheus-operator CRDs (crds/third-party/prometheus-operator).
const OPERATOR_CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/crds/third-party/prometheus-operator");

/// The monitoring objects are validated by a server, as every other rendered object is: the
/// prometheus-operator CRDs applied, then `manifests/monitoring` and the chart's ServiceMonitor
/// and PrometheusRule dry-run against them. A malformed one is refused, so the check bites.
#[test]
fn the_monitoring_objects_pass_a_servers_validation() {
    let env = env();
    for crd in ["monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"] {
        let file = format!("{OPERATOR_CRDS}/{crd}");
        kubectl_ok(env, &["apply", "--server-side", "--force-conflicts", "-f", &file]);
    }
    let names = ["crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com"];
    kubectl_ok(env, &[&["wait", "--for=condition=Established", "--timeout=60s"][..], &names[..]].concat());
    let applied = kubectl_ok(env, &["apply", "-k", MONITORING, "--dry-run=server"]);
    for object in
        ["servicemonitor.monitoring.coreos.com/wsync-agent", "prometheusrule.monitoring.coreos.com/wsync-agent"]
    {
        assert!(applied.contains(object), "{object} missing from:\n{applied}");
    }
    let values = serde_json::json!({ "metrics": { "serviceMonitor": { "enabled": true }, "prometheusRule": { "enabled": true } },
                                     "crds": { "enabled": false } });
    let rendered = crate::helm_chart::helm(&["render", crate::helm_chart::CHART, &values.to_string(), AGENT_NAMESPACE]);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("chart.yaml");
    std::fs::write(&file, &rendered).expect("write");
    let checked = kubectl_ok(env, &["-n", AGENT_NAMESPACE, "apply", "--dry-run=server", "-f", path_str(&file)]);
    for kind in ["servicemonitor.monitoring.coreos.com/", "prometheusrule.monitoring.coreos.com/"] {
        assert!(checked.contains(kind), "{kind} missing from:\n{checked}");
    }
    let broken = "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: broken}\n\
                  spec: {selector: {}, endpoints: [{port: metrics, interval: every-minute}]}\n";
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, broken).expect("write");
    let refused = kubectl(env, &["-n", AGENT_NAMESPACE, "apply", "--dry-run=server", "-f", path_str(&file)]);
    assert!(!refused.status.success(), "a malformed interval passes: the CRDs validate nothing");
}

/// Metric names in `text`: the words that start with `wsync_`.
fn named(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("wsync_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_lowercase() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].trim_end_matches('_').to_string());
        rest = &tail[end..];
    }
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_the_rules_and_the_dashboard_name_is_exported() {
    let stub = StubControlPlane::start(Script::with_intervals(300, 1)).await;
    let agent = AgentProcess::start(env(), &unique_id("mo"), &stub.url, &[]);
    stub.wait_for("a cycle", 0, Duration::from_secs(60), |_| true).await;
    let wanted: BTreeSet<String> =
        named(&read("prometheusrule.yaml")).union(&named(&read("grafana-dashboard.json"))).cloned().collect();
    assert!(wanted.len() >= 10, "{wanted:?}");
    // Families, by their TYPE lines: a counter's samples end in _total, a histogram's in
    // _bucket, _sum and _count. The first cycle's own metrics appear when it ends, a moment
    // after the control plane answered it: wait for them, and name what stays missing.
    let missing = |metrics: &str| -> Vec<String> {
        let families: BTreeSet<&str> =
            metrics.lines().filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next()).collect();
        let exported = |name: &str| {
            ["", "_total", "_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| name.strip_suffix(suffix).is_some_and(|family| families.contains(family)))
        };
        wanted.iter().filter(|name| !exported(name)).cloned().collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (mut metrics, mut missing_now) = (agent.metrics(), Vec::new());
    while std::time::Instant::now() < deadline {
        metrics = agent.metrics();
        missing_now = missing(&metrics);
        if missing_now.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let missing = missing_now;
    assert!(missing.is_empty(), "named but not exported: {missing:?}\n{metrics}");
}

/// The control plane's own /metrics, for the bearer of its metrics token only: reconciles by
/// agent and result, their duration, the database's, and workspaces by actual state.
#[tokio::test(flavor = "multi_thread")]
async fn the_control_plane_exports_reconciles_and_workspaces() {
    let mut system = crate::support::system::System::start("cm").await;
    let url = format!("{}/metrics", system.control_plane.url);
    assert_eq!(reqwest::get(&url).await.expect("GET").status(), 404, "no metrics without a metrics token");
    let token_file = system.control_plane.admin_token_file.with_extension("metrics-token");
    let scrape_token = crate::support::secret_token("scrape");
    std::fs::write(&token_file, &scrape_token).expect("the metrics token");
    system.control_plane.restart_with(&["--metrics-token-file", &token_file.display().to_string()]);
    system.cli(&["create", "ann", "--image", "registry.example.com/ide:1"]);
    system.wait_actual("ann", "Running").await;
    let refused = reqwest::Client::new()
        .post(format!("{}{}", system.control_plane.url, wsync::protocol::RECONCILE_PATH))
        .bearer_auth("not-a-token")
        .body("{}")
        .send()
        .await
        .expect("the control plane");
    assert_eq!(refused.status(), 401);
    let client = reqwest::Client::new();
    let refused = client.get(&url).bearer_auth("guess").send().await.expect("GET");
    assert_eq!(refused.status(), 401, "a wrong token");
    let scraped = client.get(&url).bearer_auth(&scrape_token).send().await.expect("GET");
    assert_eq!(scraped.status(), 200);
    let metrics = scraped.text().await.expect("text");
    let sample = |name: &str| -> f64 {
        metrics.lines().find(|l| l.starts_with(name)).and_then(|l| l.rsplit(' ').next()?.parse().ok()).unwrap_or(0.0)
    };
    let id = &system.id;
    assert!(
        sample(&format!("wsync_control_plane_reconciles_total{{agent=\"{id}\",result=\"success\"}}")) >= 1.0,
        "{metrics}"
    );
    assert_eq!(sample("wsync_control_plane_reconciles_total{agent=\"-\",result=\"unauthorized\"}"), 1.0, "{metrics}");
    assert_eq!(sample("wsync_control_plane_workspaces{state=\"Running\"}"), 1.0, "{metrics}");
    assert!(sample("wsync_control_plane_reconcile_duration_seconds_count") >= 1.0, "{metrics}");
    assert!(sample("wsync_control_plane_database_duration_seconds_count") >= 1.0, "{metrics}");
}
