//! The agents' tunnels this process holds, by agent, below the routes that use them.

use crate::runtime::LockExt;
use crate::tunnel::transport::Opener;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// One agent's tunnel: its generation, its opener, and what closes it.
struct Held {
    generation: u64,
    opener: Opener,
    close: tokio::task::AbortHandle,
}

/// The tunnels this process holds, by agent.
#[derive(Default)]
pub struct Tunnels {
    open: std::sync::Mutex<HashMap<String, Held>>,
    next: AtomicU64,
}

impl Tunnels {
    /// The agent's tunnel, if this process holds one.
    pub fn opener(&self, agent: &str) -> Option<Opener> {
        self.open.lock_unpoisoned().get(agent).map(|held| held.opener.clone())
    }

    /// Hold a new tunnel for the agent, closing the one it replaces.
    pub(super) fn insert(&self, agent: &str, opener: Opener, close: tokio::task::AbortHandle) -> u64 {
        let generation = self.next.fetch_add(1, Ordering::Relaxed);
        let replaced = self.open.lock_unpoisoned().insert(agent.to_string(), Held { generation, opener, close });
        if let Some(older) = replaced {
            older.close.abort();
        }
        generation
    }

    /// Forget the agent's tunnel, unless a newer one replaced it.
    pub(super) fn remove(&self, agent: &str, generation: u64) {
        let mut open = self.open.lock_unpoisoned();
        if open.get(agent).is_some_and(|held| held.generation == generation) {
            open.remove(agent);
        }
    }
}
