//! The connection to a backend: TCP, or a Unix socket (a Varnish, an app server on the same
//! host), either of them in TLS (`backend_tls`). The relay sees one stream type every way.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

#[derive(Debug)]
pub(crate) enum Upstream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// Boxed: rustls' client state is large, and only backends in TLS carry it.
    Tls(Box<tokio_rustls::client::TlsStream<Upstream>>),
}

impl Upstream {
    /// The TCP stream, if the backend is one: only TCP can be closed abortively (RST).
    pub(crate) fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Upstream::Tcp(s) => Some(s),
            Upstream::Unix(_) => None,
            Upstream::Tls(s) => s.get_ref().0.tcp(),
        }
    }

    /// This connection in TLS to `name` with `config`: `first` (a PROXY header) goes before the
    /// handshake, in the clear, as HAProxy sends it; the whole within `within`.
    pub(crate) async fn into_tls(
        mut self,
        first: Option<&[u8]>,
        (config, name): (
            std::sync::Arc<rustls::ClientConfig>,
            rustls::pki_types::ServerName<'static>,
        ),
        within: std::time::Duration,
    ) -> Result<Upstream, TlsToBackendError> {
        use tokio::io::AsyncWriteExt;
        let handshake = async {
            if let Some(bytes) = first {
                self.write_all(bytes).await?;
            }
            tokio_rustls::TlsConnector::from(config)
                .connect(name, self)
                .await
        };
        match tokio::time::timeout(within, handshake).await {
            Ok(r) => Ok(Upstream::Tls(Box::new(
                r.map_err(TlsToBackendError::Handshake)?,
            ))),
            Err(_) => Err(TlsToBackendError::Handshake(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("TLS handshake with the backend not done within {within:?}"),
            ))),
        }
    }
}

/// Why a backend connection could not be put in TLS.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsToBackendError {
    /// This side's: no client configuration for these backends yet, no name to ask for.
    #[error("{0}")]
    Local(String),
    /// The handshake (its certificate, ours, its answer or its time).
    #[error("{0}")]
    Handshake(io::Error),
}

impl AsyncRead for Upstream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Upstream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            // A backend that closes without close_notify (many do) has ended its answer, as
            // nginx and HAProxy take it: the end, not a reset passed on to the client.
            Upstream::Tls(s) => match Pin::new(s.as_mut()).poll_read(cx, buf) {
                Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    Poll::Ready(Ok(()))
                }
                other => other,
            },
        }
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Upstream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Upstream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Upstream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Upstream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Upstream::Tcp(s) => s.is_write_vectored(),
            Upstream::Unix(s) => s.is_write_vectored(),
            Upstream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Upstream::Unix(s) => Pin::new(s).poll_flush(cx),
            Upstream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Upstream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Upstream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Upstream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
