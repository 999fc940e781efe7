//! The ClientHello stage: rustls' `Acceptor` reads the ClientHello before anything is decided,
//! so the pipeline can look at it first (SNI, ALPN, session ID). The read loop is ours rather
//! than tokio-rustls' `LazyConfigAcceptor` so the stage knows whether the client sent anything
//! at all: a close before the first byte is a health check or a scan, one after it an abort.

use std::io;

use rustls::server::{Accepted, AcceptedAlert, Acceptor};
use tokio::net::TcpStream;
use tokio_rustls::StartHandshake;

use super::handshake::{is_abort, Deadline, HandshakeError, Hello};

/// Reads the ClientHello. A client that sends something else gets rustls' alert.
pub(crate) async fn read_client_hello(
    mut tcp: TcpStream,
    deadline: Deadline,
) -> Result<Hello, HandshakeError> {
    match tokio::time::timeout_at(deadline.at, accept(&mut tcp)).await {
        Ok(Ok(accepted)) => Ok(StartHandshake::from_parts(accepted, tcp)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(HandshakeError::Timeout(deadline.within)),
    }
}

async fn accept(tcp: &mut TcpStream) -> Result<Accepted, HandshakeError> {
    let mut acceptor = Acceptor::default();
    let mut received = 0usize;
    loop {
        tcp.readable().await.map_err(HandshakeError::Io)?;
        match acceptor.read_tls(&mut TryRead(tcp)) {
            Ok(0) if received == 0 => return Err(HandshakeError::Silent),
            Ok(0) => return Err(HandshakeError::ClientAborted(None)),
            Ok(n) => received += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if is_abort(&e) && received == 0 => return Err(HandshakeError::Silent),
            Err(e) if is_abort(&e) => return Err(HandshakeError::ClientAborted(Some(e))),
            Err(e) => return Err(HandshakeError::Io(e)),
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => return Ok(accepted),
            Ok(None) => {}
            Err((error, mut alert)) => {
                send_alert(tcp, &mut alert).await;
                return Err(HandshakeError::Tls {
                    error,
                    no_certificate: false,
                });
            }
        }
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

/// `std::io::Read` over a non-blocking socket: `WouldBlock` when nothing is there (and tokio
/// then waits for readiness again).
struct TryRead<'a>(&'a TcpStream);

impl io::Read for TryRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
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
