//! How the ClientHello and handshake stages fail, and what they share: the error, the alerts
//! that answer a refusal in plaintext, and the one deadline for both stages. Its own module so
//! that `hello` and `handshake` both depend on it and not on each other.

use std::io;
use std::time::Duration;

use rustls::AlertDescription;
use tokio::time::Instant;

/// Why a handshake did not finish.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeError {
    /// Closed (FIN or reset) before sending a byte: a TCP health check or a port scan.
    #[error("client closed before sending a ClientHello")]
    Silent,
    /// Closed (FIN or reset) part-way through its handshake.
    #[error("client closed during the TLS handshake{}", .0.as_ref().map_or(String::new(), |e| format!(": {e}")))]
    ClientAborted(Option<io::Error>),
    #[error("{}", super::words::in_words(.0))]
    Tls(rustls::Error),
    /// No certificate fits the client's name, or the signature algorithms its cipher suites
    /// allow.
    #[error("no certificate for this client (its server name, or its algorithms)")]
    NoCertificate,
    /// The ClientHello's records outgrow what the hello stage reads (see `hello`), or it declares
    /// more than that; `received`: the bytes read when it was refused.
    #[error(
        "ClientHello larger than 64 KiB with its record headers (refused after {received} bytes)"
    )]
    HelloTooLarge { received: usize },
    /// The ClientHello's version is below TLS 1.2 (this one, as on the wire).
    #[error("the client offers only versions older than TLS 1.2 (ClientHello version {0:#06x})")]
    OldProtocol(u16),
    #[error("{0}")]
    Io(io::Error),
    #[error("no complete handshake within {0:?}")]
    Timeout(Duration),
}

impl HandshakeError {
    /// Sorts an I/O error from the handshake, after the ClientHello: rustls' own errors arrive
    /// wrapped in one.
    pub(crate) fn from_io(e: io::Error) -> HandshakeError {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            return HandshakeError::ClientAborted(None);
        }
        if is_abort(&e) {
            return HandshakeError::ClientAborted(Some(e));
        }
        if !e
            .get_ref()
            .is_some_and(<dyn std::error::Error + Send + Sync>::is::<rustls::Error>)
        {
            return HandshakeError::Io(e);
        }
        match e
            .into_inner()
            .map(<dyn std::error::Error + Send + Sync>::downcast::<rustls::Error>)
        {
            Some(Ok(error)) => HandshakeError::Tls(*error),
            // Checked just above; kept total without a panic.
            _ => HandshakeError::Io(io::ErrorKind::InvalidData.into()),
        }
    }
}

/// The peer reset the connection (or it broke under us).
pub(crate) fn is_abort(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
    )
}

/// A fatal alert as a plaintext record, sent before anything is encrypted; `record_version` is
/// the record layer's version the client can read (0x0301 for TLS 1.0).
pub(crate) fn refusal(description: AlertDescription, record_version: u16) -> [u8; 7] {
    const ALERT: u8 = 0x15;
    const FATAL: u8 = 2;
    let [v0, v1] = record_version.to_be_bytes();
    [ALERT, v0, v1, 0, 2, FATAL, u8::from(description)]
}

/// One deadline for the whole handshake, shared by both stages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    pub(super) at: Instant,
    pub(super) within: Duration,
}

impl Deadline {
    /// When the handshake's time is up.
    pub(crate) fn at(&self) -> Instant {
        self.at
    }

    pub(crate) fn after(within: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + within,
            within,
        }
    }

    /// The same time again from now (after a wait that was not the client's doing).
    #[must_use]
    pub(crate) fn restarted(&self) -> Deadline {
        Deadline::after(self.within)
    }
}
