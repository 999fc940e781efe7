//! What a server sent, as its client reads it: records opened with the server's keys, which
//! follow each KeyUpdate it sends.

use super::traffic::Traffic;
use crate::tls::stream::records::HEADER_LEN;

/// One message the client read from a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Sent {
    Data(Vec<u8>),
    /// A KeyUpdate (with its request_update).
    KeyUpdate(u8),
    /// An alert: level and description.
    Alert(u8, u8),
    /// Something the client could not read: a record that did not open, or an unexpected
    /// message. Nothing is read after it.
    Unreadable(String),
}

/// Everything in `wire`, read with `keys`.
pub(super) fn read(mut keys: Traffic, mut wire: &[u8]) -> Vec<Sent> {
    let mut sent = Vec::new();
    while !wire.is_empty() {
        let Some(len) = wire
            .get(3..HEADER_LEN)
            .map(|l| HEADER_LEN + usize::from(u16::from_be_bytes([l[0], l[1]])))
            .filter(|&len| len <= wire.len())
        else {
            sent.push(Sent::Unreadable("a partial record".into()));
            break;
        };
        let message = keys.open(&wire[..len]).map_or_else(
            || Sent::Unreadable("a record that did not open".into()),
            message,
        );
        wire = &wire[len..];
        if let Sent::KeyUpdate(_) = message {
            keys.update();
        }
        let stop = matches!(message, Sent::Unreadable(_));
        sent.push(message);
        if stop {
            break;
        }
    }
    sent
}

/// The message in an opened record's inner plaintext.
fn message(mut inner: Vec<u8>) -> Sent {
    while inner.last() == Some(&0) {
        inner.pop();
    }
    match (inner.pop(), inner.as_slice()) {
        (Some(23), _) => Sent::Data(inner),
        (Some(22), &[24, 0, 0, 1, request]) => Sent::KeyUpdate(request),
        (Some(21), &[level, description]) => Sent::Alert(level, description),
        (typ, body) => Sent::Unreadable(format!("type {typ:?}, {} bytes", body.len())),
    }
}
