//! The ClientHello stage: rustls' `Acceptor` reads the ClientHello before anything is decided,
//! so the pipeline can look at it first (SNI, ALPN, session ID). The read loop is ours rather
//! than tokio-rustls' `LazyConfigAcceptor` so the stage knows whether the client sent anything
//! at all: a close before the first byte is a health check or a scan, one after it an abort.
//! Every byte read is kept, in an allocation that grows with them (a client that sends a byte a
//! minute pins no more than twice what it sent, and never more than the limit): the handshake
//! replays them into the connection that serves the client ([`crate::tls::stream::TlsStream`]).
//!
//! Every refusal is answered with an alert: rustls' own, or one of ours where rustls' acceptor
//! leaves none (a hello too large, a first record that is no handshake).

use std::io;

use rustls::server::{Accepted, AcceptedAlert, Acceptor};
use rustls::{AlertDescription, InvalidMessage};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::error::{is_abort, refusal, Deadline, HandshakeError};
use crate::mem::buf_queue::QUEUE_MAX;

/// The ClientHello limit: the bytes a hello's records may take on the wire, their 5-byte
/// headers included. rustls' acceptor joins a handshake message in a buffer it will not grow
/// past 0xffff bytes (`DeframerVecBuffer::prepare_read`), so a hello is accepted up to 65,515
/// bytes in full 16 KiB records (four headers), 10,922 in 1-byte records. Past it rustls only
/// fails the next read, with an error its text alone tells from another and no alert: the stage
/// counts the bytes itself and refuses a hello still unfinished once it holds this many.
/// (OpenSSL takes hellos up to 131,396 bytes, BoringSSL up to 16 KiB.)
const HELLO_MAX_WIRE: usize = 0xffff;

// The bytes read are replayed into the connection's receive queue, which must take them.
const _: () = assert!(HELLO_MAX_WIRE <= QUEUE_MAX);

/// A ClientHello read, the handshake not yet begun.
pub(crate) struct Hello {
    /// What rustls made of the hello (SNI, ALPN, ...).
    pub(crate) accepted: Accepted,
    pub(crate) tcp: TcpStream,
    /// Every byte read from the client so far: the hello's records, and anything after them.
    pub(crate) received: Vec<u8>,
}

impl Hello {
    /// The server name the client asked for, copied without allocating: kept for the log line
    /// of a handshake that then fails (rustls has the hello by then).
    pub(crate) fn sent_name(&self) -> SentName {
        let mut copy = SentName {
            len: 0,
            bytes: [0; 255],
        };
        if let Some(name) = self.accepted.client_hello().server_name() {
            // A DNS name has at most 253 bytes; rustls refuses anything longer.
            let n = name.len().min(copy.bytes.len());
            copy.bytes[..n].copy_from_slice(&name.as_bytes()[..n]);
            copy.len = u8::try_from(n).unwrap_or(u8::MAX);
        }
        copy
    }
}

/// A ClientHello's server name, inline.
pub(crate) struct SentName {
    len: u8,
    bytes: [u8; 255],
}

impl SentName {
    /// The name, for a log line (`None`: the client sent none).
    pub(crate) fn to_boxed(&self) -> Option<Box<str>> {
        let name = std::str::from_utf8(&self.bytes[..usize::from(self.len)]).ok()?;
        (!name.is_empty()).then(|| name.into())
    }
}

/// Reads the ClientHello. A client that sends something else gets rustls' alert.
pub(crate) async fn read_client_hello(
    mut tcp: TcpStream,
    deadline: Deadline,
) -> Result<Box<Hello>, HandshakeError> {
    let mut head = Head::default();
    match tokio::time::timeout_at(deadline.at, accept(&mut tcp, &mut head)).await {
        Ok(Ok(accepted)) => Ok(Box::new(Hello {
            accepted,
            tcp,
            received: head.kept,
        })),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(HandshakeError::Timeout(deadline.within)),
    }
}

