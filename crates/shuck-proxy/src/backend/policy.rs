//! Which backend a new connection tries first. A policy only orders candidates; health (the
//! cooldown after a failed connect) is the pool's business, which asks the policy once among
//! the healthy backends and, if none is left, among the rest.

use std::cell::Cell;

use crate::config::BackendPolicy as Policy;

/// A policy with its cursor over a schedule: each backend appears in it as many times as its
/// weight, spread out (smooth weighted round-robin, as nginx orders its upstreams), and the
/// entry after the last one chosen comes first. With every weight 1 the schedule is the backends
/// in order.
#[derive(Debug, Default)]
pub(crate) struct Chooser {
    policy: Policy,
    /// Backend indices (at most 128 backends).
    schedule: Vec<u8>,
    weights: Vec<u32>,
    next: Cell<usize>,
    /// Where the last pick was found in the schedule.
    picked_at: Cell<usize>,
}

/// The smooth weighted round-robin order of backends with these weights: at each step every
/// backend gains its weight, the one with the most is taken and loses the total.
fn schedule(weights: &[u32]) -> Vec<u8> {
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    for _ in 0..total {
        for (c, &w) in current.iter_mut().zip(weights) {
            *c += i64::from(w);
        }
        // `max_by_key` takes the last of equals: reversed, ties go to the lower index.
        let Some(best) = (0..weights.len()).rev().max_by_key(|&i| current[i]) else {
            break;
        };
        current[best] -= total;
        out.push(u8::try_from(best).unwrap_or(u8::MAX));
    }
    out
}

impl Chooser {
    pub(crate) fn new(policy: Policy, weights: &[u32]) -> Chooser {
        Chooser {
            policy,
            schedule: schedule(weights),
            weights: weights.to_vec(),
            next: Cell::new(0),
            picked_at: Cell::new(0),
        }
    }

    /// The backend to try among `candidates` (bit i = backend i may be tried), given how many
    /// connections are open to each of the `open.len()` backends. Least connections compares
    /// open connections per unit of weight.
    pub(crate) fn pick(&self, candidates: u128, open: &[Cell<u32>]) -> Option<usize> {
        let n = self.schedule.len();
        let start = self.next.get();
        let mut ring = (0..n)
            .map(|k| (start + k) % n)
            .filter(|&p| candidates & (1 << self.schedule[p]) != 0);
        let at = match self.policy {
            Policy::RoundRobin => ring.next(),
            // `min_by` keeps the first of equals: ties go in schedule order. open/weight is
            // compared as open_a * weight_b against open_b * weight_a.
            Policy::LeastConnections => ring.min_by(|&a, &b| {
                let (i, j) = (usize::from(self.schedule[a]), usize::from(self.schedule[b]));
                let load =
                    |k: usize, w: usize| u64::from(open[k].get()) * u64::from(self.weights[w]);
                load(i, j).cmp(&load(j, i))
            }),
        }?;
        self.picked_at.set(at);
        Some(usize::from(self.schedule[at]))
    }

    /// Backend `i` took the connection: next time start after where it was picked, so a down
    /// backend's share is spread over the healthy ones instead of all going to its successor.
    pub(crate) fn chose(&self, i: usize, _n: usize) {
        let n = self.schedule.len();
        if n == 0 {
            return;
        }
        let picked = self.picked_at.get() % n;
        // Where `i` was picked; else (chosen without a pick) its next place from the cursor.
        let at = if usize::from(self.schedule[picked]) == i {
            Some(picked)
        } else {
            let start = self.next.get();
            (0..n)
                .map(|k| (start + k) % n)
                .find(|&p| usize::from(self.schedule[p]) == i)
        };
        if let Some(at) = at {
            self.next.set((at + 1) % n);
        }
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
        let c = Chooser::new(Policy::RoundRobin, &[1, 1, 1]);
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
        let c = Chooser::new(Policy::LeastConnections, &[1, 1, 1]);
        let o = open(&[2, 1, 1]);
        assert_eq!(c.pick(0b111, &o), Some(1));
        c.chose(1, 3);
        assert_eq!(c.pick(0b111, &o), Some(2), "a tie: the next in turn");
        assert_eq!(c.pick(0b011, &o), Some(1), "the least loaded candidate");
    }

    #[test]
    fn weights_share_connections_in_proportion_and_spread_out() {
        assert_eq!(schedule(&[1, 1, 1]), [0, 1, 2]);
        assert_eq!(schedule(&[5, 1, 1]), [0, 0, 1, 0, 2, 0, 0]);
        let c = Chooser::new(Policy::RoundRobin, &[3, 1]);
        let o = open(&[0, 0]);
        let mut got = Vec::new();
        for _ in 0..8 {
            let i = c.pick(0b11, &o).unwrap();
            c.chose(i, 2);
            got.push(i);
        }
        assert_eq!(got.iter().filter(|&&i| i == 0).count(), 6, "{got:?}");
        assert_eq!(got, [0, 0, 1, 0, 0, 0, 1, 0]);
        // Least connections per unit of weight: 4 open on weight 3 is less loaded than 2 on 1.
        let c = Chooser::new(Policy::LeastConnections, &[3, 1]);
        assert_eq!(c.pick(0b11, &open(&[4, 2])), Some(0));
        assert_eq!(c.pick(0b11, &open(&[7, 2])), Some(1));
    }
}
