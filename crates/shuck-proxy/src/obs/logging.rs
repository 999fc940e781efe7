//! What the log subscriber keeps of libraries' lines (the binary's filter asks these).
//!
//! Libraries' lines (rustls', through the `log` bridge) are about one connection, name neither
//! frontend nor client, and any client can trigger them at will (an IP address as SNI, a warning
//! alert; rustls logs those as warnings). They are written only at debug, within a per-worker
//! budget of their own, so they never use up the one shuck's own warnings are written under.
//! The metrics count what matters of them (handshake failures by reason).

use std::sync::LazyLock;
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use tracing::Metadata;

use crate::obs::log_limit::LogBudget;

/// shuck's own events have their module path as target: `shuck_proxy::…`, `shuck::…`,
/// `shuck_bench::…`. Libraries' have theirs, or `log` for those bridged from the `log` crate.
const OURS: &str = "shuck";

pub fn is_ours(meta: &Metadata<'_>) -> bool {
    meta.target().starts_with(OURS)
}

/// Log lines dropped because the log writer's queue was full (whoever reads standard error lagged
/// behind): `shuck_log_lines_dropped_total`. The binary's log writer counts into it; one per
/// process, whatever `Metrics` a test builds.
pub static LINES_DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

thread_local! {
    static LIBRARY_BUDGET: LogBudget = const { LogBudget::new() };
}

/// Whether one more library line may be written now (call once per event: it spends the
/// budget). What is left out is not reported: this runs inside the subscriber's filtering.
pub fn library_line_allowed() -> bool {
    LIBRARY_BUDGET.with(|b| b.take(Instant::now()).0)
}

thread_local! {
    static PANIC_BUDGET: LogBudget = const { LogBudget::new() };
}

/// Replaces the standard panic report (several lines, dozens with a backtrace) with one error
/// line per panic, within a per-thread budget. A panic is a bug, but if a client can trigger one
/// (a connection task's panic ends only that connection) it must not also be able to flood the
/// log. With `RUST_BACKTRACE` set the line carries the backtrace, on the same line. Safe inside
/// the hook because the log writer never waits: it hands the line to a queue (see the binary's
/// `logging`), where a writer behind a mutex would deadlock on a panic raised while it is held.
pub fn panics_as_lines() {
    std::panic::set_hook(Box::new(|info| {
        let (allowed, left_out) = PANIC_BUDGET.with(|b| b.take(Instant::now()));
        if let Some((count, since)) = left_out {
            let seconds = since.elapsed().as_secs();
            tracing::error!(count, seconds, "panic reports were left out (rate limit)");
        }
        if !allowed {
            return;
        }
        let payload = info.payload();
        let message = payload
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
            .unwrap_or("-");
        let location = info
            .location()
            .map_or_else(String::new, |l| format!("{}:{}", l.file(), l.line()));
        let thread = std::thread::current();
        let thread = thread.name().unwrap_or("-");
        // `?`: a message or backtrace with line breaks stays on one line.
        let backtrace = std::backtrace::Backtrace::capture();
        let summary = "a task panicked (a bug in shuck: please report it)";
        if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
            tracing::error!(thread, location, panic = ?message, backtrace = ?backtrace, "{summary}");
        } else {
            tracing::error!(thread, location, panic = ?message, "{summary}");
        }
    }));
}
