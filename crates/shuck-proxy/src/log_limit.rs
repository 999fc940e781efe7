//! Rate limit for per-connection warnings. A scan or a broken client fleet can cause thousands of
//! failed handshakes a second; logging each would cost more than refusing them and bury the
//! lines that matter. Each worker logs at most `PER_SECOND` such lines a second and then one line
//! saying how many it left out. The metrics still count every failure.

use std::cell::Cell;
use std::time::{Duration, Instant};

pub const PER_SECOND: u32 = 20;

/// A budget of lines per one-second window.
#[derive(Debug)]
pub struct LogBudget {
    window: Cell<Option<Instant>>,
    used: Cell<u32>,
    suppressed: Cell<u64>,
}

impl LogBudget {
    pub const fn new() -> LogBudget {
        LogBudget {
            window: Cell::new(None),
            used: Cell::new(0),
            suppressed: Cell::new(0),
        }
    }

    /// Whether a line may be logged at `now`, and how many lines were suppressed in the
    /// previous window (to report once, when a new window opens).
    pub fn take(&self, now: Instant) -> (bool, u64) {
        let mut reported = 0;
        let fresh = self
            .window
            .get()
            .is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1));
        if fresh {
            self.window.set(Some(now));
            self.used.set(0);
            reported = self.suppressed.replace(0);
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

/// True when this worker may log another per-connection warning now. Logs the number of lines
/// left out in the previous second, if any.
pub fn allow() -> bool {
    let (ok, suppressed) = BUDGET.with(|b| b.take(Instant::now()));
    if suppressed > 0 {
        tracing::warn!(
            suppressed,
            "per-connection warnings left out in the last second (see metrics for every failure)"
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
            assert_eq!(b.take(t0), (true, 0));
        }
        for _ in 0..5 {
            assert_eq!(b.take(t0 + Duration::from_millis(500)), (false, 0));
        }
        assert_eq!(b.take(t0 + Duration::from_secs(1)), (true, 5));
        assert_eq!(b.take(t0 + Duration::from_millis(1001)), (true, 0));
    }
}
