//! What operators see: metrics (and the HTTP endpoint serving them), logging, the per-connection log rate limit.

pub(crate) mod log_limit;
pub mod logging;
pub(crate) mod metrics;
