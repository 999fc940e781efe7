//! Runs the decoder over the commented vectors in tests/data/proxy-protocol-vectors.txt, and a
//! bounded mutation run over them (the fuzz target's job in miniature, on stable, in every CI).

use std::net::SocketAddr;

use super::{crc32c_with_hole, decode, tlvs, Addresses, Parsed};

const VECTORS: &str = include_str!("../../../tests/data/proxy-protocol-vectors.txt");

struct Vector {
    expect: String,
    tlv_types: Option<Vec<u8>>,
    input: Vec<u8>,
    line: usize,
}

fn unescape(quoted: &str) -> Vec<u8> {
    let s = quoted.trim().trim_matches('"');
    let mut out = Vec::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c as u8);
            continue;
        }
        match chars.next() {
            Some('r') => out.push(b'\r'),
            Some('n') => out.push(b'\n'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                out.push(u8::from_str_radix(&hex, 16).unwrap());
            }
            other => panic!("bad escape {other:?}"),
        }
    }
    out
}

fn parse_vectors() -> Vec<Vector> {
    let mut out = Vec::new();
    let mut block: Vec<(usize, &str)> = Vec::new();
    let lines = VECTORS.lines().enumerate().chain([(usize::MAX, "")]);
    for (no, raw) in lines {
        let content = raw.split('#').next().unwrap_or("").trim();
        if raw.trim().is_empty() {
            if !block.is_empty() {
                out.push(to_vector(&block));
                block.clear();
            }
            continue;
        }
        if !content.is_empty() {
            block.push((no + 1, content));
        }
    }
    out
}

fn to_vector(block: &[(usize, &str)]) -> Vector {
    let (line, expect) = block[0];
    let mut rest = &block[1..];
    let tlv_types = rest
        .first()
        .and_then(|(_, l)| l.strip_prefix("tlvs "))
        .map(|l| {
            l.split(',')
                .map(|t| u8::from_str_radix(t.trim(), 16).unwrap())
                .collect()
        });
    if tlv_types.is_some() {
        rest = &rest[1..];
    }
    let mut input = Vec::new();
    let mut crc_at = None;
    for (_, l) in rest {
        if l.starts_with('"') {
            input.extend(unescape(l));
            continue;
        }
        for tok in l.split_whitespace() {
            if tok == "CRC" {
                crc_at = Some(input.len());
                input.extend([0; 4]);
            } else {
                input.push(u8::from_str_radix(tok, 16).unwrap());
            }
        }
    }
    if let Some(at) = crc_at {
        let crc = crc32c_with_hole(&input, at);
        input[at..at + 4].copy_from_slice(&crc.to_be_bytes());
    }
    Vector {
        expect: expect.to_string(),
        tlv_types,
        input,
        line,
    }
}

fn check(v: &Vector) {
    let got = decode(&v.input);
    let words: Vec<&str> = v.expect.split_whitespace().collect();
    let ctx = format!("vector at line {}: {:?} gave {got:?}", v.line, v.expect);
    match (words.as_slice(), got) {
        (["ok", src, dst, len], Ok(Parsed::Complete { header, len: n })) => {
            let src: SocketAddr = src.parse().unwrap();
            let dst: SocketAddr = dst.parse().unwrap();
            assert_eq!(header.addrs, Addresses::Tcp { src, dst }, "{ctx}");
            assert_eq!(n, len.parse::<usize>().unwrap(), "{ctx}");
            assert!(!header.local, "{ctx}");
            if let Some(want) = &v.tlv_types {
                let kinds: Vec<u8> = tlvs(header.tlvs).map(|t| t.unwrap().0).collect();
                assert_eq!(&kinds, want, "{ctx}");
            }
        }
        (["unknown", len], Ok(Parsed::Complete { header, len: n })) => {
            assert_eq!(header.addrs, Addresses::Unknown, "{ctx}");
            assert!(!header.local, "{ctx}");
            assert_eq!(n, len.parse::<usize>().unwrap(), "{ctx}");
        }
        (["local", len], Ok(Parsed::Complete { header, len: n })) => {
            assert!(header.local, "{ctx}");
            assert_eq!(n, len.parse::<usize>().unwrap(), "{ctx}");
        }
        (["incomplete"], Ok(Parsed::Incomplete { .. })) => {}
        (["err", label], Err(e)) => assert_eq!(e.label(), *label, "{ctx}"),
        _ => panic!("{ctx}"),
    }
}

#[test]
fn decoder_vectors() {
    let vectors = parse_vectors();
    let exp: Vec<_> = vectors
        .iter()
        .map(|v| (v.line, v.expect.as_str()))
        .collect();
    assert!(
        vectors.len() >= 39,
        "only {} vectors parsed: {exp:?}",
        vectors.len()
    );
    for v in &vectors {
        check(v);
    }
}

/// A small xorshift generator: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Mutated vectors never panic, and whatever is accepted is self-consistent: the length is within
/// the input, and the same bytes decode the same way when nothing follows them.
#[test]
fn mutated_vectors_never_panic_and_stay_consistent() {
    let vectors = parse_vectors();
    let mut rng = Rng(0x5eed_cafe_f00d_u64);
    for round in 0..60_000 {
        let base = &vectors[rng.below(vectors.len())].input;
        let mut input = base.clone();
        for _ in 0..=rng.below(4) {
            match rng.below(4) {
                0 if !input.is_empty() => {
                    let i = rng.below(input.len());
                    input[i] = rng.next() as u8;
                }
                1 if !input.is_empty() => input.truncate(rng.below(input.len())),
                2 => input.push(rng.next() as u8),
                _ if !input.is_empty() => {
                    let i = rng.below(input.len());
                    input[i] ^= 1 << rng.below(8);
                }
                _ => {}
            }
        }
        if let Ok(Parsed::Complete { header, len }) = decode(&input) {
            assert!(len <= input.len(), "round {round}: {input:02x?}");
            assert_eq!(
                decode(&input[..len]),
                Ok(Parsed::Complete { header, len }),
                "round {round}: {input:02x?}"
            );
            for t in tlvs(header.tlvs) {
                assert!(t.is_ok(), "round {round}: accepted header with bad TLVs");
            }
            // However TCP splits it, an accepted header is 'incomplete' until its last byte:
            // otherwise the answer would depend on segment boundaries.
            for cut in 0..len {
                assert!(
                    matches!(decode(&input[..cut]), Ok(Parsed::Incomplete { .. })),
                    "round {round}: prefix of {cut} of an accepted {len}-byte header: {:?} ({input:02x?})",
                    decode(&input[..cut])
                );
            }
        }
    }
}
