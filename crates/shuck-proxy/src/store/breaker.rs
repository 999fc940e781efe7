//! The circuit breaker in front of the store's lookups: after `TRIP` failures in a row
//! (timeouts or errors) the worker stops asking for `OPEN_FOR`, then tries again; one line is logged when it
//! opens and one when the store answers again, however many connections arrive meanwhile.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use prometheus_client::metrics::gauge::Gauge;

/// A few slow answers in a row happen on a busy host; a store that is down fails every lookup at
/// once (refused) or after the lookup timeout (black hole): eight in a row cost at most eight
/// timeouts before the breaker opens.
const TRIP: u32 = 8;
const OPEN_FOR: Duration = Duration::from_secs(3);

/// One worker's breaker. Atomics rather than `Cell` because the store is shared through rustls'
/// `Send + Sync` traits; only its worker's thread touches it.
#[derive(Debug)]
pub(crate) struct Breaker {
    failures: AtomicU32,
    /// Nanoseconds after `epoch` until which the store is skipped; 0 when closed.
    open_until: AtomicU64,
    epoch: Instant,
    gauge: Gauge,
    frontend: String,
}

impl Breaker {
    /// A closed breaker. The gauge is the worker's for this frontend, shared with the store a
    /// reload replaced: if that one's breaker was open, the new store starts afresh, and says so.
    pub(crate) fn new(frontend: &str, worker: usize, url: &str, gauge: Gauge) -> Breaker {
        if gauge.set(0) != 0 {
            tracing::info!(
                frontend,
                worker,
                store = url,
                "session store replaced by a reload; resuming from it again"
            );
        }
        Breaker {
            frontend: frontend.to_string(),
            failures: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            epoch: Instant::now(),
            gauge,
        }
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether to ask the store now (closed, or open long enough to try again).
    pub(crate) fn allows(&self, now: Instant) -> bool {
        let until = self.open_until.load(Ordering::Relaxed);
        until == 0 || self.nanos(now) >= until
    }

    /// Counts a failure; true when it opened the breaker (or kept it open).
    pub(crate) fn failed(&self, worker: usize, url: &str, why: &str) -> bool {
        let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        if n < TRIP {
            return false;
        }
        let was_open = self.open_until.load(Ordering::Relaxed) != 0;
        let until = self.nanos(Instant::now() + OPEN_FOR).max(1);
        self.open_until.store(until, Ordering::Relaxed);
        self.gauge.set(1);
        if !was_open {
            tracing::warn!(
                frontend = %self.frontend,
                worker,
                store = url,
                "session store failing ({why}); resuming from it paused, full handshakes meanwhile, retrying every {}s",
                OPEN_FOR.as_secs()
            );
        }
        true
    }

    pub(crate) fn succeeded(&self, worker: usize, url: &str) {
        self.failures.store(0, Ordering::Relaxed);
        if self.open_until.swap(0, Ordering::Relaxed) != 0 {
            self.gauge.set(0);
            tracing::info!(frontend = %self.frontend, worker, store = url, "session store answering again");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_repeated_failures_and_closes_on_success() {
        let gauge = Gauge::default();
        let b = Breaker::new("web", 0, "redis://x", gauge.clone());
        let now = Instant::now();
        for _ in 1..TRIP {
            b.failed(0, "redis://x", "timed out");
        }
        assert!(b.allows(now), "fewer than TRIP failures are not enough");
        b.failed(0, "redis://x", "timed out");
        assert!(!b.allows(Instant::now()), "open");
        assert_eq!(gauge.get(), 1);
        assert!(
            b.allows(Instant::now() + OPEN_FOR + Duration::from_millis(1)),
            "tries again later"
        );
        b.succeeded(0, "redis://x");
        assert!(b.allows(Instant::now()));
        assert_eq!(gauge.get(), 0);
    }

    #[test]
    fn a_store_replaced_while_its_breaker_was_open_starts_closed() {
        let gauge = Gauge::default();
        let old = Breaker::new("web", 0, "redis://old", gauge.clone());
        for _ in 0..TRIP {
            old.failed(0, "redis://old", "timed out");
        }
        assert_eq!(gauge.get(), 1);
        let new = Breaker::new("web", 0, "redis://new", gauge.clone());
        assert_eq!(gauge.get(), 0, "the gauge describes the new store");
        assert!(new.allows(Instant::now()));
    }
}
