//! PROXY protocol header encoding (v1 text, v2 binary), pure: no I/O, no allocation.
//!
//! The backend learns the real client address from this header (stud's `--write-proxy`). See the
//! public specification "The PROXY protocol, versions 1 & 2" (haproxy.org).

use std::io::Write;
use std::net::{IpAddr, SocketAddr};

use crate::config::ProxyProtocol;

/// The 12-byte v2 signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The spec's maximum v1 line is 107 bytes.
const MAX_HEADER: usize = 108;

/// An encoded header, on the stack.
#[derive(Clone, Copy)]
pub struct Header {
    bytes: [u8; MAX_HEADER],
    len: usize,
}

impl Header {
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Header({:02x?})", self.as_bytes())
    }
}

/// IPv4-mapped IPv6 addresses (from dual-stack sockets) are written as IPv4, so a v4 client looks
/// the same to the backend whichever socket accepted it.
fn canonical(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), a.port()),
            None => a,
        },
        IpAddr::V4(_) => a,
    }
}

/// Encodes the header announcing a TCP connection from `src` (the client) to `dst` (the address
/// it connected to). Returns `None` for `ProxyProtocol::None`.
pub fn encode(version: ProxyProtocol, src: SocketAddr, dst: SocketAddr) -> Option<Header> {
    let (src, dst) = (canonical(src), canonical(dst));
    let mut h = Header {
        bytes: [0; MAX_HEADER],
        len: 0,
    };
    match version {
        ProxyProtocol::None => return None,
        ProxyProtocol::V1 => {
            let mut w = &mut h.bytes[..];
            let res = match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    write!(w, "PROXY TCP4 {s} {d} {} {}\r\n", src.port(), dst.port())
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    write!(w, "PROXY TCP6 {s} {d} {} {}\r\n", src.port(), dst.port())
                }
                _ => write!(w, "PROXY UNKNOWN\r\n"),
            };
            // The longest v1 line fits MAX_HEADER by the spec's arithmetic.
            debug_assert!(res.is_ok());
            h.len = MAX_HEADER - w.len();
        }
        ProxyProtocol::V2 => {
            h.bytes[..12].copy_from_slice(&V2_SIGNATURE);
            h.bytes[12] = 0x21; // version 2, command PROXY
            let body = &mut h.bytes[16..];
            let (family, len) = match (src.ip(), dst.ip()) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    body[..4].copy_from_slice(&s.octets());
                    body[4..8].copy_from_slice(&d.octets());
                    body[8..10].copy_from_slice(&src.port().to_be_bytes());
                    body[10..12].copy_from_slice(&dst.port().to_be_bytes());
                    (0x11, 12u16) // AF_INET, STREAM
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => {
                    body[..16].copy_from_slice(&s.octets());
                    body[16..32].copy_from_slice(&d.octets());
                    body[32..34].copy_from_slice(&src.port().to_be_bytes());
                    body[34..36].copy_from_slice(&dst.port().to_be_bytes());
                    (0x21, 36u16) // AF_INET6, STREAM
                }
                _ => (0x00, 0u16), // AF_UNSPEC: the receiver uses the socket's own addresses
            };
            h.bytes[13] = family;
            h.bytes[14..16].copy_from_slice(&len.to_be_bytes());
            h.len = 16 + usize::from(len);
        }
    }
    Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v1_lines() {
        let h = encode(
            ProxyProtocol::V1,
            sa("192.0.2.1:56324"),
            sa("198.51.100.2:443"),
        )
        .unwrap();
        assert_eq!(
            h.as_bytes(),
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"
        );
        let h = encode(ProxyProtocol::V1, sa("[2001:db8::1]:1"), sa("[::1]:443")).unwrap();
        assert_eq!(h.as_bytes(), b"PROXY TCP6 2001:db8::1 ::1 1 443\r\n");
        let h = encode(
            ProxyProtocol::V1,
            sa("[::ffff:10.0.0.1]:5"),
            sa("10.0.0.2:6"),
        )
        .unwrap();
        assert_eq!(h.as_bytes(), b"PROXY TCP4 10.0.0.1 10.0.0.2 5 6\r\n");
        assert!(encode(ProxyProtocol::None, sa("1.1.1.1:1"), sa("1.1.1.1:1")).is_none());
    }

    #[test]
    fn v1_longest_line_fits() {
        let a = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535";
        let h = encode(ProxyProtocol::V1, sa(a), sa(a)).unwrap();
        assert_eq!(h.as_bytes().len(), 104);
        assert!(h.as_bytes().ends_with(b"65535 65535\r\n"));
    }

    #[test]
    fn v2_ipv4_matches_spec_layout() {
        let h = encode(
            ProxyProtocol::V2,
            sa("192.0.2.1:56324"),
            sa("198.51.100.2:443"),
        )
        .unwrap();
        // signature | ver/cmd 0x21 | fam 0x11 | len 12 | src | dst | sport 0xdc04 | dport 0x01bb
        let want: [u8; 28] = [
            0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, //
            0x21, 0x11, 0x00, 0x0c, //
            192, 0, 2, 1, 198, 51, 100, 2, //
            0xdc, 0x04, 0x01, 0xbb,
        ];
        assert_eq!(h.as_bytes(), &want);
    }

    #[test]
    fn v2_ipv6_length() {
        let h = encode(
            ProxyProtocol::V2,
            sa("[2001:db8::1]:1"),
            sa("[2001:db8::2]:2"),
        )
        .unwrap();
        assert_eq!(h.as_bytes().len(), 52);
        assert_eq!(&h.as_bytes()[13..16], &[0x21, 0x00, 0x24]);
        assert_eq!(&h.as_bytes()[48..52], &[0, 1, 0, 2]);
    }
}
