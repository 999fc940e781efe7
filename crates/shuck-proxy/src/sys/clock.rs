//! Wall-clock time as certificates, OCSP responses and renewals count it, and a monotonic
//! clock an atomic can hold.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds now (0 if the clock is before 1970): the one clock helper; tickets and the
/// session cache take it as `u64` (`unsigned_abs`, exact since it is never negative).
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Milliseconds on a monotonic clock that starts at the first call: for times kept in atomics
/// (when a backend last failed), compared with each other only.
pub(crate) fn monotonic_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}
