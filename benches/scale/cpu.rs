//! CPU time spent, from /proc: this process's (the clients and, in-process, the control plane)
//! and the PostgreSQL server's (every `postgres` process, with the backends that exited, which
//! the postmaster has reaped). Rates move with the machine's hour; CPU per request much less,
//! and it says which side of the two shared cores a request costs.

use std::time::Duration;

#[derive(Clone, Copy, Default)]
pub struct Spent {
    pub process: Duration,
    pub server: Duration,
}

impl Spent {
    pub fn now() -> Self {
        Self { process: ticks("/proc/self/stat", false).unwrap_or_default(), server: postgres() }
    }

    pub fn since(self, start: Spent) -> Spent {
        Spent { process: self.process.saturating_sub(start.process), server: self.server.saturating_sub(start.server) }
    }
}

/// A run's rate, and the CPU one round cost this process (the clients, and the control plane
/// when it runs in process) and the PostgreSQL server.
#[derive(Clone, Copy)]
pub struct Throughput {
    pub per_second: f64,
    pub process_ms: f64,
    pub server_ms: f64,
}

impl Throughput {
    pub fn of(rounds: u64, elapsed: Duration, spent: Spent) -> Self {
        let per_round = |cpu: Duration| cpu.as_secs_f64() * 1000.0 / rounds.max(1) as f64;
        Self {
            per_second: rounds as f64 / elapsed.as_secs_f64(),
            process_ms: per_round(spent.process),
            server_ms: per_round(spent.server),
        }
    }

    /// Each figure's median over runs.
    pub fn median(runs: &[Throughput]) -> Self {
        let of = |figure: fn(&Throughput) -> f64| median(runs.iter().map(figure).collect());
        Self { per_second: of(|t| t.per_second), process_ms: of(|t| t.process_ms), server_ms: of(|t| t.server_ms) }
    }

    /// How much of the machine's cores the run kept busy, from the CPU it cost.
    pub fn busy(&self, cores: usize) -> f64 {
        (self.process_ms + self.server_ms) * self.per_second / 1000.0 / cores.max(1) as f64
    }
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

/// utime + stime, and with `children` the reaped children's too.
fn ticks(stat: &str, children: bool) -> Option<Duration> {
    let text = std::fs::read_to_string(stat).ok()?;
    // The fields after the command, which may hold spaces, in parentheses.
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| fields.get(n).and_then(|f| f.parse::<u64>().ok());
    // utime is field 14 of stat(5), the 12th after the command; stime, cutime, cstime follow.
    let mut sum = field(11)? + field(12)?;
    if children {
        sum += field(13)? + field(14)?;
    }
    // USER_HZ is 100 on every Linux this runs on.
    Some(Duration::from_millis(sum * 10))
}

fn postgres() -> Duration {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Duration::ZERO };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "postgres"))
        .filter_map(|e| ticks(&e.path().join("stat").to_string_lossy(), true))
        .sum()
}
