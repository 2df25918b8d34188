//! Who may hold the control plane's connections and requests. Everyone shares
//! `--max-connections`; no single address holds more than its share of them or of the requests
//! in flight; and past the shared pool, a reserve of connections (`--agent-connections`) serves
//! agents only, so that browsers (or anyone) holding every connection cannot stop the agents'
//! reconciles. Requests to the agents' paths count in a budget of their own.

use crate::runtime::LockExt;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Which pool a connection or a request is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Budget {
    /// Anyone: browsers, the CLI, scripts, and agents too while there is room.
    Everyone,
    /// The agents' own: their requests, and the reserve connections that serve only them.
    Agents,
}

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub agent_connections: usize,
    pub connections_per_address: usize,
    pub requests_per_address: usize,
}

/// Reserve connections one address may hold: an agent needs one, and one address must not
/// take the whole reserve.
const RESERVE_PER_ADDRESS: usize = 2;

pub struct ConnectionLimits {
    limits: Limits,
    shared: Arc<Semaphore>,
    reserve: Arc<Semaphore>,
    counts: Arc<Mutex<Counts>>,
}

#[derive(Default)]
struct Counts {
    connections: HashMap<(IpAddr, Budget), usize>,
    requests: HashMap<(IpAddr, Budget), usize>,
}

/// A pool's permit, held until the next connection is accepted.
pub enum Pool {
    Shared(OwnedSemaphorePermit),
    Reserve(OwnedSemaphorePermit),
}

/// An open connection's place: which budget serves it, released when it closes.
pub struct ConnectionSlot {
    pub budget: Budget,
    _permit: OwnedSemaphorePermit,
    _counted: Counted,
}

/// One count in one of the maps, taken back when dropped.
pub struct Counted {
    counts: Arc<Mutex<Counts>>,
    key: (IpAddr, Budget),
    requests: bool,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut counts = self.counts.lock_unpoisoned();
        let map = if self.requests { &mut counts.requests } else { &mut counts.connections };
        if let Some(count) = map.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                map.remove(&self.key);
            }
        }
    }
}

