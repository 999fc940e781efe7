//! Header encoding into a caller-provided buffer.

use std::io::Write;
use std::net::IpAddr;

use super::{crc32c_with_hole, tlv, Addresses, Version, V2_SIGNATURE};

/// What the TLS handshake negotiated, for the SSL TLV (0x20) and its sub-TLVs.
#[derive(Debug, Clone, Copy, Default)]
pub struct SslInfo<'a> {
    /// `tlv::CLIENT_*` bits.
    pub client: u8,
    /// Zero when the client presented a certificate and it was verified, non-zero otherwise.
    pub verify: u32,
    pub version: &'a str,
    /// Subject common name of the client certificate.
    pub cn: Option<&'a [u8]>,
    pub cipher: &'a str,
    /// Signature algorithm of the certificate shuck presented.
    pub sig_alg: Option<&'a str>,
    /// Key algorithm of the certificate shuck presented (e.g. "EC256", "RSA2048").
    pub key_alg: Option<&'a str>,
}

/// The TLVs to add to a v2 header; v1 carries none.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tlvs<'a> {
    pub alpn: Option<&'a [u8]>,
    pub authority: Option<&'a [u8]>,
    pub unique_id: Option<&'a [u8]>,
    pub ssl: Option<SslInfo<'a>>,
    /// The client certificate (DER) under a custom type.
    pub client_cert: Option<(u8, &'a [u8])>,
    /// The client's JA4 fingerprint (under `tlv::JA4`).
    pub ja4: Option<&'a [u8]>,
    /// TLVs already in wire form, passed on from a received header.
    pub passthrough: &'a [u8],
    /// Append a CRC32C TLV covering the whole header.
    pub crc32c: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("the PROXY v2 header would exceed 65535 bytes of payload")]
    TooLong,
    #[error("the output buffer is too small for the PROXY header")]
    BufferTooSmall,
}

/// A write cursor that only counts when it has no buffer, so one code path both sizes and writes.
struct Out<'a> {
    buf: Option<&'a mut [u8]>,
    pos: usize,
}

impl Out<'_> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), EncodeError> {
        if let Some(buf) = self.buf.as_deref_mut() {
            buf.get_mut(self.pos..self.pos + bytes.len())
                .ok_or(EncodeError::BufferTooSmall)?
                .copy_from_slice(bytes);
        }
        self.pos += bytes.len();
        Ok(())
    }

    fn patch_u16(&mut self, at: usize, v: u16) {
        if let Some(buf) = self.buf.as_deref_mut() {
            buf[at..at + 2].copy_from_slice(&v.to_be_bytes());
        }
    }

    /// Starts a TLV of type `t`; returns where its length goes, for [`Out::end_tlv`].
    fn begin_tlv(&mut self, t: u8) -> Result<usize, EncodeError> {
        self.put(&[t, 0, 0])?;
        Ok(self.pos - 2)
    }

    fn end_tlv(&mut self, len_at: usize) -> Result<(), EncodeError> {
        let len = u16::try_from(self.pos - len_at - 2).map_err(|_| EncodeError::TooLong)?;
        self.patch_u16(len_at, len);
        Ok(())
    }

    fn tlv(&mut self, t: u8, value: &[u8]) -> Result<(), EncodeError> {
        let at = self.begin_tlv(t)?;
        self.put(value)?;
        self.end_tlv(at)
    }
}

/// Bytes [`encode`] will write.
pub fn encoded_len(
    version: Version,
    addrs: Addresses,
    tlvs: &Tlvs<'_>,
) -> Result<usize, EncodeError> {
    let mut out = Out { buf: None, pos: 0 };
    write(&mut out, version, addrs, tlvs)?;
    Ok(out.pos)
}

/// Writes the header into `buf` and returns its length.
pub fn encode(
    version: Version,
    addrs: Addresses,
    tlvs: &Tlvs<'_>,
    buf: &mut [u8],
) -> Result<usize, EncodeError> {
    let mut out = Out {
        buf: Some(buf),
        pos: 0,
    };
    write(&mut out, version, addrs, tlvs)?;
    Ok(out.pos)
}

