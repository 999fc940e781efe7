//! ACME Renewal Information (RFC 9773): when the CA's directory offers `renewalInfo`, the
//! renewal falls at a point of the window the CA suggests for the certificate (chosen by the
//! host's random fraction, as the RFC asks), asked again after the CA's Retry-After (kept
//! between a minute and six hours), and the new order names the certificate it `replaces`.
//! Without it, or when the CA cannot be asked, the renewal falls at two thirds of the lifetime.

use std::time::Duration;

use instant_acme::{CertificateIdentifier, RenewalInfo};
use rustls::pki_types::Der;

use super::state::Stored;

/// The bounds on how long an ARI answer is used before asking again.
const MIN_RECHECK: Duration = Duration::from_secs(60);
const MAX_RECHECK: Duration = Duration::from_secs(6 * 3600);

/// The certificate's identifier for its CA's renewal information, when it has an Authority Key
/// Identifier.
pub(super) fn identifier(stored: &Stored) -> Option<CertificateIdentifier<'static>> {
    let (aki, serial) = stored.ari.as_ref()?;
    Some(
        CertificateIdentifier::new(Der::from(aki.as_slice()), Der::from(serial.as_slice()))
            .into_owned(),
    )
}

/// The point of the suggested window at `fraction` (in [0, 1)), Unix seconds.
pub(super) fn due_in_window(info: &RenewalInfo, fraction: f64) -> i64 {
    let start = info.suggested_window.start.unix_timestamp();
    let end = info.suggested_window.end.unix_timestamp().max(start);
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_precision_loss,
        reason = "a window of seconds, far within an f64's exact range"
    )]
    let offset = ((end - start) as f64 * fraction) as i64;
    start + offset
}

/// How long an answer holds, from the CA's Retry-After.
pub(super) fn recheck_after(retry: Duration) -> Duration {
    retry.clamp(MIN_RECHECK, MAX_RECHECK)
}

/// What the schedule knows of one certificate's window.
#[derive(Debug, Clone)]
pub(super) struct Known {
    /// The certificate it is about (its serial).
    serial: Vec<u8>,
    /// The renewal time the window gives, or `None`: the CA offers no ARI (or could not be
    /// asked), use two thirds of the lifetime.
    pub due: Option<i64>,
    /// Unix seconds after which the CA is asked again.
    recheck_at: i64,
}

impl Known {
    pub(super) fn new(stored: &Stored, due: Option<i64>, now: i64, recheck: Duration) -> Known {
        let serial = stored
            .ari
            .as_ref()
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        Known {
            serial,
            due,
            recheck_at: now + i64::try_from(recheck.as_secs()).unwrap_or(i64::MAX),
        }
    }

    /// Whether this still answers for `stored` at `now`.
    pub(super) fn holds_for(&self, stored: &Stored, now: i64) -> bool {
        now < self.recheck_at && stored.ari.as_ref().is_some_and(|(_, s)| *s == self.serial)
    }
}

/// How long to wait when the CA offers no ARI before asking again.
pub(super) const UNSUPPORTED_RECHECK: Duration = MAX_RECHECK;

#[cfg(test)]
mod tests {
    use super::*;

    /// The suggested window of RFC 9773's example answer, as a CA sends it.
    const RECORDED: &str = r#"{
        "suggestedWindow": {
            "start": "2025-01-02T04:00:00Z",
            "end": "2025-01-03T04:00:00Z"
        },
        "explanationURL": "https://acme.example.com/docs/ari"
    }"#;

    #[test]
    fn the_renewal_falls_inside_the_suggested_window() {
        let info: RenewalInfo = serde_json::from_str(RECORDED).expect("the recorded answer");
        let start = 1_735_790_400; // 2025-01-02T04:00:00Z
        assert_eq!(due_in_window(&info, 0.0), start);
        assert_eq!(due_in_window(&info, 0.5), start + 43_200);
        assert!(due_in_window(&info, 0.999_999) < start + 86_400);
        assert_eq!(recheck_after(Duration::from_secs(5)), MIN_RECHECK);
        assert_eq!(recheck_after(Duration::from_secs(86_400)), MAX_RECHECK);
    }

    #[test]
    fn the_identifier_is_the_key_id_and_serial_in_base64url() {
        // RFC 9773 §4.1's example: keyIdentifier 69:88:5B:…:D4, serial 00:87:65:43:21.
        let aki = [
            0x69, 0x88, 0x5B, 0x6B, 0x87, 0x46, 0x40, 0x41, 0xE1, 0xB3, 0x7B, 0x84, 0x7B, 0xA0,
            0xAE, 0x2C, 0xDE, 0x01, 0xC8, 0xD4,
        ];
        let stored = Stored {
            not_before: 0,
            not_after: 0,
            names: Vec::new(),
            ari: Some((aki.to_vec(), vec![0x00, 0x87, 0x65, 0x43, 0x21])),
        };
        let id = identifier(&stored).expect("an identifier");
        assert_eq!(id.to_string(), "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE");
    }
}
