//! The JA4 TLS client fingerprint (FoxIO's, BSD-3-Clause), drawn from the ClientHello bytes the
//! hello stage already read: `t13d1516h2_8daaf6152771_e5627efa2ab1` is
//! - `t` (TCP), the highest version offered (`13`), `d` with a server name (`i` without), the
//!   cipher suites and extensions counted (two digits each, at most 99), the first and last
//!   characters of the first ALPN value (`00` without one);
//! - the first 12 hex digits of SHA-256 over the cipher suites, sorted, as 4-digit hex joined by
//!   commas;
//! - the same over the extensions, sorted, without SNI and ALPN, then `_` and the signature
//!   algorithms in the client's order.
//!
//! GREASE values (RFC 8701) are left out everywhere. A hello that cannot be read gives `None`.

use std::fmt::Write as _;

use super::hello_fields::{self, Reader};

const EXT_SERVER_NAME: u16 = 0x0000;
const EXT_SIGNATURE_ALGORITHMS: u16 = 0x000d;
const EXT_ALPN: u16 = 0x0010;
const EXT_SUPPORTED_VERSIONS: u16 = 0x002b;

/// A JA4 fingerprint: 36 ASCII characters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ja4([u8; 36]);

impl Ja4 {
    pub(crate) fn as_str(&self) -> &str {
        // Only ASCII is ever written into it.
        std::str::from_utf8(&self.0).unwrap_or("")
    }
}

#[cfg(test)]
impl Ja4 {
    /// A fingerprint from its text (36 ASCII characters), for tests elsewhere.
    pub(crate) fn from_str_for_tests(s: &str) -> Ja4 {
        Ja4(s.as_bytes().try_into().expect("36 characters"))
    }
}

impl std::fmt::Display for Ja4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for Ja4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fingerprint of the ClientHello at the start of `stream` (records, as received).
pub(crate) fn of_stream(stream: &[u8]) -> Option<Ja4> {
    of_message(&hello_fields::client_hello(stream)?)
}

/// What JA4 reads of a hello.
#[derive(Default)]
struct Parts<'a> {
    ciphers: Vec<u16>,
    extensions: Vec<u16>,
    signature_algorithms: Vec<u16>,
    sni: bool,
    alpn: Option<&'a [u8]>,
    /// The highest of supported_versions, else the legacy version.
    version: u16,
}

fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// The fingerprint of a whole ClientHello message (handshake header included).
fn of_message(message: &[u8]) -> Option<Ja4> {
    let p = parts(message)?;
    let mut out = String::with_capacity(36);
    let _ = write!(
        out,
        "t{}{}{:02}{:02}{}_",
        version(p.version),
        if p.sni { 'd' } else { 'i' },
        p.ciphers.len().min(99),
        p.extensions.len().min(99),
        alpn_chars(p.alpn)
    );
    let mut ciphers = p.ciphers;
    ciphers.sort_unstable();
    out.push_str(&truncated_hash(&hex_list(&ciphers), ciphers.is_empty()));
    out.push('_');
    let mut exts: Vec<u16> = p
        .extensions
        .into_iter()
        .filter(|&e| e != EXT_SERVER_NAME && e != EXT_ALPN)
        .collect();
    exts.sort_unstable();
    let mut c = hex_list(&exts);
    if !p.signature_algorithms.is_empty() {
        c.push('_');
        c.push_str(&hex_list(&p.signature_algorithms));
    }
    out.push_str(&truncated_hash(&c, exts.is_empty()));
    out.as_bytes().try_into().ok().map(Ja4)
}