/// The acceptor is boxed: an async fn's state holds inline every value it keeps across an await,
/// and a connection waiting for its ClientHello would otherwise carry rustls' state in its task.
/// The accepted hello is returned without an await in between, so it is never held there.
async fn accept(tcp: &mut TcpStream, head: &mut Head) -> Result<Accepted, HandshakeError> {
    let mut acceptor = Box::new(Acceptor::default());
    loop {
        tcp.readable().await.map_err(HandshakeError::Io)?;
        let received = head.seen;
        match acceptor.read_tls(&mut TryRead(tcp, head)) {
            Ok(0) if received == 0 => return Err(HandshakeError::Silent),
            Ok(0) => return Err(HandshakeError::ClientAborted(None)),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if TooLarge::is(&e) => return Err(too_large(tcp, head).await),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(HandshakeError::Io(e)),
            Err(e) if is_abort(&e) && received == 0 => return Err(HandshakeError::Silent),
            Err(e) if is_abort(&e) => return Err(HandshakeError::ClientAborted(Some(e))),
            Err(e) => return Err(HandshakeError::Io(e)),
        }
        let (error, mut alert) = match acceptor.accept() {
            Ok(Some(accepted)) => return Ok(accepted),
            // rustls would read no more (see `HELLO_MAX_WIRE`).
            Ok(None) if head.seen >= HELLO_MAX_WIRE => return Err(too_large(tcp, head).await),
            Ok(None) => continue,
            // A hello declaring more than 0xffff bytes: rustls refuses it from its header,
            // before it queues an alert.
            Err((rustls::Error::InvalidMessage(InvalidMessage::HandshakePayloadTooLarge), _)) => {
                return Err(too_large(tcp, head).await)
            }
            Err(refused) => refused,
        };
        // Only a hello rustls refused as incompatible (a TLS 1.0/1.1 client sends no
        // signature_algorithms): one it accepted is negotiated from supported_versions, and
        // rustls itself answers protocol_version to the rest.
        if let (rustls::Error::PeerIncompatible(_), Some(v)) = (&error, head.legacy_version()) {
            if v < TLS12 {
                // rustls refuses it for the missing extension, with handshake_failure; a client
                // that can do no better than TLS 1.1 is told protocol_version.
                let version = head.record_version().unwrap_or(0x0301);
                let _ = tcp
                    .write_all(&refusal(AlertDescription::ProtocolVersion, version))
                    .await;
                return Err(HandshakeError::OldProtocol(v));
            }
        }
        // Another handshake message first (a KeyUpdate, say) is out of place, not malformed:
        // unexpected_message, as OpenSSL answers, where rustls' acceptor says decode_error.
        if head.first_message_type().is_some_and(|t| t != CLIENT_HELLO) {
            let _ = tcp
                .write_all(&refusal(AlertDescription::UnexpectedMessage, TLS12))
                .await;
            return Err(HandshakeError::Tls(error));
        }
        if !send_alert(tcp, &mut alert).await {
            let _ = tcp.write_all(&refusal(unanswered(&error), TLS12)).await;
        }
        return Err(HandshakeError::Tls(error));
    }
}

/// Refuses a hello over the limit with `illegal_parameter`, as OpenSSL and BoringSSL answer
/// theirs.
async fn too_large(tcp: &mut TcpStream, head: &Head) -> HandshakeError {
    let _ = tcp
        .write_all(&refusal(AlertDescription::IllegalParameter, TLS12))
        .await;
    HandshakeError::HelloTooLarge {
        received: head.seen,
    }
}

/// The alert for an error rustls' acceptor queued none for (one found while it joins records,
/// or a first message that is no handshake), by the error's type.
fn unanswered(error: &rustls::Error) -> AlertDescription {
    use rustls::Error as E;
    match error {
        E::InvalidMessage(_) => AlertDescription::DecodeError,
        // A record out of place: another type between a hello's fragments, a run of empty ones.
        E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. }
        | E::PeerMisbehaved(_) => AlertDescription::UnexpectedMessage,
        E::PeerIncompatible(_) => AlertDescription::HandshakeFailure,
        E::PeerSentOversizedRecord => AlertDescription::RecordOverflow,
        _ => AlertDescription::InternalError,
    }
}

/// Writes rustls' alert for a refused ClientHello, as far as the socket takes it (the caller's
/// deadline bounds the wait). False when rustls had none to send.
async fn send_alert(tcp: &TcpStream, alert: &mut AcceptedAlert) -> bool {
    let mut sent = false;
    loop {
        match alert.write(&mut TryWrite(tcp)) {
            Ok(0) => return sent,
            Ok(_) => sent = true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if tcp.writable().await.is_err() {
                    return true;
                }
            }
            Err(_) => return true,
        }
    }
}

/// rustls' record version for its own alerts, before a version is agreed.
const TLS12: u16 = 0x0303;
const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 1;

/// `Head::note`'s refusal, told from the socket's errors by its type.
#[derive(Debug, thiserror::Error)]
#[error("ClientHello over {HELLO_MAX_WIRE} bytes")]
struct TooLarge;

impl TooLarge {
    fn is(e: &io::Error) -> bool {
        e.get_ref()
            .is_some_and(<dyn std::error::Error + Send + Sync>::is::<TooLarge>)
    }
}

/// The first bytes of the stream: the record header (content type, version, length), the
/// handshake header (type, length) and the ClientHello's legacy_version.
#[derive(Default)]
struct Head {
    bytes: [u8; 11],
    seen: usize,
    /// Everything read.
    kept: Vec<u8>,
}

