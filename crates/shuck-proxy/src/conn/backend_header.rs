//! The PROXY header shuck sends to a backend: addresses, and the TLVs the frontend asks for,
//! filled from the finished TLS handshake.

use rustls::CommonState;

use crate::config::ProxyTlvs;
use crate::conn::proxy_in::Arrival;
use crate::mem::buf_pool::PooledBuf;
use crate::proto::proxy_protocol::{self, tlv, Addresses, EncodeError, SslInfo, Tlvs, Version};
use crate::proto::tls_params as params;
use crate::tls::client_auth;
use crate::tls::handshake::{self, Negotiated};

/// Whether shuck makes a unique ID for this connection: asked for, and none received from a
/// load balancer (whose ID is passed on instead, so one request keeps one ID across hops).
pub(crate) fn makes_unique_id(want: ProxyTlvs, passthrough: Option<&[u8]>) -> bool {
    let received = passthrough.is_some_and(|p| {
        proxy_protocol::tlvs(p)
            .flatten()
            .any(|(k, _)| k == tlv::UNIQUE_ID)
    });
    want.unique_id && !received
}

/// The header for this connection in a buffer (with room behind it for the client's first
/// bytes), or `None` when the frontend sends no header.
pub(crate) fn header(
    (send, want): (Option<Version>, &ProxyTlvs),
    hs: &Negotiated,
    arrival: &Arrival,
    (unique_id, ja4): (Option<&[u8]>, Option<&[u8]>),
) -> Result<Option<(PooledBuf, usize)>, EncodeError> {
    let Some(version) = send else {
        return Ok(None);
    };
    let conn = hs.conn();
    let peer_cert = conn
        .and_then(CommonState::peer_certificates)
        .and_then(|c| c.first());
    let cn = if want.ssl {
        peer_cert.and_then(|c| client_auth::subject_cn(c))
    } else {
        None
    };
    let resumed = conn.is_some_and(handshake::resumed);
    let served = hs.served.as_deref();
    let ssl = want.ssl.then(|| SslInfo {
        // The spec: CERT_SESS = a certificate was presented at least once in this TLS session;
        // CERT_CONN = on this very connection, which a resumption never does.
        client: tlv::CLIENT_SSL
            | match (peer_cert.is_some(), resumed) {
                (true, false) => tlv::CLIENT_CERT_CONN | tlv::CLIENT_CERT_SESS,
                (true, true) => tlv::CLIENT_CERT_SESS,
                (false, _) => 0,
            },
        verify: hs.client_cert.verify_code(),
        version: params::protocol_name(conn.and_then(CommonState::protocol_version)),
        cn: cn.as_deref().map(str::as_bytes),
        cipher: conn
            .and_then(CommonState::negotiated_cipher_suite)
            .map_or("unknown", params::openssl_suite_name),
        sig_alg: served.map(|c| c.sig_alg.as_str()),
        key_alg: served.map(|c| c.key_alg.as_str()),
    });
    let tlvs = Tlvs {
        alpn: conn
            .and_then(CommonState::alpn_protocol)
            .filter(|_| want.alpn),
        authority: hs
            .sni
            .as_deref()
            .filter(|_| want.authority)
            .map(str::as_bytes),
        unique_id,
        ssl,
        client_cert: want.client_cert.zip(peer_cert.map(AsRef::as_ref)),
        ja4: ja4.filter(|_| want.ja4),
        passthrough: arrival.passthrough.as_deref().unwrap_or_default(),
        crc32c: want.crc32c,
    };
    // `local` is always known when a header is sent (`arrive` is asked for it then).
    let addrs = Addresses::tcp(arrival.client, arrival.local.unwrap_or(arrival.client));
    let len = proxy_protocol::encoded_len(version, addrs, &tlvs)?;
    let mut buf = PooledBuf::at_least(len);
    let n = proxy_protocol::encode(version, addrs, &tlvs, buf.bytes_mut())?;
    Ok(Some((buf, n)))
}

/// A connection ID for the PROXY unique-ID TLV: a random per-process prefix, the worker and the
/// worker's connection number. Unique without any shared state, built on the stack.
#[derive(Default)]
pub(crate) struct UniqueId {
    bytes: [u8; 32],
    len: usize,
}

impl UniqueId {
    pub(crate) fn new(worker: usize, n: u64) -> UniqueId {
        use std::io::Write;
        static PREFIX: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        let prefix = *PREFIX.get_or_init(|| {
            let mut b = [0u8; 4];
            // A fixed prefix if the system RNG fails: IDs stay unique within the process.
            let _ = aws_lc_rs::rand::fill(&mut b);
            u32::from_be_bytes(b)
        });
        let mut id = UniqueId::default();
        let mut w = &mut id.bytes[..];
        let _ = write!(w, "{prefix:08x}-{worker}-{n:x}");
        id.len = 32 - w.len();
        id
    }

    pub(crate) fn as_bytes(&self) -> Option<&[u8]> {
        (self.len > 0).then(|| &self.bytes[..self.len])
    }

    pub(crate) fn as_str(&self) -> &str {
        match std::str::from_utf8(&self.bytes[..self.len]) {
            Ok(s) if !s.is_empty() => s,
            _ => "-",
        }
    }
}