fn parts(message: &[u8]) -> Option<Parts<'_>> {
    let mut r = Reader(message.get(4..)?);
    let legacy = r.u16()?;
    r.take(32)?; // random
    r.vec8()?; // session ID
    let mut p = Parts {
        ciphers: u16s(r.vec16()?).filter(|c| !is_grease(*c)).collect(),
        version: legacy,
        ..Parts::default()
    };
    r.vec8()?; // compression methods
    if r.0.is_empty() {
        return Some(p);
    }
    let mut exts = Reader(r.vec16()?);
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let data = exts.vec16()?;
        if is_grease(kind) {
            continue;
        }
        p.extensions.push(kind);
        match kind {
            EXT_SERVER_NAME => p.sni = true,
            EXT_ALPN => p.alpn = Reader(Reader(data).vec16()?).vec8(),
            EXT_SIGNATURE_ALGORITHMS => {
                p.signature_algorithms = u16s(Reader(data).vec16()?)
                    .filter(|v| !is_grease(*v))
                    .collect();
            }
            EXT_SUPPORTED_VERSIONS => {
                let offered = u16s(Reader(data).vec8()?).filter(|v| !is_grease(*v)).max();
                p.version = offered.unwrap_or(legacy);
            }
            _ => {}
        }
    }
    Some(p)
}

fn u16s(bytes: &[u8]) -> impl Iterator<Item = u16> + '_ {
    bytes
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
}

fn version(v: u16) -> &'static str {
    match v {
        0x0304 => "13",
        0x0303 => "12",
        0x0302 => "11",
        0x0301 => "10",
        0x0300 => "s3",
        0x0002 => "s2",
        _ => "00",
    }
}

/// The first and last characters of the first ALPN value; where either is not alphanumeric,
/// the first hex digit of its first byte and the last hex digit of its last byte.
fn alpn_chars(alpn: Option<&[u8]>) -> String {
    let Some((&first, &last)) = alpn.and_then(|a| Some((a.first()?, a.last()?))) else {
        return "00".into();
    };
    if first.is_ascii_alphanumeric() && last.is_ascii_alphanumeric() {
        format!("{}{}", char::from(first), char::from(last))
    } else {
        format!("{:x}{:x}", first >> 4, last & 0x0f)
    }
}

fn hex_list(values: &[u16]) -> String {
    let mut s = String::with_capacity(values.len() * 5);
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{v:04x}");
    }
    s
}

