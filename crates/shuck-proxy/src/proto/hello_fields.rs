//! The ClientHello fields rustls does not expose and a remote session store needs: the legacy
//! session ID, whether TLS 1.3 is offered, the TLS 1.2 session ticket and the first TLS 1.3 PSK
//! identity. A small reader over the bytes the hello stage already read; anything it does not
//! understand (a hello it cannot find whole, a malformed field) gives `None`, and the store is
//! then simply not asked: rustls still judges the hello itself.

use std::borrow::Cow;

const HANDSHAKE_RECORD: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const EXT_SUPPORTED_VERSIONS: u16 = 0x002b;
const EXT_SESSION_TICKET: u16 = 0x0023;
const EXT_PRE_SHARED_KEY: u16 = 0x0029;
const TLS13: [u8; 2] = [3, 4];

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct HelloFields<'a> {
    pub session_id: &'a [u8],
    pub offers_tls13: bool,
    /// The session_ticket extension's contents (empty when the client asks for a new ticket).
    pub ticket: Option<&'a [u8]>,
    pub psk_identity: Option<&'a [u8]>,
}

impl HelloFields<'_> {
    /// Whether the hello offers to resume: a TLS 1.3 PSK, a TLS 1.2 ticket, or (when TLS 1.3
    /// is not offered, where the legacy session ID is only a compatibility value) a session ID.
    pub(crate) fn offers_resumption(&self) -> bool {
        self.psk_identity.is_some()
            || self.ticket.is_some_and(|t| !t.is_empty())
            || (!self.offers_tls13 && !self.session_id.is_empty())
    }
}

/// Whether the ClientHello at the start of `stream` offers to resume (false when it cannot be
/// read).
pub(crate) fn offers_resumption(stream: &[u8]) -> bool {
    client_hello(stream)
        .as_deref()
        .and_then(fields)
        .is_some_and(|f| f.offers_resumption())
}

/// The ClientHello message (handshake header included) from the start of the stream, joined
/// from its records when it spans several.
pub(crate) fn client_hello(stream: &[u8]) -> Option<Cow<'_, [u8]>> {
    let mut records = Records(stream);
    let first = records.next()?;
    let len = message_len(first)?;
    if first.len() >= len {
        return Some(Cow::Borrowed(&first[..len]));
    }
    let mut joined = first.to_vec();
    for fragment in records {
        joined.extend_from_slice(fragment);
        if joined.len() >= len {
            joined.truncate(len);
            return Some(Cow::Owned(joined));
        }
    }
    None
}

/// The handshake message's whole length, from its header.
fn message_len(start: &[u8]) -> Option<usize> {
    let h = start.get(..4)?;
    (h[0] == CLIENT_HELLO)
        .then(|| 4 + (usize::from(h[1]) << 16 | usize::from(h[2]) << 8 | usize::from(h[3])))
}

/// The fragments of the handshake records at the start of the stream.
struct Records<'a>(&'a [u8]);

impl<'a> Iterator for Records<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let mut r = Reader(self.0);
        if r.u8()? != HANDSHAKE_RECORD {
            return None;
        }
        r.take(2)?;
        let fragment = r.vec16()?;
        self.0 = r.0;
        Some(fragment)
    }
}

/// Reads the fields from a whole ClientHello message (as `client_hello` returns it).
pub(crate) fn fields(message: &[u8]) -> Option<HelloFields<'_>> {
    let mut r = Reader(message.get(4..)?);
    r.take(2 + 32)?; // legacy_version, random
    let session_id = r.vec8()?;
    r.vec16()?; // cipher_suites
    r.vec8()?; // compression methods
    let mut out = HelloFields {
        session_id,
        ..HelloFields::default()
    };
    if r.0.is_empty() {
        return Some(out);
    }
    let mut exts = Reader(r.vec16()?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        match kind {
            EXT_SUPPORTED_VERSIONS => {
                out.offers_tls13 = Reader(data).vec8()?.chunks(2).any(|v| v == TLS13);
            }
            EXT_SESSION_TICKET => out.ticket = Some(data),
            EXT_PRE_SHARED_KEY => {
                let mut ids = Reader(Reader(data).vec16()?);
                out.psk_identity = Some(ids.vec16()?);
            }
            _ => {}
        }
    }
    Some(out)
}

pub(super) struct Reader<'a>(pub(super) &'a [u8]);

impl<'a> Reader<'a> {
    pub(super) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    pub(super) fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    pub(super) fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub(super) fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }

    pub(super) fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello with the given session ID and extensions, in one record.
    fn hello(session_id: &[u8], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([0u8; 32]);
        body.push(session_id.len() as u8);
        body.extend(session_id);
        body.extend([0, 2, 0x13, 0x01, 1, 0]);
        let mut e = Vec::new();
        for (kind, data) in exts {
            e.extend(kind.to_be_bytes());
            e.extend((data.len() as u16).to_be_bytes());
            e.extend(data);
        }
        body.extend((e.len() as u16).to_be_bytes());
        body.extend(e);
        let mut msg = vec![CLIENT_HELLO, 0];
        msg.extend((body.len() as u16).to_be_bytes());
        msg.extend(body);
        record(&msg)
    }

    fn record(fragment: &[u8]) -> Vec<u8> {
        let mut r = vec![HANDSHAKE_RECORD, 3, 1];
        r.extend((fragment.len() as u16).to_be_bytes());
        r.extend(fragment);
        r
    }

    #[test]
    fn reads_the_fields_a_store_needs() {
        let psk = {
            let mut ids = vec![0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0, 1];
            let mut d = (ids.len() as u16).to_be_bytes().to_vec();
            d.append(&mut ids);
            d.extend([0, 33, 32]);
            d.extend([0u8; 32]);
            d
        };
        let stream = hello(
            &[9; 32],
            &[
                (EXT_SUPPORTED_VERSIONS, vec![4, 3, 4, 3, 3]),
                (EXT_SESSION_TICKET, vec![]),
                (EXT_PRE_SHARED_KEY, psk),
            ],
        );
        let msg = client_hello(&stream).unwrap();
        let f = fields(&msg).unwrap();
        assert_eq!(f.session_id, &[9; 32]);
        assert!(f.offers_tls13);
        assert_eq!(f.ticket, Some(&[][..]));
        assert_eq!(f.psk_identity, Some(&b"abcde"[..]));
    }

    #[test]
    fn joins_records_and_refuses_what_it_does_not_understand() {
        let stream = hello(&[1, 2, 3], &[(EXT_SESSION_TICKET, vec![7; 40])]);
        // The same message split into records of 10 bytes.
        let msg = &stream[5..];
        let split: Vec<u8> = msg.chunks(10).flat_map(record).collect();
        let joined = client_hello(&split).unwrap();
        assert_eq!(&joined[..], msg);
        let f = fields(&joined).unwrap();
        assert_eq!(
            (f.session_id, f.ticket),
            (&[1u8, 2, 3][..], Some(&[7u8; 40][..]))
        );
        assert!(!f.offers_tls13);
        // Not all there, not a handshake, a lying length: nothing.
        assert!(client_hello(&split[..split.len() - 3]).is_none());
        assert!(client_hello(b"GET / HTTP/1.1\r\n\r\n").is_none());
        let mut bad = stream.clone();
        bad[5 + 4 + 34] = 200; // session ID length past the end
        assert!(fields(&client_hello(&bad).unwrap()).is_none());
        // Every prefix of the stream is handled without a panic.
        for n in 0..stream.len() {
            let _ = client_hello(&stream[..n]).map(|m| fields(&m).is_some());
        }
    }
}
