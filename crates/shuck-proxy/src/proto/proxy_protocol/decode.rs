//! Strict header decoding from a stream prefix.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{crc32c_with_hole, tlv, Addresses, V1_MAX, V1_PREFIX, V2_MAX_RECEIVED, V2_SIGNATURE};

/// A complete header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    /// 1 or 2.
    pub version: u8,
    /// v2 LOCAL command (a load balancer's health check): use the connection's own addresses.
    pub local: bool,
    pub addrs: Addresses,
    /// The v2 TLV area in wire form, already checked to be well formed (iterate with [`tlvs`]).
    pub tlvs: &'a [u8],
}

/// The outcome of looking at a stream prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// So far a valid header start; `total` is the header's full length once known (v2).
    Incomplete { total: Option<usize> },
    /// A whole header occupying the first `len` bytes.
    Complete { header: Received<'a>, len: usize },
}

/// Why a header was refused; `label` is the metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the connection does not start with a PROXY protocol header")]
    NotProxy,
    #[error("malformed PROXY v1 line: {0}")]
    V1Malformed(&'static str),
    #[error("PROXY v1 line longer than 107 bytes")]
    V1TooLong,
    #[error("PROXY v2 header with version {0} (only 2 exists)")]
    V2Version(u8),
    #[error("PROXY v2 header with unknown command {0}")]
    V2Command(u8),
    #[error("PROXY v2 header with unknown address family/protocol byte 0x{0:02x}")]
    V2Family(u8),
    #[error("PROXY v2 header of {0} bytes exceeds the 16 KiB limit")]
    V2TooLong(usize),
    #[error("PROXY v2 header too short for its address family")]
    V2Truncated,
    #[error("PROXY v2 TLV overruns the header")]
    TlvTruncated,
    #[error("PROXY v2 CRC32C TLV does not match the header")]
    BadChecksum,
    #[error("PROXY v2 TLV is malformed: {0}")]
    TlvMalformed(&'static str),
}

impl DecodeError {
    pub fn label(self) -> &'static str {
        match self {
            DecodeError::NotProxy => "not_proxy",
            DecodeError::V1Malformed(_) | DecodeError::V1TooLong => "v1_malformed",
            DecodeError::V2Version(_) | DecodeError::V2Command(_) | DecodeError::V2Family(_) => {
                "v2_unsupported"
            }
            DecodeError::V2TooLong(_) => "too_long",
            DecodeError::V2Truncated | DecodeError::TlvTruncated | DecodeError::TlvMalformed(_) => {
                "v2_malformed"
            }
            DecodeError::BadChecksum => "bad_checksum",
        }
    }
}

/// Decodes the header at the start of `buf`, which holds whatever has arrived so far. Never
/// looks past the header, so the caller can consume exactly `len` bytes and hand the rest on.
pub fn decode(buf: &[u8]) -> Result<Parsed<'_>, DecodeError> {
    // Decide the version from as many bytes as there are: a TLS ClientHello (0x16 …) or an HTTP
    // request fails on its first byte rather than after a timeout.
    let v2_prefix = buf.len().min(V2_SIGNATURE.len());
    if buf[..v2_prefix] == V2_SIGNATURE[..v2_prefix] {
        if buf.len() < 16 {
            return Ok(Parsed::Incomplete { total: None });
        }
        return decode_v2(buf);
    }
    let v1_prefix = buf.len().min(V1_PREFIX.len());
    if buf[..v1_prefix] == V1_PREFIX[..v1_prefix] {
        if buf.len() < V1_PREFIX.len() {
            return Ok(Parsed::Incomplete { total: None });
        }
        return decode_v1(buf);
    }
    Err(DecodeError::NotProxy)
}

