//! The PROXY protocol (v1 text, v2 binary with TLVs), pure: no I/O, no allocation.
//!
//! Sent to backends so they learn the real client and what TLS negotiated (stud's
//! `--write-proxy`), and received from L4 load balancers in front of shuck. Reference: the public
//! specification "The PROXY protocol, versions 1 & 2" (haproxy.org, doc/proxy-protocol.txt).
//!
//! [`encode`] writes into a caller's buffer so the connection can put the header and the first
//! client bytes in one segment; [`decode`] works on whatever prefix of the stream has arrived and
//! says how much more it needs, so the reader never consumes a byte past the header.

mod decode;
mod encode;

pub use decode::{decode, ssl_tlv, tlvs, DecodeError, Parsed, Received, SslTlv, TlvIter};
pub use encode::{encode, encoded_len, EncodeError, SslInfo, Tlvs};

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// Which PROXY protocol version a header is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// The text line (`PROXY TCP4 ...`); carries no TLVs.
    V1,
    /// The binary header, with TLVs.
    V2,
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// The 12-byte v2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The v1 line starts with this.
pub const V1_PREFIX: &[u8; 6] = b"PROXY ";
/// The spec's longest v1 line, CRLF included.
pub const V1_MAX: usize = 107;
/// Longest v2 header we accept (signature + fixed part + payload). The spec allows 64 KiB; real
/// load balancers send a few hundred bytes, and this bounds what one connection can make us hold.
pub const V2_MAX_RECEIVED: usize = 16 * 1024;

/// TLV types from the specification.
pub mod tlv {
    pub const ALPN: u8 = 0x01;
    pub const AUTHORITY: u8 = 0x02;
    pub const CRC32C: u8 = 0x03;
    pub const NOOP: u8 = 0x04;
    pub const UNIQUE_ID: u8 = 0x05;
    pub const SSL: u8 = 0x20;
    pub const SSL_VERSION: u8 = 0x21;
    pub const SSL_CN: u8 = 0x22;
    pub const SSL_CIPHER: u8 = 0x23;
    pub const SSL_SIG_ALG: u8 = 0x24;
    pub const SSL_KEY_ALG: u8 = 0x25;
    pub const NETNS: u8 = 0x30;
    /// The range the spec leaves to applications (hitch sends the client certificate as 0xE0).
    pub const CUSTOM_MIN: u8 = 0xE0;
    pub const CUSTOM_MAX: u8 = 0xEF;
    /// shuck's type for the client's JA4 fingerprint (36 ASCII characters), in the custom range.
    pub const JA4: u8 = 0xE4;
    /// Longest unique ID the spec allows.
    pub const UNIQUE_ID_MAX: usize = 128;

    /// Bits of the SSL TLV's `client` field.
    pub const CLIENT_SSL: u8 = 0x01;
    pub const CLIENT_CERT_CONN: u8 = 0x02;
    pub const CLIENT_CERT_SESS: u8 = 0x04;
}

/// The connection a header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addresses {
    /// A TCP connection from `src` (the client) to `dst` (the address it connected to).
    Tcp { src: SocketAddr, dst: SocketAddr },
    /// Unknown or unsupported family: the receiver uses the connection's own addresses.
    Unknown,
}

impl Addresses {
    /// IPv4-mapped IPv6 addresses (from dual-stack sockets) are announced as IPv4, so a v4 client
    /// looks the same to the backend whichever socket accepted it. Mixed families (possible only
    /// with a received header and a different local family) become `Unknown`.
    pub fn tcp(src: SocketAddr, dst: SocketAddr) -> Addresses {
        let (src, dst) = (canonical(src), canonical(dst));
        if src.is_ipv4() == dst.is_ipv4() {
            Addresses::Tcp { src, dst }
        } else {
            Addresses::Unknown
        }
    }
}

fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// CRC32C (Castagnoli) as the spec's CRC32C TLV wants it.
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// The checksum of `header` computed with the 4 value bytes at `at` taken as zero.
fn crc32c_with_hole(header: &[u8], at: usize) -> u32 {
    let mut d = CRC32C.digest();
    d.update(&header[..at]);
    d.update(&[0; 4]);
    d.update(&header[at + 4..]);
    d.finalize()
}

#[cfg(test)]
mod vectors;
