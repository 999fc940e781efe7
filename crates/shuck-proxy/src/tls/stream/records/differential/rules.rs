//! Where shuck's record layer and rustls' may differ, on purpose. Everything else must be the
//! same: application data read, how reading ended, and every message sent back. Each rule is
//! listed in docs/fuzzing.md.

use rustls::{ContentType, Error, InvalidMessage, PeerMisbehaved};

use super::observe::Sent;
use super::{EndKind, Outcome};
use crate::tls::stream::records::OUTER_TYPE;

const UNEXPECTED_MESSAGE: u8 = 10;
const BAD_RECORD_MAC: u8 = 20;
const RECORD_OVERFLOW: u8 = 22;
const DECODE_ERROR: u8 = 50;

/// What is compared of an outcome, once rule 1 has been applied; `done` only by the rules
/// (where each side stopped).
#[derive(Debug)]
struct Compared {
    data: Vec<u8>,
    end: EndKind,
    sent: Vec<Sent>,
    done: usize,
    holding_fragment: bool,
}

impl PartialEq for Compared {
    fn eq(&self, other: &Compared) -> bool {
        (&self.data, self.end, &self.sent) == (&other.data, other.end, &other.sent)
    }
}

impl Compared {
    fn of(o: &Outcome) -> Compared {
        Compared {
            data: o.data.clone(),
            end: o.end,
            sent: without_trailing_key_updates(&o.sent),
            done: o.done,
            holding_fragment: o.holding_fragment,
        }
    }
}

/// Whether the two outcomes are the same up to the rules:
///
/// 1. **When a requested KeyUpdate is answered.** shuck answers at once; rustls queues its
///    answer until it next writes. Either way one answer comes before the server's next data
///    (RFC 8446 §4.6.3) and covers every request before that data, so KeyUpdates that no data
///    follows (before an alert, or at the end) are not compared.
/// 2. **rustls fails without an alert** where its deframer or record layer reports the
///    error itself (an all-zero inner plaintext, too many empty records, warnings or
///    KeyUpdates, a record between a message's fragments): the same error, and shuck sends
///    the alert the RFC asks for.
/// 3. **shuck is stricter**, by [`Stricter`].
pub(super) fn agree(ours: &Outcome, theirs: &Outcome) -> bool {
    let (o, t) = (Compared::of(ours), Compared::of(theirs));
    o == t
        || rustls_silent(ours, &o, theirs, &t)
        || Stricter::of(ours).is_some_and(|rule| rule.allows(&o, &t))
}

/// `sent` without the KeyUpdates that no application data follows.
pub(super) fn without_trailing_key_updates(sent: &[Sent]) -> Vec<Sent> {
    let last_data = sent.iter().rposition(|s| matches!(s, Sent::Data(_)));
    sent.iter()
        .enumerate()
        .filter(|(i, s)| !matches!(s, Sent::KeyUpdate(_)) || last_data.is_some_and(|d| *i < d))
        .map(|(_, s)| s.clone())
        .collect()
}

/// Rule 2: the same failure, the same bytes read, and shuck's alert where rustls sent none.
fn rustls_silent(ours: &Outcome, o: &Compared, theirs: &Outcome, t: &Compared) -> bool {
    let Some((Sent::Alert(2, _), before)) = o.sent.split_last() else {
        return false;
    };
    o.end == EndKind::Failed
        && t.end == EndKind::Failed
        && ours.error == theirs.error
        && o.data == t.data
        && before == t.sent.as_slice()
}

/// Rule 3: inputs shuck refuses where rustls reads on or answers otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stricter {
    /// A protected record whose outer type is not application_data: unexpected_message
    /// (RFC 8446 §5). rustls ignores the outer type of a protected record.
    OuterType,
    /// A protected record whose legacy_record_version is not 0x0303: bad_record_mac, because
    /// the header as received is the additional data (§5.2). rustls builds the additional data
    /// from constants, so it ignores the version.
    OuterVersion,
    /// A 33rd KeyUpdate without application data between, where an empty record is not data:
    /// unexpected_message. rustls takes an empty record for data and starts counting again,
    /// so a client that alternates KeyUpdates and empty records is never stopped.
    KeyUpdatesWithoutData,
    /// An empty handshake record: unexpected_message (§5.1 forbids them). rustls skips it.
    EmptyHandshakeRecord,
    /// An inner content type TLS 1.3 does not know (heartbeat included): unexpected_message
    /// (§5). rustls says
    /// decode_error (or nothing, rule 2).
    UnknownInnerType,
    /// An inner change_cipher_spec: unexpected_message (§5: only a plaintext one, during the
    /// handshake, is ignored). rustls says so too, or nothing when the record is not the one
    /// byte a middlebox-compatibility one holds.
    InnerChangeCipherSpec,
    /// A record longer than 2^14 + 256 bytes: record_overflow from its header (§5.2). rustls
    /// says decode_error above its own deframer's limit (2^14 + 2048); below it, it waits for
    /// the whole record and says bad_record_mac when it does not open.
    RecordOverflow,
    /// A KeyUpdate whose declared length is not 1: decode_error (§6) from its header. rustls
    /// waits for the declared length, then says decode_error too, or nothing when the length
    /// is over its 64 KiB limit, or fails on a record that follows.
    KeyUpdateLength,
    /// A KeyUpdate with more bytes behind it in its record: unexpected_message (§5.1), at
    /// once. rustls looks at the next message first: it waits for the rest of it (and fails
    /// on what follows), or says nothing when its declared length is over its limit.
    KeyUpdateNotLast,
    /// A handshake message other than KeyUpdate: unexpected_message from its first byte,
    /// whatever its body. rustls waits for the whole message (failing on any other record
    /// meanwhile), parses it, and says decode_error or unexpected_message, or nothing when
    /// the declared length is over its limit.
    OtherHandshakeMessage,
}

