//! Encoder → decoder round trip: an arbitrary connection (addresses, TLVs, SSL info) is encoded as
//! v1 or v2, and decoding the result must give back exactly what was encoded.
//!
//! Also checks the encoder's own contracts: `encoded_len` and `encode` agree, one byte less of
//! buffer is `BufferTooSmall`, every strict prefix of the header decodes as `Incomplete`, and
//! bytes after the header (the TLS ClientHello) never change the result.
//!
//! Free-form TLVs (the client certificate type and passthrough TLVs) never use the types the
//! decoder validates (CRC32C, SSL, UNIQUE_ID): an arbitrary value under those types is a caller
//! error the decoder is right to refuse, not a round-trip failure.

#![no_main]

use std::net::{IpAddr, SocketAddr};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use shuck_proxy::proxy_protocol::{
    decode, encode, encoded_len, ssl_tlv, tlv, tlvs, Addresses, EncodeError, Parsed, SslInfo, Tlvs,
    Version, V2_MAX_RECEIVED,
};

#[derive(Arbitrary, Debug)]
enum Ip {
    V4([u8; 4]),
    V6([u8; 16]),
}

impl Ip {
    fn sock(&self, port: u16) -> SocketAddr {
        match *self {
            Ip::V4(b) => SocketAddr::new(IpAddr::from(b), port),
            Ip::V6(b) => SocketAddr::new(IpAddr::from(b), port),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Addrs {
    Unknown,
    Tcp(Ip, u16, Ip, u16),
}

#[derive(Arbitrary, Debug)]
struct Ssl<'a> {
    client: u8,
    verify: u32,
    version: &'a str,
    cn: Option<&'a [u8]>,
    cipher: &'a str,
    sig_alg: Option<&'a str>,
    key_alg: Option<&'a str>,
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    v2: bool,
    addrs: Addrs,
    alpn: Option<&'a [u8]>,
    authority: Option<&'a [u8]>,
    unique_id: Option<&'a [u8]>,
    ssl: Option<Ssl<'a>>,
    client_cert: Option<(u8, &'a [u8])>,
    passthrough: Vec<(u8, &'a [u8])>,
    crc32c: bool,
    cut: u16,
    trailing: &'a [u8],
}

/// Keeps free-form TLVs off the types whose values the decoder checks.
fn free(t: u8) -> u8 {
    match t {
        tlv::CRC32C | tlv::SSL | tlv::UNIQUE_ID => t | 0xE0,
        t => t,
    }
}

fn short(v: &[u8]) -> &[u8] {
    &v[..v.len().min(usize::from(u16::MAX))]
}

fuzz_target!(|input: Input<'_>| {
    let addrs = match &input.addrs {
        Addrs::Unknown => Addresses::Unknown,
        Addrs::Tcp(s, sp, d, dp) => Addresses::tcp(s.sock(*sp), d.sock(*dp)),
    };
    let passthrough: Vec<(u8, &[u8])> = input
        .passthrough
        .iter()
        .map(|&(t, v)| (free(t), short(v)))
        .collect();
    let mut wire = Vec::new();
    for &(t, v) in &passthrough {
        wire.push(t);
        wire.extend_from_slice(&(v.len() as u16).to_be_bytes());
        wire.extend_from_slice(v);
    }
    let ssl = input.ssl.as_ref().map(|s| SslInfo {
        client: s.client,
        verify: s.verify,
        version: s.version,
        cn: s.cn,
        cipher: s.cipher,
        sig_alg: s.sig_alg,
        key_alg: s.key_alg,
    });
    let t = Tlvs {
        alpn: input.alpn,
        authority: input.authority,
        unique_id: input.unique_id,
        ssl,
        client_cert: input.client_cert.map(|(t, v)| (free(t), v)),
        ja4: None,
        passthrough: &wire,
        crc32c: input.crc32c,
    };
    let version = if input.v2 { Version::V2 } else { Version::V1 };

    let n = match encoded_len(version, addrs, &t) {
        Ok(n) => n,
        Err(e) => {
            assert_eq!(e, EncodeError::TooLong);
            let mut big = vec![0; 1 << 18];
            assert_eq!(encode(version, addrs, &t, &mut big), Err(e));
            return;
        }
    };
    let mut buf = vec![0; n];
    assert_eq!(encode(version, addrs, &t, &mut buf), Ok(n));
    assert!(n > 0);
    assert_eq!(
        encode(version, addrs, &t, &mut vec![0; n - 1]),
        Err(EncodeError::BufferTooSmall)
    );

    let got = decode(&buf);
    let mut with_trailing = buf.clone();
    with_trailing.extend_from_slice(input.trailing);
    assert_eq!(decode(&with_trailing), got, "bytes after the header changed the result");

    if version == Version::V2 && n > V2_MAX_RECEIVED {
        // The encoder allows the spec's 64 KiB; the receiver holds at most V2_MAX_RECEIVED.
        assert_eq!(got.map_err(|e| e.label()), Err("too_long"));
        return;
    }
    let Ok(Parsed::Complete { header, len }) = got else {
        panic!("encoded {version} header {buf:02x?} decoded as {got:?}");
    };
    assert_eq!(len, n);
    assert!(!header.local);
    assert_eq!(header.addrs, addrs);
    let cut = usize::from(input.cut) % n;
    let part = decode(&buf[..cut]);
    assert!(
        matches!(part, Ok(Parsed::Incomplete { .. })),
        "prefix of {cut} of {buf:02x?} gave {part:?}"
    );

    if version == Version::V1 {
        assert_eq!(header.version, 1);
        assert!(header.tlvs.is_empty());
        return;
    }
    assert_eq!(header.version, 2);
    if addrs == Addresses::Unknown {
        // AF_UNSPEC: the receiver ignores everything after the fixed part, TLVs included.
        assert!(header.tlvs.is_empty());
        return;
    }

    let got: Vec<(u8, &[u8])> = tlvs(header.tlvs)
        .map(|t| t.expect("TLV of an encoded header"))
        .collect();
    let mut want: Vec<(u8, &[u8])> = Vec::new();
    if let Some(v) = input.alpn {
        want.push((tlv::ALPN, v));
    }
    if let Some(v) = input.authority {
        want.push((tlv::AUTHORITY, v));
    }
    if let Some(v) = input.unique_id {
        want.push((tlv::UNIQUE_ID, &v[..v.len().min(tlv::UNIQUE_ID_MAX)]));
    }
    let ssl_at = want.len();
    if input.ssl.is_some() {
        want.push((tlv::SSL, &[])); // compared field by field below
    }
    if let Some((t, v)) = input.client_cert {
        want.push((free(t), v));
    }
    want.extend_from_slice(&passthrough);
    if input.crc32c {
        want.push((tlv::CRC32C, &[])); // value checked by the decoder
    }
    let kinds = |l: &[(u8, &[u8])]| l.iter().map(|t| t.0).collect::<Vec<_>>();
    assert_eq!(kinds(&got), kinds(&want), "TLV types");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        match w.0 {
            tlv::SSL if i == ssl_at => {}
            tlv::CRC32C if i == want.len() - 1 && input.crc32c => assert_eq!(g.1.len(), 4),
            _ => assert_eq!(g.1, w.1, "TLV {i} of type {:#04x}", w.0),
        }
    }
    if let Some(s) = &input.ssl {
        let got = ssl_tlv(got[ssl_at].1).expect("SSL TLV of an encoded header");
        assert_eq!((got.client, got.verify), (s.client, s.verify));
        let subs: Vec<(u8, &[u8])> = tlvs(got.sub_tlvs)
            .map(|t| t.expect("SSL sub-TLV of an encoded header"))
            .collect();
        let mut want: Vec<(u8, &[u8])> = vec![(tlv::SSL_VERSION, s.version.as_bytes())];
        if let Some(cn) = s.cn {
            want.push((tlv::SSL_CN, cn));
        }
        want.push((tlv::SSL_CIPHER, s.cipher.as_bytes()));
        if let Some(v) = s.sig_alg {
            want.push((tlv::SSL_SIG_ALG, v.as_bytes()));
        }
        if let Some(v) = s.key_alg {
            want.push((tlv::SSL_KEY_ALG, v.as_bytes()));
        }
        assert_eq!(subs, want, "SSL sub-TLVs");
    }
});
