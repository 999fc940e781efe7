//! Per-step accumulators: latency histogram and outcome counters, merged across load threads.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies in microseconds, 1 µs to 10 min at 3 significant digits.
#[derive(Clone)]
pub struct Latency(Histogram<u64>);

const MAX_US: u64 = 600_000_000;

impl Default for Latency {
    fn default() -> Self {
        // 3 significant digits over this range is a fixed, valid configuration.
        Latency(Histogram::new_with_bounds(1, MAX_US, 3).expect("valid histogram bounds"))
    }
}

impl Latency {
    pub fn record(&mut self, us: u64) {
        self.0.saturating_record(us.clamp(1, MAX_US));
    }

    /// Adds `other`'s samples; exact, unlike averaging per-thread percentiles.
    pub fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides, so adding cannot fail.
        self.0.add(&other.0).expect("histograms with equal bounds");
    }

    pub fn count(&self) -> u64 {
        self.0.len()
    }

    pub fn summary(&self) -> LatencySummary {
        let ms = |us: u64| us as f64 / 1000.0;
        if self.0.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            mean: self.0.mean() / 1000.0,
            p50: ms(self.0.value_at_quantile(0.50)),
            p90: ms(self.0.value_at_quantile(0.90)),
            p99: ms(self.0.value_at_quantile(0.99)),
            max: ms(self.0.max()),
        }
    }
}

/// Latency figures in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct LatencySummary {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Why a transaction failed; each kind is counted separately in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Connect,
    Handshake,
    Io,
    Timeout,
    Status,
    Size,
    /// The client had too many transactions in flight and did not start this one.
    Overload,
}

impl Failure {
    pub const ALL: [Failure; 7] = [
        Failure::Connect,
        Failure::Handshake,
        Failure::Io,
        Failure::Timeout,
        Failure::Status,
        Failure::Size,
        Failure::Overload,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Failure::Connect => "connect",
            Failure::Handshake => "handshake",
            Failure::Io => "io",
            Failure::Timeout => "timeout",
            Failure::Status => "status",
            Failure::Size => "size",
            Failure::Overload => "client_overload",
        }
    }
}

/// Everything one load thread learned about one step.
#[derive(Clone, Default)]
pub struct StepAcc {
    pub attempted: u64,
    pub ok: u64,
    pub resumed: u64,
    /// Connections that offered to resume (their session had a completed connection), and
    /// how many of them failed.
    pub offered_resumption: u64,
    pub offered_failed: u64,
    pub bytes: u64,
    pub failures: [u64; Failure::ALL.len()],
    pub latency: Latency,
}

impl StepAcc {
    pub fn failed(&self) -> u64 {
        self.failures.iter().sum()
    }

    pub fn fail(&mut self, f: Failure) {
        self.failures[f as usize] += 1;
    }

    pub fn merge(&mut self, o: &StepAcc) {
        self.attempted += o.attempted;
        self.ok += o.ok;
        self.resumed += o.resumed;
        self.offered_resumption += o.offered_resumption;
        self.offered_failed += o.offered_failed;
        self.bytes += o.bytes;
        for (a, b) in self.failures.iter_mut().zip(o.failures) {
            *a += b;
        }
        self.latency.merge(&o.latency);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_histogram_equals_one_fed_everything() {
        let mut a = Latency::default();
        let mut b = Latency::default();
        let mut all = Latency::default();
        for v in 1..=1000u64 {
            let us = v * 100;
            if v % 3 == 0 {
                a.record(us);
            } else {
                b.record(us);
            }
            all.record(us);
        }
        // The slow tail lives in one thread only: a merge must keep it.
        for _ in 0..20 {
            b.record(2_000_000);
            all.record(2_000_000);
        }
        a.merge(&b);
        assert_eq!(a.count(), 1020);
        assert_eq!(a.summary(), all.summary());
        let s = a.summary();
        assert!((s.max - 2000.0).abs() < 2.0, "max {}", s.max);
        assert!(
            s.p99 > 1000.0,
            "p99 must come from the merged tail: {}",
            s.p99
        );
        // 1020 samples: the 510th is 51 ms.
        assert!((s.p50 - 51.0).abs() < 0.1, "p50 {}", s.p50);
    }

    #[test]
    fn out_of_range_latencies_are_clamped_not_lost() {
        let mut l = Latency::default();
        l.record(0);
        l.record(u64::MAX);
        assert_eq!(l.count(), 2);
        assert!(l.summary().max >= 599_000.0);
    }

    #[test]
    fn step_merge_adds_counters_and_failure_kinds() {
        let mut a = StepAcc {
            attempted: 10,
            ok: 8,
            resumed: 6,
            bytes: 100,
            ..StepAcc::default()
        };
        a.fail(Failure::Timeout);
        a.fail(Failure::Status);
        let mut b = StepAcc {
            attempted: 5,
            ok: 5,
            resumed: 4,
            bytes: 50,
            ..StepAcc::default()
        };
        b.fail(Failure::Timeout);
        a.merge(&b);
        assert_eq!((a.attempted, a.ok, a.resumed, a.bytes), (15, 13, 10, 150));
        assert_eq!(a.failures[Failure::Timeout as usize], 2);
        assert_eq!(a.failed(), 3);
    }

    #[test]
    fn empty_histogram_summarises_to_zero() {
        assert_eq!(Latency::default().summary(), LatencySummary::default());
    }
}
