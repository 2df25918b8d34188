//! How fast anyone may try to sign in. Every attempt counts before its token is checked: per
//! client address and for the whole server (`governor`'s GCRA), and an address whose attempts
//! failed waits longer after each further failure, until one succeeds. The token check itself
//! stays constant-time; these limits only make guessing slow.

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::runtime::LockExt;

/// Failures in a row after which an address waits.
const FREE_FAILURES: u32 = 4;
/// The longest an address waits after failing.
const MAX_BACKOFF: Duration = Duration::from_secs(15 * 60);
/// Addresses whose failures are remembered; beyond it, stale ones are forgotten first.
const MAX_TRACKED_ADDRESSES: usize = 100_000;

/// How long an address waits after its `failures`-th failure in a row: nothing before the
/// [`FREE_FAILURES`], then 1 s, doubling, up to [`MAX_BACKOFF`].
pub fn backoff(failures: u32) -> Duration {
    let Some(over) = failures.checked_sub(FREE_FAILURES) else { return Duration::ZERO };
    let seconds = 1u64.checked_shl(over.min(20)).unwrap_or(u64::MAX);
    Duration::from_secs(seconds).min(MAX_BACKOFF)
}

/// Which limit refused an attempt: the label of its metric, and the log's word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// The address failed too often lately.
    Backoff,
    /// The address tried too often.
    Address,
    /// Everyone together tried too often.
    Global,
}

impl Limit {
    pub fn label(self) -> &'static str {
        match self {
            Limit::Backoff => "backoff",
            Limit::Address => "address",
            Limit::Global => "global",
        }
    }
}

/// An attempt refused: by which limit, and when to try again (whole seconds, at least 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooMany {
    pub limit: Limit,
    pub retry_after: Duration,
}

impl TooMany {
    pub fn retry_after_seconds(&self) -> u64 {
        let whole = self.retry_after.as_secs();
        if self.retry_after.subsec_nanos() > 0 { whole.saturating_add(1) } else { whole.max(1) }
    }
}

struct Failures {
    count: u32,
    last: Instant,
}

pub struct SignInLimits {
    per_address: DefaultKeyedRateLimiter<IpAddr>,
    global: DefaultDirectRateLimiter,
    failures: Mutex<HashMap<IpAddr, Failures>>,
    clock: DefaultClock,
    /// When the maps were last swept of stale addresses: at most every [`SWEEP_EVERY`], so
    /// that many addresses cost a sweep now and then, not one per attempt.
    swept: Mutex<Instant>,
}

const SWEEP_EVERY: Duration = Duration::from_secs(10);

impl SignInLimits {
    /// `per_address` and `global` attempts a minute, each also the burst.
    pub fn new(per_address: NonZeroU32, global: NonZeroU32) -> Self {
        Self {
            per_address: RateLimiter::keyed(Quota::per_minute(per_address)),
            global: RateLimiter::direct(Quota::per_minute(global)),
            failures: Mutex::new(HashMap::new()),
            clock: DefaultClock::default(),
            swept: Mutex::new(Instant::now()),
        }
    }

    /// Count an attempt from `address`, before its token is checked.
    pub fn admit(&self, address: IpAddr) -> Result<(), TooMany> {
        self.waiting(address)?;
        if self.per_address.len() > MAX_TRACKED_ADDRESSES && self.sweep_due() {
            self.per_address.retain_recent();
        }
        let now = self.clock.now();
        self.per_address
            .check_key(&address)
            .map_err(|late| TooMany { limit: Limit::Address, retry_after: late.wait_time_from(now) })?;
        self.global.check().map_err(|late| TooMany { limit: Limit::Global, retry_after: late.wait_time_from(now) })
    }

    /// Whether `address` is still waiting after its failures; uses up no attempt. For checks
    /// that must not count every request (the API's bearer token, sent with each one).
    pub fn waiting(&self, address: IpAddr) -> Result<(), TooMany> {
        let failures = self.failures.lock_unpoisoned();
        let Some(seen) = failures.get(&address) else { return Ok(()) };
        let until = seen.last.checked_add(backoff(seen.count));
        match until.and_then(|until| until.checked_duration_since(Instant::now())) {
            Some(left) if !left.is_zero() => Err(TooMany { limit: Limit::Backoff, retry_after: left }),
            _ => Ok(()),
        }
    }

    pub fn failed(&self, address: IpAddr) {
        let mut failures = self.failures.lock_unpoisoned();
        if failures.len() >= MAX_TRACKED_ADDRESSES && !failures.contains_key(&address) {
            if self.sweep_due() {
                let now = Instant::now();
                failures.retain(|_, seen| now.duration_since(seen.last) < MAX_BACKOFF);
            }
            if failures.len() >= MAX_TRACKED_ADDRESSES {
                // Past the bound with every entry fresh, this address's failures are not
                // remembered: at the page, the rates still hold it back; at the API, the
                // token's 128 bits do.
                return;
            }
        }
        let seen = failures.entry(address).or_insert(Failures { count: 0, last: Instant::now() });
        seen.count = seen.count.saturating_add(1);
        seen.last = Instant::now();
    }

    fn sweep_due(&self) -> bool {
        let mut swept = self.swept.lock_unpoisoned();
        if swept.elapsed() < SWEEP_EVERY {
            return false;
        }
        *swept = Instant::now();
        true
    }

    /// A success resets its address's failures.
    pub fn succeeded(&self, address: IpAddr) {
        self.failures.lock_unpoisoned().remove(&address);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(per_address: u32, global: u32) -> SignInLimits {
        SignInLimits::new(NonZeroU32::new(per_address).unwrap(), NonZeroU32::new(global).unwrap())
    }

    #[test]
    fn failures_back_off_doubling_to_a_cap() {
        let waits: Vec<u64> = (0..8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(waits, [0, 0, 0, 0, 1, 2, 4, 8]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn an_address_that_keeps_failing_waits_and_a_success_resets_it() {
        let limits = limits(100, 1000);
        let (alice, mallory) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..FREE_FAILURES {
            assert_eq!(limits.admit(mallory), Ok(()));
            limits.failed(mallory);
        }
        let refused = limits.admit(mallory).unwrap_err();
        assert_eq!(refused.limit, Limit::Backoff);
        assert_eq!(refused.retry_after_seconds(), 1);
        assert_eq!(limits.admit(alice), Ok(()), "another address is not held back");
        limits.succeeded(mallory);
        assert_eq!(limits.waiting(mallory), Ok(()));
    }

    #[test]
    fn attempts_are_counted_per_address_and_for_everyone() {
        let limits = limits(2, 3);
        let one: IpAddr = "192.0.2.1".parse().unwrap();
        assert!(limits.admit(one).is_ok() && limits.admit(one).is_ok());
        let refused = limits.admit(one).unwrap_err();
        assert_eq!(refused.limit, Limit::Address);
        assert!((1..=30).contains(&refused.retry_after_seconds()), "{refused:?}");
        assert!(limits.admit("192.0.2.2".parse().unwrap()).is_ok(), "the third attempt overall");
        assert_eq!(limits.admit("192.0.2.3".parse().unwrap()).unwrap_err().limit, Limit::Global);
    }
}
