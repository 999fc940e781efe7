//! Rate limit for per-connection warnings. A scan or a broken client fleet can cause thousands of
//! failed handshakes a second; logging each would cost more than refusing them and bury the
//! lines that matter. Each worker logs at most `PER_SECOND` such lines a second and then one line
//! saying how many it left out. The metrics still count every failure.

use std::cell::Cell;
use std::time::{Duration, Instant};

pub(crate) const PER_SECOND: u32 = 20;

/// A budget of lines per one-second window.
#[derive(Debug)]
pub(crate) struct LogBudget {
    window: Cell<Option<Instant>>,
    used: Cell<u32>,
    suppressed: Cell<u64>,
}

impl LogBudget {
    pub(crate) const fn new() -> LogBudget {
        LogBudget {
            window: Cell::new(None),
            used: Cell::new(0),
            suppressed: Cell::new(0),
        }
    }

    /// Whether a line may be logged at `now`, and, when a new window opens after lines were
    /// left out, how many and since when (to report once).
    pub(crate) fn take(&self, now: Instant) -> (bool, Option<(u64, Instant)>) {
        let mut reported = None;
        let window = self.window.get();
        if window.is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1)) {
            let suppressed = self.suppressed.replace(0);
            if let (Some(w), true) = (window, suppressed > 0) {
                reported = Some((suppressed, w));
            }
            self.window.set(Some(now));
            self.used.set(0);
        }
        if self.used.get() < PER_SECOND {
            self.used.set(self.used.get() + 1);
            (true, reported)
        } else {
            self.suppressed.set(self.suppressed.get() + 1);
            (false, reported)
        }
    }
}

impl Default for LogBudget {
    fn default() -> Self {
        Self::new()
    }
}

thread_local! {
    // One budget per worker thread: no shared state.
    static BUDGET: LogBudget = const { LogBudget::new() };
}

/// True when this worker may log another per-connection warning now. First logs how many were
/// left out since the last window with omissions began, if any.
pub(crate) fn allow() -> bool {
    let now = Instant::now();
    let (ok, reported) = BUDGET.with(|b| b.take(now));
    if let Some((suppressed, since)) = reported {
        let seconds = now.duration_since(since).as_secs();
        tracing::warn!(
            suppressed,
            seconds,
            "per-connection warnings were left out (rate limit); metrics count every failure"
        );
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_a_burst_then_reports_what_it_left_out() {
        let b = LogBudget::new();
        let t0 = Instant::now();
        for _ in 0..PER_SECOND {
            assert_eq!(b.take(t0), (true, None));
        }
        for _ in 0..5 {
            assert_eq!(b.take(t0 + Duration::from_millis(500)), (false, None));
        }
        // Reported with the start of the window they were left out of, however late.
        assert_eq!(
            b.take(t0 + Duration::from_secs(3600)),
            (true, Some((5, t0)))
        );
        assert_eq!(b.take(t0 + Duration::from_secs(3601)), (true, None));
    }
}
