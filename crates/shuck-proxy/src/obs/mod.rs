//! Logging: the filter and queue for log lines (`logging`) and the per-connection log rate limit
//! (`log_limit`). The bottom of the engine: every folder may log, none of this imports them.

pub(crate) mod log_limit;
pub mod logging;
