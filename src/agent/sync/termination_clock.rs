//! How long each termination has been running, so that one stuck behind a finalizer nobody
//! removes is said out loud instead of showing `Terminating` for ever. In memory: after a
//! restart the clock starts again, and a stuck termination is reported a timeout later.

use super::workspace::WorkspaceKey;
use jiff::{SignedDuration, Timestamp};
use std::collections::{HashMap, HashSet};

#[derive(Debug, Default)]
pub struct TerminationClock {
    started: HashMap<WorkspaceKey, Timestamp>,
    /// Reported as stuck, once each.
    stuck: HashSet<WorkspaceKey>,
}

impl TerminationClock {
    /// Track exactly the terminations still running; returns those that have just passed
    /// `timeout`, each once.
    pub fn tick<'a>(
        &mut self,
        running: impl IntoIterator<Item = &'a WorkspaceKey>,
        now: Timestamp,
        timeout: SignedDuration,
    ) -> Vec<WorkspaceKey> {
        let running: HashSet<&WorkspaceKey> = running.into_iter().collect();
        self.started.retain(|key, _| running.contains(key));
        self.stuck.retain(|key| running.contains(key));
        let mut newly = Vec::new();
        for key in running {
            let started = *self.started.entry(key.clone()).or_insert(now);
            let overdue = now.duration_since(started) >= timeout;
            if overdue && self.stuck.insert(key.clone()) {
                newly.push(key.clone());
            }
        }
        newly.sort();
        newly
    }

    /// The terminations past the timeout, in order.
    pub fn stuck(&self) -> Vec<&WorkspaceKey> {
        let mut stuck: Vec<_> = self.stuck.iter().collect();
        stuck.sort();
        stuck
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_termination_past_the_timeout_is_reported_once_and_forgotten_when_done() {
        let mut clock = TerminationClock::default();
        let (a, b) = (WorkspaceKey::new("ns-a", "a"), WorkspaceKey::new("ns-b", "b"));
        let t0 = Timestamp::UNIX_EPOCH;
        let timeout = SignedDuration::from_mins(10);
        let at = |mins: i64| t0.checked_add(SignedDuration::from_mins(mins)).unwrap();
        assert!(clock.tick([&a], t0, timeout).is_empty());
        assert!(clock.tick([&a, &b], at(5), timeout).is_empty());
        assert_eq!(clock.tick([&a, &b], at(10), timeout), vec![a.clone()]);
        assert!(clock.tick([&a, &b], at(11), timeout).is_empty(), "once");
        assert_eq!(clock.stuck(), vec![&a]);
        assert_eq!(clock.tick([&b], at(15), timeout), vec![b.clone()], "a is done; b's clock started at 5");
        assert_eq!(clock.stuck(), vec![&b]);
        assert!(clock.tick([], at(16), timeout).is_empty());
        assert!(clock.stuck().is_empty());
    }
}
