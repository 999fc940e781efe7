//! AES-256-GCM sealing with random nonces, the key random or derived by HKDF-SHA256: what session
//! tickets (`sessions::tickets`) and sessions in a remote store (`session_store`) are sealed with.
//! A sealed value is `nonce (12) | ciphertext | tag (16)`; the associated data binds it to where
//! it belongs (a ticket key and resumption domain, a store key).

use aws_lc_rs::aead::{Aad, Nonce, RandomizedNonceKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hkdf;

/// Bytes a sealed value adds to what it seals.
pub(crate) const OVERHEAD: usize = NONCE_LEN + TAG_LEN;
const TAG_LEN: usize = 16;

pub(crate) struct SealingKey(RandomizedNonceKey);

/// HKDF output length for an AES-256 key.
struct Aes256KeyLen;

impl hkdf::KeyType for Aes256KeyLen {
    fn len(&self) -> usize {
        32
    }
}

impl SealingKey {
    /// A fresh random key.
    pub(crate) fn random() -> Option<SealingKey> {
        let mut secret = [0u8; 32];
        aws_lc_rs::rand::fill(&mut secret).ok()?;
        Self::from_bytes(&mut secret)
    }

    /// The key HKDF-SHA256 derives from `secret` with `salt` and `info`: the same inputs give the
    /// same key on every host.
    pub(crate) fn derive(salt: &[u8], secret: &[u8], info: &[u8]) -> Option<SealingKey> {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(secret);
        let info = [info];
        let okm = prk.expand(&info, Aes256KeyLen).ok()?;
        let mut key = [0u8; 32];
        okm.fill(&mut key).ok()?;
        Self::from_bytes(&mut key)
    }

    /// Takes the key bytes and wipes them.
    fn from_bytes(bytes: &mut [u8; 32]) -> Option<SealingKey> {
        let key = RandomizedNonceKey::new(&AES_256_GCM, bytes).ok();
        bytes.fill(0);
        key.map(SealingKey)
    }

    /// Appends the sealed concatenation of `parts` to `out`.
    pub(crate) fn seal_into(&self, aad: &[u8], parts: &[&[u8]], out: &mut Vec<u8>) -> Option<()> {
        let start = out.len();
        out.extend_from_slice(&[0u8; NONCE_LEN]);
        for p in parts {
            out.extend_from_slice(p);
        }
        let (nonce, tag) = self
            .0
            .seal_in_place_separate_tag(Aad::from(aad), &mut out[start + NONCE_LEN..])
            .ok()?;
        out[start..start + NONCE_LEN].copy_from_slice(nonce.as_ref());
        out.extend_from_slice(tag.as_ref());
        Some(())
    }

    /// What `sealed` holds, if it was sealed with this key and `aad` and is untouched.
    pub(crate) fn open(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < OVERHEAD {
            return None;
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = rest.to_vec();
        let n = self
            .0
            .open_in_place(nonce, Aad::from(aad), &mut buf)
            .ok()?
            .len();
        buf.truncate(n);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_only_with_its_key_and_aad_and_untouched() {
        let k = SealingKey::derive(b"salt", &[7; 48], b"info").unwrap();
        let mut sealed = b"head".to_vec();
        k.seal_into(b"ad", &[b"master ", b"secret"], &mut sealed)
            .unwrap();
        assert_eq!(sealed.len(), 4 + OVERHEAD + 13);
        let body = &sealed[4..];
        assert!(!body.windows(6).any(|w| w == b"master"), "not in the clear");
        assert_eq!(k.open(b"ad", body).unwrap(), b"master secret");
        assert!(k.open(b"other", body).is_none(), "other associated data");
        let mut bad = body.to_vec();
        bad[NONCE_LEN] ^= 1;
        assert!(k.open(b"ad", &bad).is_none(), "tampered");
        assert!(k.open(b"ad", b"short").is_none());
        let same = SealingKey::derive(b"salt", &[7; 48], b"info").unwrap();
        assert_eq!(
            same.open(b"ad", body).unwrap(),
            b"master secret",
            "derived alike"
        );
        let other = SealingKey::derive(b"salt", &[8; 48], b"info").unwrap();
        assert!(other.open(b"ad", body).is_none(), "another secret");
        assert!(SealingKey::random().unwrap().open(b"ad", body).is_none());
    }
}
