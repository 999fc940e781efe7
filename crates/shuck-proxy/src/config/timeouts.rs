//! How long a client may take: the TLS handshake, silence on an open connection, and each
//! connection attempt to a backend.

use std::time::Duration;

use super::{defaults, duration_or, key_err, KeyError, RawFrontend};

pub(super) struct Timeouts {
    pub handshake: Duration,
    pub idle: Duration,
    pub connect: Duration,
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
            connect: duration_or(
                "connect_timeout",
                self.connect_timeout.as_deref(),
                defaults::CONNECT_TIMEOUT,
            )?,
        };
        for (key, d) in [
            ("handshake_timeout", t.handshake),
            ("idle_timeout", t.idle),
            ("connect_timeout", t.connect),
        ] {
            if d.is_zero() {
                return Err(key_err(key, "must be longer than 0s"));
            }
        }
        Ok(t)
    }
}
