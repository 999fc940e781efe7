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

/// The contents of a DER OCTET STRING (how tokens give CKA_EC_POINT), or the bytes as they
/// are when they are not one (some tokens give the point bare).
pub(super) fn octet_string_contents(der: &[u8]) -> &[u8] {
    match der {
        [0x04, len, rest @ ..] if usize::from(*len) == rest.len() && *len < 0x80 => rest,
        [0x04, 0x81, len, rest @ ..] if usize::from(*len) == rest.len() => rest,
        _ => der,
    }
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
        let long = tagged(0x30, &[0u8; 200]);
        assert_eq!(&long[..3], &[0x30, 0x81, 200]);
        assert_eq!(octet_string_contents(&[4, 2, 9, 9]), &[9, 9]);
        assert_eq!(octet_string_contents(&[9, 9]), &[9, 9]);
    }
}
