//! What the log subscriber keeps of libraries' lines (the binary's filter asks these).
//!
//! Libraries' lines (rustls', through the `log` bridge) are about one connection, name neither
//! frontend nor client, and any client can trigger them at will (an IP address as SNI, a warning
//! alert; rustls logs those as warnings). They are written only at debug, within a per-worker
//! budget of their own, so they never use up the one shuck's own warnings are written under.
//! The metrics count what matters of them (handshake failures by reason).

use std::time::Instant;

use tracing::Metadata;

use crate::log_limit::LogBudget;

/// shuck's own events have their module path as target: `shuck_proxy::…`, `shuck::…`,
/// `shuck_bench::…`. Libraries' have theirs, or `log` for those bridged from the `log` crate.
const OURS: &str = "shuck";

pub fn is_ours(meta: &Metadata<'_>) -> bool {
    meta.target().starts_with(OURS)
}

thread_local! {
    static LIBRARY_BUDGET: LogBudget = const { LogBudget::new() };
}

/// Whether one more library line may be written now (call once per event: it spends the
/// budget). What is left out is not reported: this runs inside the subscriber's filtering.
pub fn library_line_allowed() -> bool {
    LIBRARY_BUDGET.with(|b| b.take(Instant::now()).0)
}