/// The first 12 hex digits of SHA-256 of `text`; twelve zeros for an empty list.
fn truncated_hash(text: &str, empty: bool) -> String {
    if empty {
        return "000000000000".into();
    }
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
    digest.as_ref()[..6].iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GREASE: u16 = 0x3a3a;

    /// A ClientHello message with these cipher suites and extensions, in this order.
    fn hello(ciphers: &[u16], exts: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(32);
        body.extend([9u8; 32]);
        body.extend(u16::try_from(ciphers.len() * 2).expect("len").to_be_bytes());
        for c in ciphers {
            body.extend(c.to_be_bytes());
        }
        body.extend([1, 0]);
        let mut e = Vec::new();
        for (kind, data) in exts {
            e.extend(kind.to_be_bytes());
            e.extend(u16::try_from(data.len()).expect("len").to_be_bytes());
            e.extend(data);
        }
        body.extend(u16::try_from(e.len()).expect("len").to_be_bytes());
        body.extend(e);
        let mut msg = vec![1, 0];
        msg.extend(u16::try_from(body.len()).expect("len").to_be_bytes());
        msg.extend(body);
        msg
    }

    fn list16(values: &[u16]) -> Vec<u8> {
        let mut v = u16::try_from(values.len() * 2)
            .expect("len")
            .to_be_bytes()
            .to_vec();
        for x in values {
            v.extend(x.to_be_bytes());
        }
        v
    }

    fn sni(name: &str) -> Vec<u8> {
        let mut entry = vec![0];
        entry.extend(u16::try_from(name.len()).expect("len").to_be_bytes());
        entry.extend(name.as_bytes());
        let mut v = u16::try_from(entry.len())
            .expect("len")
            .to_be_bytes()
            .to_vec();
        v.extend(entry);
        v
    }

    fn alpn(protocols: &[&[u8]]) -> Vec<u8> {
        let mut list = Vec::new();
        for p in protocols {
            list.push(u8::try_from(p.len()).expect("len"));
            list.extend(*p);
        }
        let mut v = u16::try_from(list.len())
            .expect("len")
            .to_be_bytes()
            .to_vec();
        v.extend(list);
        v
    }

    fn versions(v: &[u16]) -> Vec<u8> {
        let mut out = vec![u8::try_from(v.len() * 2).expect("len")];
        for x in v {
            out.extend(x.to_be_bytes());
        }
        out
    }

    const SIGNATURE_ALGORITHMS: [u16; 8] = [
        0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
    ];

    /// Chrome's cipher suites in the order it sends them, GREASE first.
    const CHROME_CIPHERS: [u16; 16] = [
        GREASE, 0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013,
        0xc014, 0x009c, 0x009d, 0x002f, 0x0035,
    ];

    /// A hello with `kinds` as its extensions (SNI, ALPN, versions and signature algorithms
    /// with their contents, the rest empty), GREASE first and last.
    fn chrome_like(kinds: &[u16]) -> Vec<u8> {
        let mut exts = vec![(GREASE, vec![])];
        for &k in kinds {
            let data = match k {
                EXT_SERVER_NAME => sni("example.com"),
                EXT_ALPN => alpn(&[b"h2", b"http/1.1"]),
                EXT_SUPPORTED_VERSIONS => versions(&[0x5a5a, 0x0304, 0x0303]),
                EXT_SIGNATURE_ALGORITHMS => list16(&SIGNATURE_ALGORITHMS),
                _ => vec![],
            };
            exts.push((k, data));
        }
        exts.push((0x1a1a, vec![0]));
        hello(&CHROME_CIPHERS, &exts)
    }

    /// FoxIO's worked example in JA4's technical details: its raw form
    /// `t13d1516h2_002f,…,cca9_0005,000a,…,4469,ff01_0403,…,0601`.
    #[test]
    fn the_published_example_gives_its_fingerprint() {
        let kinds = [
            0x001b, 0x0000, 0x0033, 0x0010, 0x4469, 0x0017, 0x002d, 0x000d, 0x0005, 0x0023, 0x0012,
            0x002b, 0xff01, 0x000b, 0x000a, 0x0015,
        ];
        let ja4 = of_message(&chrome_like(&kinds)).expect("a fingerprint");
        assert_eq!(ja4.as_str(), "t13d1516h2_8daaf6152771_e5627efa2ab1");
    }

    /// A recent Chrome's hello as a public fingerprinting service reported it (ECH, the newer
    /// ALPS code point): `t13d1516h2_8daaf6152771_d8a2da3f94cd`.
    #[test]
    fn a_recent_chrome_gives_its_published_fingerprint() {
        let kinds = [
            0x002d, 0x0033, 0x0010, 0xfe0d, 0x0017, 0x44cd, 0x0000, 0x000b, 0x000a, 0x002b, 0xff01,
            0x0023, 0x0012, 0x0005, 0x000d, 0x001b,
        ];
        let ja4 = of_message(&chrome_like(&kinds)).expect("a fingerprint");
        assert_eq!(ja4.as_str(), "t13d1516h2_8daaf6152771_d8a2da3f94cd");
    }

    #[test]
    fn no_sni_no_alpn_no_extensions_and_odd_alpn() {
        let bare = hello(&[0x1301], &[]);
        let ja4 = of_message(&bare).expect("a fingerprint");
        assert!(ja4.as_str().starts_with("t12i010000_"), "{ja4}");
        assert!(ja4.as_str().ends_with("_000000000000"), "{ja4}");
        assert_eq!(alpn_chars(Some(b"h2")), "h2");
        assert_eq!(alpn_chars(Some(&[0xab, b'x', 0xcd])), "ad");
        assert_eq!(alpn_chars(None), "00");
        assert!(of_message(&bare[..20]).is_none(), "cut short");
        assert!(is_grease(0x0a0a) && is_grease(0xfafa) && !is_grease(0x0a1a));
    }
}