impl Stricter {
    /// The rule behind shuck's failure, from its error and the record it failed on.
    fn of(ours: &Outcome) -> Option<Stricter> {
        let header = &ours.failed_header;
        Some(match ours.error.as_ref()? {
            Error::InappropriateMessage { .. } if header.first() != Some(&OUTER_TYPE) => {
                Stricter::OuterType
            }
            Error::DecryptError if header.get(1..3) != Some(&[3, 3]) => Stricter::OuterVersion,
            Error::InvalidMessage(InvalidMessage::InvalidEmptyPayload) => {
                Stricter::EmptyHandshakeRecord
            }
            Error::InappropriateMessage {
                got_type: ContentType::Unknown(_) | ContentType::Heartbeat,
                ..
            } => Stricter::UnknownInnerType,
            Error::InappropriateMessage {
                got_type: ContentType::ChangeCipherSpec,
                ..
            } => Stricter::InnerChangeCipherSpec,
            Error::InappropriateHandshakeMessage { .. } => Stricter::OtherHandshakeMessage,
            Error::InvalidMessage(InvalidMessage::InvalidKeyUpdate) => Stricter::KeyUpdateLength,
            Error::InvalidMessage(InvalidMessage::MessageTooLarge) => Stricter::RecordOverflow,
            Error::PeerMisbehaved(PeerMisbehaved::TooManyKeyUpdateRequests) => {
                Stricter::KeyUpdatesWithoutData
            }
            Error::PeerMisbehaved(PeerMisbehaved::KeyEpochWithPendingFragment) => {
                Stricter::KeyUpdateNotLast
            }
            _ => return None,
        })
    }

    fn alert(self) -> u8 {
        match self {
            Stricter::OuterVersion => BAD_RECORD_MAC,
            Stricter::KeyUpdateLength => DECODE_ERROR,
            Stricter::RecordOverflow => RECORD_OVERFLOW,
            _ => UNEXPECTED_MESSAGE,
        }
    }

    /// Whether rustls' outcome is one this rule allows beside shuck's.
    fn allows(self, o: &Compared, t: &Compared) -> bool {
        let Some((&Sent::Alert(2, alert), before)) = o.sent.split_last() else {
            return false;
        };
        if alert != self.alert() || o.end != EndKind::Failed {
            return false;
        }
        // rustls fails on the same record, with one of `theirs` or no alert.
        let same_record = |theirs: &[u8]| {
            t.end == EndKind::Failed
                && t.data == o.data
                && (t.sent == before
                    || t.sent.split_last().is_some_and(|(last, rest)| {
                        rest == before && matches!(last, Sent::Alert(2, a) if theirs.contains(a))
                    }))
        };
        // rustls waits for the rest of a handshake message shuck refused by its first bytes
        // (so it has not discarded the record shuck refused: a rustls that took that message
        // whole and read on would have), and may then fail on that record or one after it (no
        // data can come between).
        let rest_of_message = || {
            t.data == o.data
                && t.sent.starts_with(before)
                && match t.end {
                    EndKind::Open => t.done <= o.done,
                    EndKind::Failed => true,
                    EndKind::CloseNotify => false,
                }
        };
        // rustls reads on past the record shuck refused: if it fails, it is no earlier (unless
        // a handshake message was being joined, where rustls' count of bytes done stays at the
        // message's start).
        let reads_on = || {
            t.data.starts_with(&o.data)
                && t.sent.starts_with(before)
                && (t.end != EndKind::Failed || t.done >= o.done || o.holding_fragment)
        };
        match self {
            // rustls reads on past the record shuck refused.
            Stricter::OuterType
            | Stricter::OuterVersion
            | Stricter::EmptyHandshakeRecord
            | Stricter::KeyUpdatesWithoutData => reads_on(),
            Stricter::UnknownInnerType => same_record(&[DECODE_ERROR]),
            // rustls waits for the whole record below its own limit and fails to open it.
            Stricter::RecordOverflow => {
                same_record(&[DECODE_ERROR, BAD_RECORD_MAC])
                    || (t.end == EndKind::Open
                        && t.done <= o.done
                        && t.data == o.data
                        && t.sent.starts_with(before))
            }
            Stricter::InnerChangeCipherSpec => same_record(&[UNEXPECTED_MESSAGE]),
            Stricter::KeyUpdateLength
            | Stricter::OtherHandshakeMessage
            | Stricter::KeyUpdateNotLast => rest_of_message(),
        }
    }
}