fn decode_v1(buf: &[u8]) -> Result<Parsed<'_>, DecodeError> {
    // The CR may stand at most at index 105, so that CRLF ends within 107 bytes.
    let window = &buf[..buf.len().min(V1_MAX - 1)];
    let Some(cr) = window.iter().position(|&b| b == b'\r') else {
        if window.contains(&b'\n') {
            return Err(DecodeError::V1Malformed("LF without CR"));
        }
        return if buf.len() >= V1_MAX - 1 {
            Err(DecodeError::V1TooLong)
        } else {
            Ok(Parsed::Incomplete { total: None })
        };
    };
    match buf.get(cr + 1) {
        None => return Ok(Parsed::Incomplete { total: None }),
        Some(b'\n') => {}
        _ => return Err(DecodeError::V1Malformed("CR not followed by LF")),
    }
    let line = &buf[V1_PREFIX.len()..cr];
    // Refused whole as it is refused in part (before the CR has arrived): the answer must not
    // depend on where TCP split the line.
    if line.contains(&b'\n') {
        return Err(DecodeError::V1Malformed("LF without CR"));
    }
    let len = cr + 2;
    let header = |addrs| Parsed::Complete {
        header: Received {
            version: 1,
            local: false,
            addrs,
            tlvs: &[],
        },
        len,
    };
    if line.starts_with(b"UNKNOWN") && matches!(line.get(7), None | Some(b' ')) {
        // The spec lets the sender put anything after UNKNOWN; the receiver ignores it.
        return Ok(header(Addresses::Unknown));
    }
    let text = std::str::from_utf8(line).map_err(|_| DecodeError::V1Malformed("not ASCII"))?;
    let mut f = text.split(' ');
    let (Some(proto), Some(src), Some(dst), Some(sport), Some(dport), None) =
        (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
    else {
        return Err(DecodeError::V1Malformed(
            "expected 'PROXY TCP4|TCP6 SRC DST SPORT DPORT'",
        ));
    };
    let (src, dst): (IpAddr, IpAddr) = match proto {
        "TCP4" => (
            src.parse::<Ipv4Addr>()
                .map_err(|_| DecodeError::V1Malformed("bad IPv4 source"))?
                .into(),
            dst.parse::<Ipv4Addr>()
                .map_err(|_| DecodeError::V1Malformed("bad IPv4 destination"))?
                .into(),
        ),
        "TCP6" => (
            src.parse::<Ipv6Addr>()
                .map_err(|_| DecodeError::V1Malformed("bad IPv6 source"))?
                .into(),
            dst.parse::<Ipv6Addr>()
                .map_err(|_| DecodeError::V1Malformed("bad IPv6 destination"))?
                .into(),
        ),
        _ => {
            return Err(DecodeError::V1Malformed(
                "protocol is not TCP4, TCP6 or UNKNOWN",
            ))
        }
    };
    let (sport, dport) = (port(sport)?, port(dport)?);
    Ok(header(Addresses::Tcp {
        src: SocketAddr::new(src, sport),
        dst: SocketAddr::new(dst, dport),
    }))
}

/// A decimal port: 1–5 digits, no sign, no leading zero.
fn port(s: &str) -> Result<u16, DecodeError> {
    let ok = !s.is_empty()
        && s.len() <= 5
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'));
    ok.then(|| s.parse::<u16>().ok())
        .flatten()
        .ok_or(DecodeError::V1Malformed("bad port"))
}

fn decode_v2(buf: &[u8]) -> Result<Parsed<'_>, DecodeError> {
    let ver_cmd = buf[12];
    if ver_cmd >> 4 != 2 {
        return Err(DecodeError::V2Version(ver_cmd >> 4));
    }
    let local = match ver_cmd & 0x0f {
        0 => true,
        1 => false,
        c => return Err(DecodeError::V2Command(c)),
    };
    let family = buf[13];
    let payload = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    let total = 16 + payload;
    if total > V2_MAX_RECEIVED {
        return Err(DecodeError::V2TooLong(total));
    }
    if buf.len() < total {
        return Ok(Parsed::Incomplete { total: Some(total) });
    }
    let header = &buf[..total];
    let body = &header[16..];
    let complete = |addrs, tlvs| {
        Ok(Parsed::Complete {
            header: Received {
                version: 2,
                local,
                addrs,
                tlvs,
            },
            len: total,
        })
    };
    if local {
        // The spec: a LOCAL header's family and addresses are to be ignored (health checks).
        return complete(Addresses::Unknown, &[]);
    }
    let (addrs, rest) = match family {
        0x00 => return complete(Addresses::Unknown, &[]),
        0x11 => {
            let a = body.get(..12).ok_or(DecodeError::V2Truncated)?;
            let ip = |o: usize| IpAddr::from([a[o], a[o + 1], a[o + 2], a[o + 3]]);
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            (
                Addresses::Tcp {
                    src: SocketAddr::new(ip(0), port(8)),
                    dst: SocketAddr::new(ip(4), port(10)),
                },
                &body[12..],
            )
        }
        0x21 => {
            let a = body.get(..36).ok_or(DecodeError::V2Truncated)?;
            let ip = |o: usize| {
                let mut b = [0u8; 16];
                b.copy_from_slice(&a[o..o + 16]);
                IpAddr::from(b)
            };
            let port = |o: usize| u16::from_be_bytes([a[o], a[o + 1]]);
            (
                Addresses::Tcp {
                    src: SocketAddr::new(ip(0), port(32)),
                    dst: SocketAddr::new(ip(16), port(34)),
                },
                &body[36..],
            )
        }
        // UDP over IPv4/IPv6, UNIX stream/datagram: valid, but not addresses a TCP connection can
        // take. The spec has receivers fall back to UNSPEC (the socket's own addresses) for valid
        // combinations they do not support; the TLVs after the address block still count.
        0x12 | 0x22 | 0x31 | 0x32 => {
            let size = match family {
                0x12 => 12,
                0x22 => 36,
                _ => 216,
            };
            body.get(..size).ok_or(DecodeError::V2Truncated)?;
            (Addresses::Unknown, &body[size..])
        }
        f => return Err(DecodeError::V2Family(f)),
    };
    check_tlvs(header, total - rest.len())?;
    complete(addrs, rest)
}

