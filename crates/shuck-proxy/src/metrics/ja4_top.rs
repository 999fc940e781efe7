//! The most frequent JA4 fingerprints of each frontend, in bounded memory and bounded series:
//! each worker keeps 32 counters per frontend (the space-saving algorithm: a new fingerprint
//! takes over the smallest counter, plus one, and remembers that it may have inherited that
//! much), and a scrape sums what each worker can vouch for (count less inherited) and exports
//! the ten largest of at least 2 as `shuck_ja4_top_connections{frontend,ja4}`: a lower bound,
//! exact for a fingerprint that never left a worker's counters. Fingerprints seen once, however
//! many a client makes up, are never exported; at most ten series per frontend at a time.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::proto::ja4::Ja4;

/// Counters each worker keeps per frontend.
const SLOTS: usize = 32;
/// Fingerprints exported per frontend.
const SHOWN: usize = 10;

/// One worker's counters for one frontend (its own lock: workers never meet on it).
#[derive(Debug, Default)]
pub(crate) struct Ja4Counts(Mutex<Vec<Counted>>);

/// A fingerprint, its count, and how much of the count it may have inherited.
#[derive(Debug, Clone, Copy)]
struct Counted {
    ja4: Ja4,
    count: u64,
    inherited: u64,
}

impl Ja4Counts {
    /// Counts one connection with fingerprint `j`.
    pub(crate) fn observe(&self, j: &Ja4) {
        let mut v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(e) = v.iter_mut().find(|e| e.ja4 == *j) {
            e.count += 1;
        } else if v.len() < SLOTS {
            v.push(Counted {
                ja4: *j,
                count: 1,
                inherited: 0,
            });
        } else if let Some(least) = v.iter_mut().min_by_key(|e| e.count) {
            *least = Counted {
                ja4: *j,
                count: least.count + 1,
                inherited: least.count,
            };
        }
    }

    /// Each fingerprint with the count this worker can vouch for.
    fn snapshot(&self) -> Vec<(Ja4, u64)> {
        let v = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        v.iter().map(|e| (e.ja4, e.count - e.inherited)).collect()
    }
}

/// Every worker's counters, by frontend.
#[derive(Debug, Default)]
pub(crate) struct Ja4Top(Mutex<Vec<(String, Arc<Ja4Counts>)>>);

impl Ja4Top {
    /// New counters for one worker of `frontend` (at start, or when a reload adds it).
    pub(crate) fn counts(&self, frontend: &str) -> Arc<Ja4Counts> {
        let c = Arc::new(Ja4Counts::default());
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((frontend.to_string(), c.clone()));
        c
    }

    /// Each frontend's ten most frequent fingerprints, summed over the workers, largest first.
    fn top(&self) -> Vec<(String, Vec<(Ja4, u64)>)> {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Counters no worker holds any more (a reload removed their frontend) are forgotten.
        all.retain(|(_, c)| Arc::strong_count(c) > 1);
        let mut by_frontend: Vec<(String, Vec<(Ja4, u64)>)> = Vec::new();
        for (fe, counts) in all.iter() {
            let i = if let Some(i) = by_frontend.iter().position(|(f, _)| f == fe) {
                i
            } else {
                by_frontend.push((fe.clone(), Vec::new()));
                by_frontend.len() - 1
            };
            let merged = &mut by_frontend[i].1;
            for (j, n) in counts.snapshot() {
                match merged.iter_mut().find(|e| e.0 == j) {
                    Some(e) => e.1 += n,
                    None => merged.push((j, n)),
                }
            }
        }
        for (_, v) in &mut by_frontend {
            v.retain(|e| e.1 >= 2);
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.as_str().cmp(b.0.as_str())));
            v.truncate(SHOWN);
        }
        by_frontend
    }
}

/// Writes the top fingerprints at each scrape.
#[derive(Debug)]
pub(super) struct Ja4TopCollector(pub(super) Arc<Ja4Top>);

impl Collector for Ja4TopCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let family: Family<Vec<(&'static str, String)>, Gauge> = Family::default();
        for (fe, top) in self.0.top() {
            for (j, n) in top {
                let labels = vec![("frontend", fe.clone()), ("ja4", j.as_str().to_string())];
                family
                    .get_or_create(&labels)
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        family.encode(encoder.encode_descriptor(
            "ja4_top_connections",
            "Connections by JA4 fingerprint since start, the ten most frequent per frontend seen at least twice (a lower bound from 32 space-saving counters per worker, exact for a fingerprint that never left them); counted where the fingerprint is taken: with deny_ja4, log_connections or the ja4 PROXY TLV",
            None,
            family.metric_type(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ja4(n: usize) -> Ja4 {
        let s = format!("t13d1516h2_8daaf6152771_{n:012x}");
        Ja4::from_str_for_tests(&s)
    }

    #[test]
    fn counters_no_worker_holds_are_forgotten() {
        let top = Ja4Top::default();
        let kept = top.counts("kept");
        let gone = top.counts("gone");
        for _ in 0..3 {
            kept.observe(&ja4(1));
            gone.observe(&ja4(1));
        }
        drop(gone);
        let t = top.top();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].0, "kept");
    }

    #[test]
    fn the_frequent_survive_a_flood_of_one_offs_in_bounded_slots() {
        let top = Ja4Top::default();
        let (w0, w1) = (top.counts("web"), top.counts("web"));
        for _ in 0..500 {
            w0.observe(&ja4(1));
            w1.observe(&ja4(1));
        }
        for _ in 0..300 {
            w0.observe(&ja4(2));
        }
        // 2,000 fingerprints seen once each.
        for n in 100..2_100 {
            w1.observe(&ja4(n));
        }
        assert!(w1.snapshot().len() <= SLOTS);
        let t = top.top();
        assert_eq!(t.len(), 1);
        let shown = &t[0].1;
        assert_eq!(shown.len(), 2, "one-offs are not shown: {shown:?}");
        assert_eq!(shown[0], (ja4(1), 1000));
        assert_eq!(shown[1], (ja4(2), 300));
    }
}
