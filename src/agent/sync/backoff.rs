//! One backoff schedule for every retry the agent makes: doubling from a first delay, capped.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub first: Duration,
    pub cap: Duration,
}

impl Backoff {
    /// Start-up steps: the apiserver or the Lease may need a while.
    pub const START_UP: Backoff = Backoff { first: Duration::from_millis(500), cap: Duration::from_secs(30) };
    /// Recreating the WorkspaceSyncStatus someone deleted: soon, since the ledger is unwritten meanwhile.
    pub const RECREATE: Backoff = Backoff { first: Duration::from_millis(200), cap: Duration::from_secs(10) };

    /// Failed cycles, capped at the partial interval.
    pub fn cycles(partial_interval: Duration) -> Backoff {
        Backoff { first: Duration::from_millis(500), cap: partial_interval }
    }

    /// The wait after `failures` consecutive failures (the first failure waits `first`).
    pub fn after(&self, failures: u32) -> Duration {
        let exponent = failures.saturating_sub(1).min(16);
        self.first.saturating_mul(1 << exponent).min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let cycles = Backoff::cycles(Duration::from_secs(10));
        assert_eq!(cycles.after(0), Duration::from_millis(500));
        assert_eq!(cycles.after(1), Duration::from_millis(500));
        assert_eq!(cycles.after(2), Duration::from_secs(1));
        assert_eq!(cycles.after(4), Duration::from_secs(4));
        assert_eq!(cycles.after(10), Duration::from_secs(10));
        assert_eq!(cycles.after(u32::MAX), Duration::from_secs(10));
        assert_eq!(Backoff::START_UP.after(7), Duration::from_secs(30));
        assert_eq!(Backoff::RECREATE.after(3), Duration::from_millis(800));
    }
}