/// Walks the TLV area once: every TLV inside the header, a CRC32C TLV (if any) right, the SSL TLV
/// (if any) well formed — so later iteration cannot fail.
fn check_tlvs(header: &[u8], start: usize) -> Result<(), DecodeError> {
    let mut at = start;
    for t in tlvs(&header[start..]) {
        let (kind, value) = t?;
        match kind {
            tlv::CRC32C => {
                if value.len() != 4 {
                    return Err(DecodeError::TlvMalformed("CRC32C value is not 4 bytes"));
                }
                let want = u32::from_be_bytes([value[0], value[1], value[2], value[3]]);
                if crc32c_with_hole(header, at + 3) != want {
                    return Err(DecodeError::BadChecksum);
                }
            }
            tlv::SSL => {
                let ssl = ssl_tlv(value)?;
                for sub in tlvs(ssl.sub_tlvs) {
                    sub?;
                }
            }
            tlv::UNIQUE_ID if value.len() > tlv::UNIQUE_ID_MAX => {
                return Err(DecodeError::TlvMalformed("unique ID longer than 128 bytes"));
            }
            _ => {}
        }
        at += 3 + value.len();
    }
    Ok(())
}

/// Iterates over `(type, value)` TLVs in wire form.
pub fn tlvs(raw: &[u8]) -> TlvIter<'_> {
    TlvIter { rest: raw }
}

#[derive(Debug, Clone)]
pub struct TlvIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for TlvIter<'a> {
    type Item = Result<(u8, &'a [u8]), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let Some(&[kind, hi, lo]) = self.rest.get(..3) else {
            self.rest = &[];
            return Some(Err(DecodeError::TlvTruncated));
        };
        let len = usize::from(u16::from_be_bytes([hi, lo]));
        let Some(value) = self.rest.get(3..3 + len) else {
            self.rest = &[];
            return Some(Err(DecodeError::TlvTruncated));
        };
        self.rest = &self.rest[3 + len..];
        Some(Ok((kind, value)))
    }
}

/// The SSL TLV's fixed part and its sub-TLVs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SslTlv<'a> {
    pub client: u8,
    pub verify: u32,
    pub sub_tlvs: &'a [u8],
}

pub fn ssl_tlv(value: &[u8]) -> Result<SslTlv<'_>, DecodeError> {
    let Some(&[client, a, b, c, d]) = value.get(..5) else {
        return Err(DecodeError::TlvMalformed("SSL TLV shorter than 5 bytes"));
    };
    Ok(SslTlv {
        client,
        verify: u32::from_be_bytes([a, b, c, d]),
        sub_tlvs: &value[5..],
    })
}