impl ConnectionLimits {
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            shared: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            reserve: Arc::new(Semaphore::new(limits.agent_connections)),
            counts: Arc::default(),
        }
    }

    /// Wait for room in either pool; the shared one first. Past both, a connection waits in
    /// the kernel's backlog, not in memory here.
    pub async fn room(&self) -> Option<Pool> {
        if let Ok(permit) = self.shared.clone().try_acquire_owned() {
            return Some(Pool::Shared(permit));
        }
        tokio::select! {
            biased;
            permit = self.shared.clone().acquire_owned() => permit.ok().map(Pool::Shared),
            permit = self.reserve.clone().acquire_owned(), if self.limits.agent_connections > 0 => {
                permit.ok().map(Pool::Reserve)
            }
        }
    }

    /// Place a connection from `address` (as [`super::front_door::address_key`] counts it),
    /// with the room [`Self::room`] found: in the shared pool while its address has its share
    /// left there, else in the reserve (agents only), else nowhere (it is closed at once). A
    /// `proxy` the operator trusts carries many clients: it has no share of its own.
    pub fn place(&self, room: Pool, address: IpAddr, proxy: bool) -> Option<ConnectionSlot> {
        let shared = match room {
            Pool::Shared(permit) => Some(permit),
            Pool::Reserve(reserve) => match self.shared.clone().try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => return self.count(address, Budget::Agents, reserve, proxy),
            },
        };
        if let Some(permit) = shared {
            match self.count(address, Budget::Everyone, permit, proxy) {
                Some(slot) => return Some(slot),
                None => {
                    let reserve = self.reserve.clone().try_acquire_owned().ok()?;
                    return self.count(address, Budget::Agents, reserve, proxy);
                }
            }
        }
        None
    }

    fn count(
        &self,
        address: IpAddr,
        budget: Budget,
        permit: OwnedSemaphorePermit,
        proxy: bool,
    ) -> Option<ConnectionSlot> {
        let limit = match (proxy, budget) {
            (true, _) => usize::MAX,
            (false, Budget::Everyone) => self.limits.connections_per_address,
            (false, Budget::Agents) => RESERVE_PER_ADDRESS.min(self.limits.connections_per_address),
        };
        let counted = self.take(address, budget, false, limit)?;
        Some(ConnectionSlot { budget, _permit: permit, _counted: counted })
    }

    /// Count a request from `address` in `budget`; None past its share of requests in flight.
    pub fn begin_request(&self, address: IpAddr, budget: Budget) -> Option<Counted> {
        self.take(address, budget, true, self.limits.requests_per_address)
    }

    fn take(&self, address: IpAddr, budget: Budget, requests: bool, limit: usize) -> Option<Counted> {
        let mut counts = self.counts.lock_unpoisoned();
        let map = if requests { &mut counts.requests } else { &mut counts.connections };
        let count = map.entry((address, budget)).or_insert(0);
        if *count >= limit {
            return None;
        }
        *count = count.saturating_add(1);
        Some(Counted { counts: self.counts.clone(), key: (address, budget), requests })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        ConnectionLimits::new(Limits {
            max_connections: 3,
            agent_connections: 2,
            connections_per_address: 2,
            requests_per_address: 1,
        })
    }

    #[tokio::test]
    async fn one_address_holds_its_share_and_the_reserve_serves_agents_past_the_pool() {
        let limits = limits();
        let (hog, other): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut held = Vec::new();
        for _ in 0..2 {
            let slot = limits.place(limits.room().await.unwrap(), hog, false).unwrap();
            assert_eq!(slot.budget, Budget::Everyone);
            held.push(slot);
        }
        let third = limits.place(limits.room().await.unwrap(), hog, false).expect("past its share: the reserve");
        assert_eq!(third.budget, Budget::Agents, "served for agents only");
        held.push(third);
        let fourth = limits.place(limits.room().await.unwrap(), hog, false).expect("its share of the reserve");
        assert_eq!(fourth.budget, Budget::Agents);
        held.push(fourth);
        assert!(limits.place(limits.room().await.unwrap(), hog, false).is_none(), "past every share: closed");
        let theirs = limits.place(limits.room().await.unwrap(), other, false).expect("another address");
        assert_eq!(theirs.budget, Budget::Everyone, "the hog did not take the shared pool");
        held.push(theirs);
        // The shared pool is full (3) and so is the reserve (2): a new one waits.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), limits.room()).await;
        assert!(waiting.is_err(), "past both pools, a connection waits");
        drop(held);
        assert!(limits.place(limits.room().await.unwrap(), hog, false).is_some_and(|s| s.budget == Budget::Everyone));
    }

    #[tokio::test]
    async fn a_trusted_proxy_has_no_share_and_one_address_takes_at_most_two_of_the_reserve() {
        let limits = ConnectionLimits::new(Limits {
            max_connections: 2,
            agent_connections: 8,
            connections_per_address: 1,
            requests_per_address: 1,
        });
        let (proxy, hog): (IpAddr, IpAddr) = ("10.0.0.9".parse().unwrap(), "10.0.0.1".parse().unwrap());
        let mut held = Vec::new();
        for _ in 0..2 {
            let slot = limits.place(limits.room().await.unwrap(), proxy, true).unwrap();
            assert_eq!(slot.budget, Budget::Everyone, "a proxy's clients share the pool, not one address's share");
            held.push(slot);
        }
        held.push(limits.place(limits.room().await.unwrap(), hog, false).unwrap());
        assert!(
            limits.place(limits.room().await.unwrap(), hog, false).is_none(),
            "one address: one of the reserve here"
        );
    }

    #[test]
    fn requests_in_flight_are_counted_per_address_and_budget() {
        let limits = limits();
        let address: IpAddr = "10.0.0.1".parse().unwrap();
        let browsing = limits.begin_request(address, Budget::Everyone).unwrap();
        assert!(limits.begin_request(address, Budget::Everyone).is_none());
        assert!(limits.begin_request(address, Budget::Agents).is_some(), "an agent's budget is its own");
        drop(browsing);
        assert!(limits.begin_request(address, Budget::Everyone).is_some());
    }
}
