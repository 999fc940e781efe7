//! Wall-clock time as certificates, OCSP responses and renewals count it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix seconds now (0 if the clock is before 1970): the one clock helper; tickets and the
/// session cache take it as `u64` (`unsigned_abs`, exact since it is never negative).
pub(crate) fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