impl Head {
    /// Notes a read; fails only past what a ClientHello can be (rustls reads no more than that
    /// while it joins one: the check keeps the bound here, where the bytes are kept).
    fn note(&mut self, read: &[u8]) -> io::Result<()> {
        let len = self.kept.len() + read.len();
        if len > HELLO_MAX_WIRE {
            return Err(io::Error::new(io::ErrorKind::InvalidData, TooLarge));
        }
        // Doubling, as a Vec grows, but no further than the limit: growth from reads of odd
        // sizes would otherwise reach twice it.
        if len > self.kept.capacity() {
            let want = len.max(2 * self.kept.capacity()).min(HELLO_MAX_WIRE);
            self.kept.reserve_exact(want - self.kept.len());
        }
        self.kept.extend_from_slice(read);
        // Past the first bytes (a hello longer than one read), only the count moves.
        let start = self.seen.min(self.bytes.len());
        let n = (self.bytes.len() - start).min(read.len());
        self.bytes[start..start + n].copy_from_slice(&read[..n]);
        self.seen += read.len();
        Ok(())
    }

    fn record_version(&self) -> Option<u16> {
        (self.seen >= 3).then(|| u16::from_be_bytes([self.bytes[1], self.bytes[2]]))
    }

    /// The type of the first handshake message, when the stream starts with a handshake record.
    fn first_message_type(&self) -> Option<u8> {
        let b = &self.bytes;
        let first_record = usize::from(u16::from_be_bytes([b[3], b[4]]));
        (self.seen >= 6 && b[0] == HANDSHAKE && first_record >= 1).then_some(b[5])
    }

    /// The ClientHello's version, when the stream starts with a handshake record holding it (a
    /// hello split into tiny records has it elsewhere: then `None`).
    fn legacy_version(&self) -> Option<u16> {
        let b = &self.bytes;
        let first_record = usize::from(u16::from_be_bytes([b[3], b[4]]));
        (self.seen >= b.len() && b[0] == HANDSHAKE && b[5] == CLIENT_HELLO && first_record >= 6)
            .then(|| u16::from_be_bytes([b[9], b[10]]))
    }
}

/// `std::io::Read` over a non-blocking socket: `WouldBlock` when nothing is there (and tokio
/// then waits for readiness again). Notes the stream's first bytes.
struct TryRead<'a>(&'a TcpStream, &'a mut Head);

impl io::Read for TryRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.0.try_read(buf)?;
        self.1.note(&buf[..n])?;
        Ok(n)
    }
}

struct TryWrite<'a>(&'a TcpStream);

impl io::Write for TryWrite<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_gives_the_client_hello_version_and_nothing_else() {
        // The start of `openssl s_client -tls1`'s ClientHello, in two reads.
        let tls10 = [
            0x16, 0x03, 0x01, 0x00, 0x63, 0x01, 0x00, 0x00, 0x5f, 0x03, 0x01, 0xe0,
        ];
        let mut head = Head::default();
        head.note(&tls10[..4]).unwrap();
        assert_eq!(head.legacy_version(), None, "not all there yet");
        head.note(&tls10[4..]).unwrap();
        assert_eq!(head.legacy_version(), Some(0x0301));
        assert_eq!(head.record_version(), Some(0x0301));
        // A hello split into records of 3 bytes: bytes 9 and 10 belong to the next record's
        // header, not to the hello.
        let split = [
            0x16, 0x03, 0x01, 0x00, 0x03, 0x01, 0x00, 0x01, 0x16, 0x03, 0x01,
        ];
        let mut tiny = Head::default();
        tiny.note(&split).unwrap();
        assert_eq!(tiny.legacy_version(), None);
        // Not a handshake record: no version read out of it.
        let mut http = Head::default();
        http.note(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(http.legacy_version(), None);
    }

    /// A hello larger than one read (rustls reads 4 KiB at a time) is noted read after read;
    /// the head keeps its first bytes and counts the rest. (It panicked on the second read.)
    #[test]
    fn the_head_notes_reads_past_its_end() {
        let mut big = vec![0u8; 9000];
        big[..11].copy_from_slice(&[
            0x16, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0xf0, 0x00, 0x03, 0x03,
        ]);
        let mut head = Head::default();
        for chunk in big.chunks(4096) {
            head.note(chunk).unwrap();
        }
        head.note(&[]).unwrap();
        assert_eq!(head.seen, 9000);
        assert_eq!(head.legacy_version(), Some(0x0303));
        assert_eq!(head.kept, big, "every byte kept, for the handshake");
    }

    /// The copy of the hello is bounded like rustls' own buffer, allocation included: reads of a
    /// size no power of two (4,000 bytes) would double its capacity to 128,000 bytes.
    #[test]
    fn the_head_holds_no_more_than_rustls_hello_buffer() {
        let mut head = Head::default();
        while head.kept.len() + 4000 <= HELLO_MAX_WIRE {
            head.note(&[0; 4000]).unwrap();
        }
        head.note(&vec![0; HELLO_MAX_WIRE - head.kept.len()])
            .unwrap();
        assert_eq!(head.kept.len(), HELLO_MAX_WIRE);
        assert!(
            head.kept.capacity() <= HELLO_MAX_WIRE,
            "{}",
            head.kept.capacity()
        );
        let past = head.note(&[0]).unwrap_err();
        assert!(TooLarge::is(&past), "{past}");
        assert_eq!(head.kept.len(), HELLO_MAX_WIRE, "nothing kept past it");
    }
}
