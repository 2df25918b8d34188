//! One apply per workspace at a time, and the newest intent lands last. A new action for a
//! workspace aborts the one in flight (or its retries), then waits for its turn: the old
//! future is dropped before the new one sends anything, so a slow apply of cycle N can never
//! land after cycle N+1's.

use super::sync::workspace::WorkspaceKey;
use crate::runtime::LockExt;
use futures::future::{AbortHandle, AbortRegistration, Abortable};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

struct Intent {
    serial: u64,
    abort: AbortHandle,
    turn: Arc<tokio::sync::Mutex<()>>,
    /// What it applies (`digest`); None for a termination or a refusal.
    carries: Option<[u8; 32]>,
}

/// What an apply applies: its config and pull secrets, digested.
pub fn digest(config: &str, pull_secrets: &[crate::protocol::ImagePullSecret]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(config.as_bytes());
    for secret in pull_secrets {
        hasher.update([0]);
        hasher.update(secret.namespace.as_bytes());
        hasher.update([b'/']);
        hasher.update(secret.name.as_bytes());
    }
    hasher.finalize().into()
}

/// What a started action holds: its serial, the registration its future is made abortable
/// with, and the workspace's turn to wait for.
pub struct Started {
    pub serial: u64,
    registration: AbortRegistration,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Started {
    /// Run `work` once the workspace's turn comes; None when a newer intent aborted it.
    pub async fn run<T>(self, work: impl Future<Output = T>) -> Option<T> {
        let turn = self.turn;
        let in_turn = async move {
            let _turn = turn.lock().await;
            work.await
        };
        Abortable::new(in_turn, self.registration).await.ok()
    }
}

#[derive(Default)]
pub struct Intents {
    inner: Mutex<HashMap<WorkspaceKey, Intent>>,
    next_serial: std::sync::atomic::AtomicU64,
}

impl Intents {
    /// Whether the workspace's intent in flight (or retrying) applies exactly this: the same
    /// config sent again is no newer intent, and must not restart it. The digest is computed
    /// only for a workspace with an intent: a full answer's configs are not hashed for nothing.
    pub fn carries(&self, key: &WorkspaceKey, digest: impl FnOnce() -> [u8; 32]) -> bool {
        let inner = self.inner.lock_unpoisoned();
        let Some(carried) = inner.get(key).and_then(|i| i.carries) else { return false };
        drop(inner);
        carried == digest()
    }

    /// The workspace's newest intent: aborts the one before it.
    pub fn start(&self, key: &WorkspaceKey, carries: Option<[u8; 32]>) -> Started {
        let serial = self.next_serial.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (abort, registration) = AbortHandle::new_pair();
        let mut inner = self.inner.lock_unpoisoned();
        let turn = match inner.remove(key) {
            Some(previous) => {
                previous.abort.abort();
                previous.turn
            }
            None => Arc::default(),
        };
        inner.insert(key.clone(), Intent { serial, abort, turn: turn.clone(), carries });
        Started { serial, registration, turn }
    }

    /// Hand a still-current intent over to a task of its own (its retries): a new abort handle,
    /// the same serial and turn. None when a newer intent has replaced it.
    pub fn hand_over(&self, key: &WorkspaceKey, serial: u64) -> Option<Started> {
        let mut inner = self.inner.lock_unpoisoned();
        let intent = inner.get_mut(key).filter(|i| i.serial == serial)?;
        let (abort, registration) = AbortHandle::new_pair();
        intent.abort = abort;
        Some(Started { serial, registration, turn: intent.turn.clone() })
    }

    /// Whether `serial` is still the workspace's newest intent.
    pub fn is_current(&self, key: &WorkspaceKey, serial: u64) -> bool {
        self.inner.lock_unpoisoned().get(key).is_some_and(|i| i.serial == serial)
    }

    /// The intent is done; forget it unless a newer one replaced it.
    pub fn finish(&self, key: &WorkspaceKey, serial: u64) {
        let mut inner = self.inner.lock_unpoisoned();
        if inner.get(key).is_some_and(|i| i.serial == serial) {
            inner.remove(key);
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock_unpoisoned().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_newer_intent_aborts_the_older_and_runs_after_it() {
        let intents = Arc::new(Intents::default());
        let key = WorkspaceKey::new("ns", "ws");
        let order = Arc::new(Mutex::new(Vec::new()));
        let run = |label: &'static str, delay: u64| {
            let (intents, order, key) = (intents.clone(), order.clone(), key.clone());
            let started = intents.start(&key, None);
            async move {
                let serial = started.serial;
                let outcome = started
                    .run(async {
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        order.lock().unwrap().push(label);
                    })
                    .await;
                intents.finish(&key, serial);
                outcome.is_some()
            }
        };
        let slow = tokio::spawn(run("slow, cycle N", 300));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let fast = tokio::spawn(run("fast, cycle N+1", 10));
        assert!(!slow.await.unwrap(), "the older apply was aborted");
        assert!(fast.await.unwrap());
        assert_eq!(*order.lock().unwrap(), ["fast, cycle N+1"]);
        assert!(intents.is_empty(), "nothing is kept once done");
    }
}
