//! Reading a PROXY header from a load balancer in front of shuck (`accept_proxy`), before TLS.
//!
//! The header is consumed exactly: bytes are peeked, and only those the decoder says belong to
//! the header are read, so the ClientHello behind it stays in the socket for rustls.

use std::io;
use std::net::SocketAddr;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::config::AcceptProxy;
use crate::mem::buf_pool::PooledBuf;
use crate::proto::proxy_protocol::{self, tlv, Addresses, DecodeError, Parsed};

// The whole v2 header must fit the pooled buffer it is read into.
const _: () = assert!(crate::mem::buf_pool::BUF_SIZE >= proxy_protocol::V2_MAX_RECEIVED);

/// What a load balancer told us about the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Announced {
    /// The real client and the address it connected to; `None` for LOCAL (health checks) and
    /// unknown families, where the connection's own addresses stand.
    pub addrs: Option<(SocketAddr, SocketAddr)>,
    pub local: bool,
    /// Received TLVs worth passing on to the backend, in wire form (see [`keep_tlv`]).
    pub passthrough: Option<Box<[u8]>>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum HeaderError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("connection closed after {received} bytes, before the PROXY header was complete")]
    Closed { received: usize },
    #[error("no complete PROXY header within {0:?}")]
    Timeout(std::time::Duration),
    #[error("peer is not in accept_proxy_from")]
    Untrusted,
    #[error("reading the PROXY header: {0}")]
    Io(#[from] io::Error),
}

/// Where a connection comes from: as the socket says, or as a load balancer announced it.
#[derive(Debug)]
pub(crate) struct Arrival {
    pub(crate) client: SocketAddr,
    /// The address the client connected to: only asked of the socket when the backend is to
    /// get a PROXY header (a getsockname per connection fewer otherwise).
    pub(crate) local: Option<SocketAddr>,
    /// The load balancer that sent a PROXY header (the socket's peer), if one did.
    pub(crate) balancer: Option<SocketAddr>,
    /// The header was a LOCAL command (a balancer's health check).
    pub(crate) health_check: bool,
    /// Received TLVs to pass on to the backend, in wire form.
    pub(crate) passthrough: Option<Box<[u8]>>,
}

/// The first stage of a connection: with `accept_proxy`, the PROXY header is read (only from an
/// allowed peer, within its timeout) and consumed; without, the socket's addresses stand.
pub(crate) async fn arrive(
    tcp: &mut TcpStream,
    peer: SocketAddr,
    accept: Option<&AcceptProxy>,
    want_local: bool,
) -> Result<Arrival, HeaderError> {
    let mut arrival = Arrival {
        client: peer,
        local: want_local.then(|| tcp.local_addr().unwrap_or(peer)),
        balancer: None,
        health_check: false,
        passthrough: None,
    };
    let Some(ap) = accept else {
        return Ok(arrival);
    };
    if !ap.allows(peer.ip()) {
        return Err(HeaderError::Untrusted);
    }
    let pass_on = ap.passes_tlvs().then_some(ap.cert_tlv);
    let announced = tokio::time::timeout(ap.timeout, read_header(tcp, pass_on))
        .await
        .unwrap_or(Err(HeaderError::Timeout(ap.timeout)))?;
    arrival.balancer = Some(peer);
    if let Some((src, dst)) = announced.addrs {
        (arrival.client, arrival.local) = (src, Some(dst));
    }
    arrival.health_check = announced.local;
    arrival.passthrough = announced.passthrough;
    Ok(arrival)
}

/// TLVs that describe the client rather than the load balancer's own TLS, and that shuck does
/// not produce itself: the unique ID (request tracing across hops), network namespace, and the
/// custom range (cloud load balancers put endpoint IDs there), but for the types shuck fills
/// itself there (the client certificate's, JA4's): a balancer could otherwise put its words
/// beside or in place of shuck's.
fn keep_tlv(kind: u8, cert_tlv: u8) -> bool {
    kind != cert_tlv
        && kind != tlv::JA4
        && matches!(
            kind,
            tlv::UNIQUE_ID | tlv::NETNS | tlv::CUSTOM_MIN..=tlv::CUSTOM_MAX
        )
}

/// Reads one header. Cancel-safe only in the sense that dropping it drops the connection: the
/// caller wraps it in the header timeout and closes on any error.
/// `pass_on`: keep the received TLVs worth passing on (see [`keep_tlv`]) except this client
/// certificate type; `None` keeps none.
async fn read_header(tcp: &mut TcpStream, pass_on: Option<u8>) -> Result<Announced, HeaderError> {
    let mut buf = PooledBuf::take();
    let buf = buf.bytes_mut();
    let mut have = 0;
    loop {
        // Peeked bytes are consumed only once the decoder has placed them inside the header, so
        // every peek after a consuming read either sees new bytes or waits for them.
        let n = tcp.peek(&mut buf[have..]).await?;
        if n == 0 {
            return Err(HeaderError::Closed { received: have });
        }
        match proxy_protocol::decode(&buf[..have + n])? {
            Parsed::Complete { len, .. } => {
                tcp.read_exact(&mut buf[have..len]).await?;
                // Decode again from the owned copy (same bytes) to build the answer.
                let Parsed::Complete { header, .. } = proxy_protocol::decode(&buf[..len])? else {
                    return Err(HeaderError::Decode(DecodeError::V2Truncated));
                };
                let addrs = match header.addrs {
                    Addresses::Tcp { src, dst } if !header.local => Some((src, dst)),
                    _ => None,
                };
                let mut kept = Vec::new();
                for t in proxy_protocol::tlvs(header.tlvs) {
                    let (kind, value) = t?;
                    if pass_on.is_some_and(|cert_tlv| keep_tlv(kind, cert_tlv)) {
                        kept.push(kind);
                        kept.extend_from_slice(&(value.len() as u16).to_be_bytes());
                        kept.extend_from_slice(value);
                    }
                }
                return Ok(Announced {
                    addrs,
                    local: header.local,
                    passthrough: (!kept.is_empty()).then(|| kept.into_boxed_slice()),
                });
            }
            Parsed::Incomplete { .. } => {
                tcp.read_exact(&mut buf[have..have + n]).await?;
                have += n;
            }
        }
    }
}
