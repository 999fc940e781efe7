//! Which backend a new connection tries first. A policy only orders candidates; health (the
//! cooldown after a failed connect) is the pool's business, which asks the policy once among
//! the healthy backends and, if none is left, among the rest.

use std::cell::Cell;

use crate::config::BackendPolicy as Policy;

/// A policy with its cursor: the backend after the last one chosen comes first in ring order.
#[derive(Debug, Default)]
pub(crate) struct Chooser {
    policy: Policy,
    next: Cell<usize>,
}

impl Chooser {
    pub(crate) fn new(policy: Policy) -> Chooser {
        Chooser {
            policy,
            next: Cell::new(0),
        }
    }

    /// The backend to try among `candidates` (bit i = backend i may be tried), given how many
    /// connections are open to each of the `open.len()` backends.
    pub(crate) fn pick(&self, candidates: u128, open: &[Cell<u32>]) -> Option<usize> {
        let n = open.len();
        let start = self.next.get();
        let mut ring = (0..n)
            .map(|k| (start + k) % n)
            .filter(|&i| candidates & (1 << i) != 0);
        match self.policy {
            Policy::RoundRobin => ring.next(),
            // `min_by_key` keeps the first of equals: ties go in ring order.
            Policy::LeastConnections => ring.min_by_key(|&i| open[i].get()),
        }
    }

    /// Backend `i` took the connection: next time start after it, so a down backend's share is
    /// spread over the healthy ones instead of all going to its successor.
    pub(crate) fn chose(&self, i: usize, n: usize) {
        self.next.set((i + 1) % n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(counts: &[u32]) -> Vec<Cell<u32>> {
        counts.iter().map(|&c| Cell::new(c)).collect()
    }

    #[test]
    fn round_robin_goes_in_turn_from_the_cursor() {
        let c = Chooser::new(Policy::RoundRobin);
        let o = open(&[5, 0, 0]);
        assert_eq!(c.pick(0b111, &o), Some(0), "open counts do not matter");
        c.chose(0, 3);
        assert_eq!(c.pick(0b111, &o), Some(1));
        assert_eq!(
            c.pick(0b101, &o),
            Some(2),
            "skips a backend that is not a candidate"
        );
        assert_eq!(c.pick(0, &o), None);
    }

    #[test]
    fn least_connections_takes_the_least_loaded_ties_in_turn() {
        let c = Chooser::new(Policy::LeastConnections);
        let o = open(&[2, 1, 1]);
        assert_eq!(c.pick(0b111, &o), Some(1));
        c.chose(1, 3);
        assert_eq!(c.pick(0b111, &o), Some(2), "a tie: the next in turn");
        assert_eq!(c.pick(0b011, &o), Some(1), "the least loaded candidate");
    }
}