#[cfg(test)]
mod tests {
    use super::super::{encode, encoded_len, SslInfo, Tlvs, Version};
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_prefix_of_a_valid_header_is_incomplete_never_an_error() {
        let tlvs = Tlvs {
            alpn: Some(b"http/1.1"),
            authority: Some(b"example.test"),
            crc32c: true,
            ..Tlvs::default()
        };
        for version in [Version::V1, Version::V2] {
            let addrs = Addresses::tcp(sa("[2001:db8::1]:1000"), sa("[2001:db8::2]:443"));
            let mut buf = vec![0; encoded_len(version, addrs, &tlvs).unwrap()];
            encode(version, addrs, &tlvs, &mut buf).unwrap();
            for cut in 0..buf.len() {
                assert!(
                    matches!(decode(&buf[..cut]), Ok(Parsed::Incomplete { .. })),
                    "{version} cut at {cut}"
                );
            }
            // Bytes after the header (the TLS ClientHello) are never part of it.
            buf.extend_from_slice(&[0x16, 0x03, 0x01]);
            let Ok(Parsed::Complete { header, len }) = decode(&buf) else {
                panic!("{version}: no header")
            };
            assert_eq!(len, buf.len() - 3);
            assert_eq!(header.addrs, addrs);
        }
    }

    #[test]
    fn round_trip_with_tlvs_and_checksum() {
        let tlvs = Tlvs {
            alpn: Some(b"h2"),
            authority: Some(b"www.example.test"),
            unique_id: Some(b"abc-1"),
            ssl: Some(SslInfo {
                client: tlv::CLIENT_SSL | tlv::CLIENT_CERT_CONN,
                verify: 0,
                version: "TLSv1.3",
                cn: Some(b"client one"),
                cipher: "TLS_AES_128_GCM_SHA256",
                sig_alg: Some("ecdsa-with-SHA256"),
                key_alg: Some("EC256"),
            }),
            client_cert: Some((0xE0, b"\x30\x03\x02\x01\x01")),
            ja4: Some(b"t13d1516h2_8daaf6152771_e5627efa2ab1"),
            passthrough: &[0xEA, 0, 3, b'v', b'p', b'c'],
            crc32c: true,
        };
        let addrs = Addresses::tcp(sa("192.0.2.1:5000"), sa("192.0.2.2:443"));
        let mut buf = vec![0; encoded_len(Version::V2, addrs, &tlvs).unwrap()];
        encode(Version::V2, addrs, &tlvs, &mut buf).unwrap();
        let Ok(Parsed::Complete { header, .. }) = decode(&buf) else {
            panic!("no header")
        };
        let got: Vec<(u8, &[u8])> = tlvs_of(header.tlvs);
        let kinds: Vec<u8> = got.iter().map(|t| t.0).collect();
        assert_eq!(kinds, [0x01, 0x02, 0x05, 0x20, 0xE0, 0xE4, 0xEA, 0x03]);
        assert_eq!(got[1].1, b"www.example.test");
        assert_eq!(got[5].1, b"t13d1516h2_8daaf6152771_e5627efa2ab1");
        let ssl = ssl_tlv(got[3].1).unwrap();
        assert_eq!((ssl.client, ssl.verify), (3, 0));
        let subs = tlvs_of(ssl.sub_tlvs);
        assert_eq!(
            subs,
            [
                (0x21, &b"TLSv1.3"[..]),
                (0x22, b"client one"),
                (0x23, b"TLS_AES_128_GCM_SHA256"),
                (0x24, b"ecdsa-with-SHA256"),
                (0x25, b"EC256"),
            ]
        );
        // Any flipped bit in the header is caught by the checksum or by the structure checks.
        for i in 16..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(
                !matches!(decode(&bad), Ok(Parsed::Complete { header: h, .. }) if h == header),
                "flip at {i} went unnoticed"
            );
        }
    }

    fn tlvs_of(raw: &[u8]) -> Vec<(u8, &[u8])> {
        tlvs(raw).map(Result::unwrap).collect()
    }

    #[test]
    fn tls_and_http_fail_at_once() {
        assert_eq!(decode(&[0x16, 0x03, 0x01]), Err(DecodeError::NotProxy));
        assert_eq!(decode(b"GET / HTTP/1.1\r\n"), Err(DecodeError::NotProxy));
        assert_eq!(decode(b"PROXZ"), Err(DecodeError::NotProxy));
        assert_eq!(decode(b"\r\n\r\n\0\r\nQUIX"), Err(DecodeError::NotProxy));
    }
}
