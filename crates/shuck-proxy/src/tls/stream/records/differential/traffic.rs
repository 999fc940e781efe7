//! One direction's TLS 1.3 traffic keys as a peer keeps them: sealed and opened by hand, and
//! moved on by a KeyUpdate (RFC 8446 §7.2, §7.3), so that the script can send records rustls
//! never would and read what either server sends back.

use aws_lc_rs::aead::{
    Aad, Algorithm, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305,
    NONCE_LEN,
};
use aws_lc_rs::hkdf;
use rustls::CipherSuite;

use super::super::{HEADER_LEN, OUTER_TYPE};

/// `n` bytes of HKDF output.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF-Expand-Label with an empty context (RFC 8446 §7.1).
fn expand_label(hash: hkdf::Algorithm, secret: &[u8], label: &[u8], len: usize) -> Vec<u8> {
    let full = [b"tls13 ", label].concat();
    let info = [
        &(len as u16).to_be_bytes()[..],
        &[full.len() as u8],
        &full,
        &[0],
    ]
    .concat();
    let prk = hkdf::Prk::new_less_safe(hash, secret);
    let mut out = vec![0; len];
    prk.expand(&[&info], Len(len))
        .and_then(|okm| okm.fill(&mut out))
        .expect("HKDF output of a valid length");
    out
}

/// A direction's traffic secret, the key and IV derived from it, and the next sequence number.
pub(super) struct Traffic {
    hash: hkdf::Algorithm,
    aead: &'static Algorithm,
    secret: Vec<u8>,
    key: LessSafeKey,
    iv: [u8; NONCE_LEN],
    pub(super) seq: u64,
}

impl Traffic {
    pub(super) fn new(suite: CipherSuite, secret: &[u8]) -> Traffic {
        let (hash, aead) = match suite {
            CipherSuite::TLS13_AES_256_GCM_SHA384 => (hkdf::HKDF_SHA384, &AES_256_GCM),
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => (hkdf::HKDF_SHA256, &CHACHA20_POLY1305),
            _ => (hkdf::HKDF_SHA256, &AES_128_GCM),
        };
        let key = expand_label(hash, secret, b"key", aead.key_len());
        let iv = expand_label(hash, secret, b"iv", NONCE_LEN);
        Traffic {
            hash,
            aead,
            secret: secret.to_vec(),
            key: LessSafeKey::new(UnboundKey::new(aead, &key).expect("key length")),
            iv: iv.try_into().expect("IV length"),
            seq: 0,
        }
    }

    /// The next generation of keys, as after a KeyUpdate.
    pub(super) fn update(&mut self) {
        let len = self.hash.hmac_algorithm().digest_algorithm().output_len;
        let next = expand_label(self.hash, &self.secret, b"traffic upd", len);
        let suite = match (
            self.hash == hkdf::HKDF_SHA384,
            self.aead == &CHACHA20_POLY1305,
        ) {
            (true, _) => CipherSuite::TLS13_AES_256_GCM_SHA384,
            (false, true) => CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            (false, false) => CipherSuite::TLS13_AES_128_GCM_SHA256,
        };
        *self = Traffic::new(suite, &next);
    }

    fn nonce(&mut self) -> Nonce {
        let mut nonce = self.iv;
        for (n, s) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        self.seq = self.seq.wrapping_add(1);
        Nonce::assume_unique_for_key(nonce)
    }

    /// A protected record around `inner` (content, type byte and padding as given).
    pub(super) fn seal(&mut self, inner: &[u8]) -> Vec<u8> {
        let len = (inner.len() + self.aead.tag_len()) as u16;
        let header = [OUTER_TYPE, 3, 3, (len >> 8) as u8, len as u8];
        let mut body = inner.to_vec();
        let nonce = self.nonce();
        self.key
            .seal_in_place_append_tag(nonce, Aad::from(header), &mut body)
            .expect("seal");
        [&header[..], &body].concat()
    }

    /// The inner plaintext of the whole record `record`, or `None` when it does not open.
    pub(super) fn open(&mut self, record: &[u8]) -> Option<Vec<u8>> {
        let (header, body) = record.split_at_checked(HEADER_LEN)?;
        let mut body = body.to_vec();
        let nonce = self.nonce();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(header), &mut body)
            .ok()?;
        Some(plain.to_vec())
    }
}
