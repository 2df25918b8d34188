//! The scale benchmark (issue 6, BENCHMARKS.md): the real `wsync agent` against the local real
//! apiserver, with N workspaces, each figure next to a floor measured in the same run.
//!
//! `cargo bench --bench scale` runs N ∈ {100, 1000, 10000} (override with
//! `WSYNC_BENCH_SIZES=100,1000`; `WSYNC_BENCH_SAMPLES` and `WSYNC_BENCH_RUNS` set the latency
//! samples and timed full resyncs per size, `WSYNC_BENCH_SMALL_RUNS` the resyncs at N ≤ 100,
//! `WSYNC_BENCH_END_TO_END_SIZES` the sizes for the end-to-end figures, `WSYNC_BENCH_THROUGHPUT_ROUNDS`
//! the control-plane runs per side and database; an empty list skips a
//! part; `WSYNC_BENCH_PARTS=tunnel` runs only the tunnel's figures, which need the real node,
//! with `WSYNC_BENCH_WEBSOCKETS` held open). Under `cargo test` (no `--bench` argument) it runs a smoke
//! pass at N=100 with few samples, so that CI keeps it working.

#[path = "../../tests/support/mod.rs"]
pub mod support;

mod agent_figures;
mod control_plane;
mod cpu;
mod end_to_end;
mod tunnel;
mod workload;

use std::time::Duration;

/// The control-plane figures run the router in this process, so they follow the allocator the
/// `wsync` binary is built with.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The benchmark's parts, in the order they run.
const PARTS: [&str; 4] = ["agent", "end-to-end", "control-plane", "tunnel"];

pub struct Options {
    pub sizes: Vec<usize>,
    /// Latency samples per figure and size.
    pub samples: usize,
    /// Timed full resyncs per size (agent and floor alternate).
    pub runs: usize,
    /// The same at N ≤ 100, where a resync takes ~200 ms and one scheduling hiccup on two
    /// shared cores moves a run by half: enough runs for a steady median.
    pub small_runs: usize,
    /// Seconds of idle partial cycles to observe.
    pub idle_seconds: u64,
    /// Seconds per control-plane throughput run, and runs of each side per database.
    pub throughput_seconds: u64,
    pub throughput_rounds: usize,
    /// N for the end-to-end figures: by default the sizes up to 1,000, since each workspace is
    /// a namespace there, which the namespace controller takes minutes to delete by the thousand.
    pub end_to_end_sizes: Vec<usize>,
    /// WebSockets held open through one agent, and timed reads of 32 MiB each way, for the
    /// tunnel's figures (on the real node only).
    pub websockets: usize,
    pub bulk_runs: usize,
    /// The parts to run (`WSYNC_BENCH_PARTS`): agent, end-to-end, control-plane, tunnel.
    pub parts: Vec<String>,
}

impl Options {
    fn from_env() -> Self {
        let full = std::env::args().any(|a| a == "--bench");
        let list = |name: &str| {
            let value = std::env::var(name).ok()?;
            Some(value.split(',').filter_map(|n| n.trim().parse().ok()).collect::<Vec<usize>>())
        };
        let sizes = list("WSYNC_BENCH_SIZES").unwrap_or_else(|| if full { vec![100, 1000, 10_000] } else { vec![100] });
        let end_to_end_sizes = list("WSYNC_BENCH_END_TO_END_SIZES")
            .unwrap_or_else(|| sizes.iter().copied().filter(|&n| n <= 1000).collect());
        let number =
            |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
        let (samples, runs, small_runs) = if full { (200, 3, 30) } else { (20, 1, 3) };
        Self {
            sizes,
            samples: number("WSYNC_BENCH_SAMPLES", samples),
            runs: number("WSYNC_BENCH_RUNS", runs),
            small_runs: number("WSYNC_BENCH_SMALL_RUNS", small_runs),
            idle_seconds: if full { 10 } else { 3 },
            throughput_seconds: if full { 5 } else { 1 },
            throughput_rounds: number("WSYNC_BENCH_THROUGHPUT_ROUNDS", if full { 3 } else { 1 }),
            end_to_end_sizes,
            websockets: number("WSYNC_BENCH_WEBSOCKETS", if full { 1000 } else { 50 }),
            bulk_runs: if full { 7 } else { 1 },
            parts: std::env::var("WSYNC_BENCH_PARTS")
                .unwrap_or_else(|_| PARTS.join(","))
                .split(',')
                .map(|part| part.trim().to_string())
                .filter(|part| !part.is_empty())
                .inspect(|part| {
                    assert!(PARTS.contains(&part.as_str()), "WSYNC_BENCH_PARTS: no part {part:?}; the parts: {PARTS:?}")
                })
                .collect(),
        }
    }

