//! The ClientHello stage: rustls' `Acceptor` reads the ClientHello before anything is decided,
//! so the pipeline can look at it first (SNI, ALPN, session ID). The read loop is ours rather
//! than tokio-rustls' `LazyConfigAcceptor` so the stage knows whether the client sent anything
//! at all: a close before the first byte is a health check or a scan, one after it an abort.
//! Every byte read is kept, in an allocation of its size (a client that sends a byte a minute
//! pins no more than it sent): the handshake replays them into the connection that serves the
//! client ([`super::stream::TlsStream`]).

use std::io;

use rustls::server::{Accepted, AcceptedAlert, Acceptor};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::handshake::{is_abort, refusal, Deadline, HandshakeError, ALERT_PROTOCOL_VERSION};
use crate::buf_queue::QUEUE_MAX;

/// A ClientHello read, the handshake not yet begun.
pub(crate) struct Hello {
    /// What rustls made of the hello (SNI, ALPN, ...).
    pub(crate) accepted: Accepted,
    pub(crate) tcp: TcpStream,
    /// Every byte read from the client so far: the hello's records, and anything after them.
    pub(crate) received: Vec<u8>,
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
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Err(HandshakeError::Io(e)),
            Err(e) if is_abort(&e) && received == 0 => return Err(HandshakeError::Silent),
            Err(e) if is_abort(&e) => return Err(HandshakeError::ClientAborted(Some(e))),
            Err(e) => return Err(HandshakeError::Io(e)),
        }
        let (error, mut alert) = match acceptor.accept() {
            Ok(Some(accepted)) => return Ok(accepted),
            Ok(None) => continue,
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
                    .write_all(&refusal(ALERT_PROTOCOL_VERSION, version))
                    .await;
                return Err(HandshakeError::OldProtocol(v));
            }
        }
        // Another handshake message first (a KeyUpdate, say) is out of place, not malformed:
        // unexpected_message, as OpenSSL answers, where rustls' acceptor says decode_error.
        if head.first_message_type().is_some_and(|t| t != CLIENT_HELLO) {
            let _ = tcp
                .write_all(&refusal(ALERT_UNEXPECTED_MESSAGE, TLS12))
                .await;
            return Err(HandshakeError::Tls(error));
        }
        send_alert(tcp, &mut alert).await;
        return Err(HandshakeError::Tls(error));
    }
}

/// Writes rustls' alert for a refused ClientHello, as far as the socket takes it (the caller's
/// deadline bounds the wait).
async fn send_alert(tcp: &TcpStream, alert: &mut AcceptedAlert) {
    loop {
        match alert.write(&mut TryWrite(tcp)) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if tcp.writable().await.is_err() {
                    return;
                }
            }
            Err(_) => return,
        }
    }
}

const TLS12: u16 = 0x0303;
const HANDSHAKE: u8 = 0x16;
const CLIENT_HELLO: u8 = 1;
const ALERT_UNEXPECTED_MESSAGE: u8 = 10;

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
    /// Notes a read; fails only past what a ClientHello can be (rustls' acceptor refuses
    /// such a hello anyway).
    fn note(&mut self, read: &[u8]) -> io::Result<()> {
        if self.kept.len() + read.len() > QUEUE_MAX {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "ClientHello too large",
            ));
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
}
