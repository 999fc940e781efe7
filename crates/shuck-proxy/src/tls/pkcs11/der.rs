//! The few DER shapes a token's answers need around them: an RSA public key (two INTEGERs) for
//! its SubjectPublicKeyInfo, and an ECDSA signature, which PKCS#11 gives as r‖s and TLS wants
//! as an `ECDSA-Sig-Value` (two INTEGERs).

/// `SEQUENCE { INTEGER a, INTEGER b }` from two unsigned big-endian numbers.
pub(super) fn two_integers(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut body = integer(a);
    body.extend(integer(b));
    tagged(0x30, &body)
}

/// An ECDSA signature as r‖s (each half the length) in DER.
pub(super) fn ecdsa_signature(raw: &[u8]) -> Option<Vec<u8>> {
    if raw.is_empty() || raw.len() % 2 != 0 {
        return None;
    }
    let (r, s) = raw.split_at(raw.len() / 2);
    Some(two_integers(r, s))
}

/// The uncompressed point of `len` bytes in a token's CKA_EC_POINT: a DER OCTET STRING around
/// it (what PKCS#11 says), or the point bare (what some tokens give). Told apart by length, so
/// a bare point whose first coordinate byte looks like a length is not misread.
pub(super) fn ec_point(der: &[u8], len: usize) -> Option<&[u8]> {
    let point = if der.len() == len {
        der
    } else {
        match der {
            [0x04, l, rest @ ..] if *l < 0x80 && usize::from(*l) == rest.len() => rest,
            [0x04, 0x81, l, rest @ ..] if usize::from(*l) == rest.len() => rest,
            _ => return None,
        }
    };
    (point.len() == len && point[0] == 0x04).then_some(point)
}

/// The subjectPublicKey bits of a SubjectPublicKeyInfo (`SEQUENCE { alg, BIT STRING }`).
pub(super) fn spki_bits(spki: &[u8]) -> Option<&[u8]> {
    let (body, _) = element(spki)?;
    let (_, rest) = element(body)?;
    let (bits, _) = element(rest)?;
    bits.split_first().map(|(_, b)| b)
}

/// The contents of the DER element at the start of `der`, and what follows it.
fn element(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, head) = match *der.get(1)? {
        n if n < 0x80 => (usize::from(n), 2usize),
        0x81 => (usize::from(*der.get(2)?), 3),
        0x82 => (
            (usize::from(*der.get(2)?) << 8) | usize::from(*der.get(3)?),
            4,
        ),
        _ => return None,
    };
    let end = len.checked_add(head)?;
    Some((der.get(head..end)?, der.get(end..)?))
}

fn integer(unsigned: &[u8]) -> Vec<u8> {
    let trimmed = match unsigned.iter().position(|&b| b != 0) {
        Some(i) => &unsigned[i..],
        None => &[0u8][..],
    };
    let mut v = Vec::with_capacity(trimmed.len() + 1);
    // A leading 1 bit would read as negative.
    if trimmed[0] & 0x80 != 0 {
        v.push(0);
    }
    v.extend_from_slice(trimmed);
    tagged(0x02, &v)
}

fn tagged(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = body.len();
    if len < 0x80 {
        out.push(u8::try_from(len).unwrap_or(0));
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | u8::try_from(bytes.len()).unwrap_or(0));
        out.extend(bytes);
    }
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_minimal_and_positive() {
        assert_eq!(
            two_integers(&[0, 0, 5], &[0x80]),
            [0x30, 7, 2, 1, 5, 2, 2, 0, 0x80]
        );
        assert_eq!(
            ecdsa_signature(&[0, 1, 0, 0xff]).unwrap(),
            [0x30, 7, 2, 1, 1, 2, 2, 0, 0xff]
        );
        assert!(ecdsa_signature(&[1, 2, 3]).is_none());
        let spki =
            rustls::sign::public_key_to_spki(&rustls::pki_types::alg_id::ECDSA_P256, [4u8; 65]);
        assert_eq!(spki_bits(spki.as_ref()), Some(&[4u8; 65][..]));
        assert_eq!(spki_bits(&[0x30, 5, 1]), None);
        let long = tagged(0x30, &[0u8; 200]);
        assert_eq!(&long[..3], &[0x30, 0x81, 200]);
        // P-256: 65 bytes, wrapped (67) or bare, even when its second byte reads as a length.
        let mut bare = vec![4u8; 65];
        bare[1] = 0x3f;
        assert_eq!(ec_point(&bare, 65), Some(&bare[..]));
        let mut wrapped = vec![4u8, 65];
        wrapped.extend_from_slice(&bare);
        assert_eq!(ec_point(&wrapped, 65), Some(&bare[..]));
        assert_eq!(ec_point(&bare[..64], 65), None);
        let p384 = vec![4u8; 97];
        let mut w384 = vec![4u8, 97];
        w384.extend_from_slice(&p384);
        assert_eq!(ec_point(&w384, 97), Some(&p384[..]));
    }
}
