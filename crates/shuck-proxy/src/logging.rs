//! What the log subscriber keeps of libraries' lines (the binary installs [`keep`] as a filter).

use tracing::Metadata;

/// shuck's own events have their module path as target: `shuck_proxy::…`, `shuck::…`,
/// `shuck_bench::…`. Libraries' have theirs, or `log` for those bridged from the `log` crate
/// (rustls logs through it).
const OURS: &str = "shuck";

/// Whether to write an event the level filter let through. shuck's own are all kept. Libraries'
/// lines are about one connection, name neither frontend nor client, and any client can trigger
/// them at will (an IP address as SNI, a warning alert; rustls logs those as warnings): they are
/// written only when the log level is debug (`debug`), and then within the worker's rate limit.
/// The metrics count what matters of them (handshake failures by reason).
pub fn keep(meta: &Metadata<'_>, debug: bool) -> bool {
    meta.target().starts_with(OURS) || (debug && crate::log_limit::allow())
}