    pub fn runs(&self, part: &str) -> bool {
        self.parts.iter().any(|p| p == part)
    }

    /// Timed full resyncs at N.
    pub fn runs_at(&self, n: usize) -> usize {
        if n <= 100 { self.small_runs } else { self.runs }
    }
}

/// A markdown table with one column per size, printed as it is built.
pub struct Table<'a, R> {
    rows: &'a [R],
}

impl<'a, R> Table<'a, R> {
    pub fn start(heading: &str, rows: &'a [R], n: impl Fn(&R) -> usize) -> Self {
        println!("| {heading} | target |{}", rows.iter().map(|r| format!(" N={} |", n(r))).collect::<String>());
        println!("|---|---|{}", rows.iter().map(|_| "---|").collect::<String>());
        Self { rows }
    }

    pub fn line(&self, figure: &str, target: &str, value: impl Fn(&R) -> String) {
        println!("| {figure} | {target} |{}", self.rows.iter().map(|r| format!(" {} |", value(r))).collect::<String>());
    }
}

/// Median and a percentile of samples, in milliseconds.
pub fn percentile(samples: &[Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    let mut sorted: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn command_line(program: &str, args: &[&str]) -> String {
    std::process::Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("unavailable ({e})"))
}

fn machine() -> Vec<(String, String)> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model =
        cpuinfo.lines().find_map(|l| l.strip_prefix("model name")).map(|m| m.trim_start_matches([' ', '\t', ':']));
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory = meminfo.lines().find(|l| l.starts_with("MemTotal")).unwrap_or_default().to_string();
    let env = support::env();
    let server = support::kubectl(env, &["version", "-o", "json"]);
    let server: serde_json::Value = serde_json::from_slice(&server.stdout).unwrap_or_default();
    vec![
        (
            "cpu".into(),
            format!("{} × {}", std::thread::available_parallelism().map_or(0, |n| n.get()), model.unwrap_or("?")),
        ),
        ("memory".into(), memory.trim_start_matches("MemTotal:").trim().to_string()),
        ("kernel".into(), command_line("uname", &["-sr"])),
        ("rustc".into(), command_line("rustc", &["--version"])),
        ("kube-apiserver".into(), server["serverVersion"]["gitVersion"].as_str().unwrap_or("?").to_string()),
        (
            "wsync".into(),
            format!(
                "{} (debug assertions: {}, allocator: {})",
                env!("CARGO_PKG_VERSION"),
                cfg!(debug_assertions),
                if cfg!(feature = "jemalloc") { "jemalloc" } else { "system malloc (glibc: malloc_trim)" }
            ),
        ),
    ]
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    wsync::runtime::install_crypto_provider();
    let options = Options::from_env();
    println!("# wsync scale benchmark\n");
    for (what, value) in machine() {
        println!("- {what}: {value}");
    }
    println!();
    if options.runs("agent") {
        let mut rows = Vec::new();
        let baseline = agent_figures::baseline().await;
        println!("agent baseline RSS (no workspaces): {:.1} MiB\n", baseline.rss as f64 / 1048576.0);
        for &n in &options.sizes {
            rows.push(agent_figures::measure(n, &options, baseline).await);
            // The table so far, so that a long run's early sizes are never lost.
            agent_figures::print_table(&rows);
        }
    }
    if options.runs("end-to-end") {
        let mut end_to_end = Vec::new();
        for &n in &options.end_to_end_sizes {
            end_to_end.push(end_to_end::measure(n, &options).await);
            end_to_end::print_table(&end_to_end);
        }
    }
    if options.runs("control-plane") {
        control_plane::print_throughput(&options).await;
    }
    if options.runs("tunnel") {
        tunnel::measure(&options).await;
    }
}