fn write(
    out: &mut Out<'_>,
    version: Version,
    addrs: Addresses,
    tlvs: &Tlvs<'_>,
) -> Result<(), EncodeError> {
    match version {
        Version::V1 => write_v1(out, addrs),
        Version::V2 => write_v2(out, addrs, tlvs),
    }
}

fn write_v1(out: &mut Out<'_>, addrs: Addresses) -> Result<(), EncodeError> {
    // The longest line is 107 bytes (spec), so a stack buffer always suffices.
    let mut line = [0u8; super::V1_MAX];
    let mut w = &mut line[..];
    let res = match addrs {
        Addresses::Tcp { src, dst } => match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                write!(w, "PROXY TCP4 {s} {d} {} {}\r\n", src.port(), dst.port())
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                write!(w, "PROXY TCP6 {s} {d} {} {}\r\n", src.port(), dst.port())
            }
            _ => write!(w, "PROXY UNKNOWN\r\n"),
        },
        Addresses::Unknown => write!(w, "PROXY UNKNOWN\r\n"),
    };
    debug_assert!(res.is_ok(), "a v1 line never exceeds 107 bytes");
    let len = super::V1_MAX - w.len();
    out.put(&line[..len])
}

fn write_v2(out: &mut Out<'_>, addrs: Addresses, tlvs: &Tlvs<'_>) -> Result<(), EncodeError> {
    let start = out.pos;
    out.put(&V2_SIGNATURE)?;
    let family = match addrs {
        Addresses::Tcp { src, .. } if src.is_ipv4() => 0x11, // AF_INET, STREAM
        Addresses::Tcp { .. } => 0x21,                       // AF_INET6, STREAM
        Addresses::Unknown => 0x00,                          // AF_UNSPEC
    };
    out.put(&[0x21, family, 0, 0])?; // version 2, command PROXY; length patched below
    let len_at = out.pos - 2;
    if let Addresses::Tcp { src, dst } = addrs {
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                out.put(&s.octets())?;
                out.put(&d.octets())?;
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                out.put(&s.octets())?;
                out.put(&d.octets())?;
            }
            // Addresses::tcp never builds a mixed pair.
            _ => return Err(EncodeError::TooLong),
        }
        out.put(&src.port().to_be_bytes())?;
        out.put(&dst.port().to_be_bytes())?;
    }
    if let Some(v) = tlvs.alpn {
        out.tlv(tlv::ALPN, v)?;
    }
    if let Some(v) = tlvs.authority {
        out.tlv(tlv::AUTHORITY, v)?;
    }
    if let Some(v) = tlvs.unique_id {
        out.tlv(tlv::UNIQUE_ID, &v[..v.len().min(tlv::UNIQUE_ID_MAX)])?;
    }
    if let Some(ssl) = &tlvs.ssl {
        let at = out.begin_tlv(tlv::SSL)?;
        out.put(&[ssl.client])?;
        out.put(&ssl.verify.to_be_bytes())?;
        out.tlv(tlv::SSL_VERSION, ssl.version.as_bytes())?;
        if let Some(cn) = ssl.cn {
            out.tlv(tlv::SSL_CN, cn)?;
        }
        out.tlv(tlv::SSL_CIPHER, ssl.cipher.as_bytes())?;
        if let Some(v) = ssl.sig_alg {
            out.tlv(tlv::SSL_SIG_ALG, v.as_bytes())?;
        }
        if let Some(v) = ssl.key_alg {
            out.tlv(tlv::SSL_KEY_ALG, v.as_bytes())?;
        }
        out.end_tlv(at)?;
    }
    if let Some((t, der)) = tlvs.client_cert {
        out.tlv(t, der)?;
    }
    if let Some(v) = tlvs.ja4 {
        out.tlv(tlv::JA4, v)?;
    }
    out.put(tlvs.passthrough)?;
    let crc_at = if tlvs.crc32c {
        out.put(&[tlv::CRC32C, 0, 4, 0, 0, 0, 0])?;
        Some(out.pos - 4)
    } else {
        None
    };
    let payload = u16::try_from(out.pos - len_at - 2).map_err(|_| EncodeError::TooLong)?;
    out.patch_u16(len_at, payload);
    if let (Some(at), Some(buf)) = (crc_at, out.buf.as_deref_mut()) {
        let crc = crc32c_with_hole(&buf[start..out.pos], at - start);
        buf[at..at + 4].copy_from_slice(&crc.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn enc(version: Version, src: &str, dst: &str, tlvs: &Tlvs<'_>) -> Vec<u8> {
        let addrs = Addresses::tcp(sa(src), sa(dst));
        let n = encoded_len(version, addrs, tlvs).unwrap();
        let mut buf = vec![0; n];
        assert_eq!(encode(version, addrs, tlvs, &mut buf), Ok(n));
        buf
    }

    #[test]
    fn v1_lines() {
        let none = Tlvs::default();
        let v1 = Version::V1;
        assert_eq!(
            enc(v1, "192.0.2.1:56324", "198.51.100.2:443", &none),
            b"PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"
        );
        assert_eq!(
            enc(v1, "[2001:db8::1]:1", "[::1]:443", &none),
            b"PROXY TCP6 2001:db8::1 ::1 1 443\r\n"
        );
        assert_eq!(
            enc(v1, "[::ffff:10.0.0.1]:5", "10.0.0.2:6", &none),
            b"PROXY TCP4 10.0.0.1 10.0.0.2 5 6\r\n"
        );
        assert_eq!(
            enc(v1, "[2001:db8::1]:5", "10.0.0.2:6", &none),
            b"PROXY UNKNOWN\r\n"
        );
    }

    #[test]
    fn v1_longest_line_fits() {
        let a = "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535";
        let h = enc(Version::V1, a, a, &Tlvs::default());
        assert_eq!(h.len(), 104);
        assert!(h.ends_with(b"65535 65535\r\n"));
    }

    #[test]
    fn v2_ipv4_matches_spec_layout() {
        let h = enc(
            Version::V2,
            "192.0.2.1:56324",
            "198.51.100.2:443",
            &Tlvs::default(),
        );
        // signature | ver/cmd 0x21 | fam 0x11 | len 12 | src | dst | sport 0xdc04 | dport 0x01bb
        let want: [u8; 28] = [
            0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, //
            0x21, 0x11, 0x00, 0x0c, //
            192, 0, 2, 1, 198, 51, 100, 2, //
            0xdc, 0x04, 0x01, 0xbb,
        ];
        assert_eq!(h, want);
    }

    #[test]
    fn v2_tlvs_layout() {
        let tlvs = Tlvs {
            alpn: Some(b"h2"),
            authority: Some(b"a.test"),
            ssl: Some(SslInfo {
                client: tlv::CLIENT_SSL,
                verify: 0,
                version: "TLSv1.3",
                cn: None,
                cipher: "X",
                sig_alg: None,
                key_alg: None,
            }),
            ..Tlvs::default()
        };
        let h = enc(Version::V2, "[2001:db8::1]:1", "[2001:db8::2]:2", &tlvs);
        let body = &h[16 + 36..];
        // ALPN "h2" | AUTHORITY "a.test" | SSL { client 1, verify 0, VERSION "TLSv1.3", CIPHER "X" }
        let want: &[u8] = &[
            0x01, 0, 2, b'h', b'2', //
            0x02, 0, 6, b'a', b'.', b't', b'e', b's', b't', //
            0x20, 0, 19, 0x01, 0, 0, 0, 0, //
            0x21, 0, 7, b'T', b'L', b'S', b'v', b'1', b'.', b'3', //
            0x23, 0, 1, b'X',
        ];
        assert_eq!(body, want);
        assert_eq!(&h[13..16], &[0x21, 0, (36 + want.len()) as u8]);
    }

    #[test]
    fn too_small_buffer_and_too_long_payload_are_errors() {
        let addrs = Addresses::tcp(sa("1.2.3.4:1"), sa("1.2.3.4:2"));
        let mut small = [0u8; 20];
        assert_eq!(
            encode(Version::V2, addrs, &Tlvs::default(), &mut small),
            Err(EncodeError::BufferTooSmall)
        );
        let big = vec![0u8; 70_000];
        let tlvs = Tlvs {
            client_cert: Some((0xE0, &big)),
            ..Tlvs::default()
        };
        assert_eq!(
            encoded_len(Version::V2, addrs, &tlvs),
            Err(EncodeError::TooLong)
        );
    }
}
