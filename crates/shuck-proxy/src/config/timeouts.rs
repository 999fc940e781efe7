//! How long a client may take: the TLS handshake, silence on an open connection, and each
//! connection attempt to a backend (kept in the backend section, whose pool uses it).

use std::time::Duration;

use super::section::{OnChange, Section};
use super::{defaults, duration_or, key_err, KeyError, RawFrontend};

/// `handshake_timeout`, `idle_timeout` (`connect_timeout` is the backend pool's).
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    #[serde(serialize_with = "super::ser::duration")]
    pub handshake: Duration,
    #[serde(serialize_with = "super::ser::duration")]
    pub idle: Duration,
}

/// Near `max_connections` (90% of it taken), connections accepted then wait at most this long
/// for their handshake and stay at most this long idle: a crowd of slow or idle connections
/// gives way to new ones sooner.
pub const PRESSURED_HANDSHAKE: Duration = Duration::from_secs(3);
pub const PRESSURED_IDLE: Duration = Duration::from_secs(30);
/// Near `max_connections`, relayed connections idle at least this long may be closed to free
/// slots, the heaviest sources' first (`conn::idle`).
pub const EVICTABLE_AFTER: Duration = Duration::from_secs(5);

impl Timeouts {
    /// The timeouts of a connection accepted near `max_connections`.
    #[must_use]
    pub fn under_pressure(self) -> Timeouts {
        Timeouts {
            handshake: self.handshake.min(PRESSURED_HANDSHAKE),
            idle: self.idle.min(PRESSURED_IDLE),
        }
    }
}

impl Section for Timeouts {
    const KEY: &'static str = "timeouts";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

impl RawFrontend {
    pub(super) fn validate_timeouts(&self) -> Result<Timeouts, KeyError> {
        let t = Timeouts {
            handshake: duration_or(
                "handshake_timeout",
                self.handshake_timeout.as_deref(),
                defaults::HANDSHAKE_TIMEOUT,
            )?,
            idle: duration_or(
                "idle_timeout",
                self.idle_timeout.as_deref(),
                defaults::IDLE_TIMEOUT,
            )?,
        };
        for (key, d) in [("handshake_timeout", t.handshake), ("idle_timeout", t.idle)] {
            if d.is_zero() {
                return Err(key_err(key, "must be longer than 0s"));
            }
        }
        Ok(t)
    }

    pub(super) fn validate_connect_timeout(&self) -> Result<Duration, KeyError> {
        let d = duration_or(
            "connect_timeout",
            self.connect_timeout.as_deref(),
            defaults::CONNECT_TIMEOUT,
        )?;
        if d.is_zero() {
            return Err(key_err("connect_timeout", "must be longer than 0s"));
        }
        Ok(d)
    }
}
