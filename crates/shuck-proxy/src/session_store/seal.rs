//! Sealing stored sessions: they hold master secrets, and Redis persistence (RDB, AOF, replicas)
//! should not keep them in the clear. AES-256-GCM with a key derived (HKDF-SHA256) from a file the
//! fleet shares, and the Redis key as associated data, so a value moved under another key (or
//! another frontend's prefix) does not open.

use std::path::Path;

use aws_lc_rs::aead::{Aad, Nonce, RandomizedNonceKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hkdf;

const TAG_LEN: usize = 16;

pub(super) struct Sealer {
    key: RandomizedNonceKey,
}

struct Aes256KeyLen;

impl hkdf::KeyType for Aes256KeyLen {
    fn len(&self) -> usize {
        32
    }
}

impl Sealer {
    /// The key from `path`: at least 32 bytes of secret (raw, or a line of base64 as
    /// `shuck ticket-key` writes). Errors say what is wrong, never the contents.
    pub(super) fn from_file(path: &Path) -> Result<Sealer, String> {
        let mut bytes = std::fs::read(path)
            .map_err(|e| format!("session_store_key {}: cannot read: {e}", path.display()))?;
        if bytes.len() < 32 {
            bytes.fill(0);
            return Err(format!(
                "session_store_key {}: holds {} bytes, needs at least 32 of secret (make one with `shuck ticket-key --format nginx FILE`)",
                path.display(),
                bytes.len()
            ));
        }
        let sealer = Self::from_secret(&bytes);
        bytes.fill(0);
        sealer.ok_or_else(|| "cannot derive the session store key".into())
    }

    fn from_secret(secret: &[u8]) -> Option<Sealer> {
        let salt = hkdf::Salt::new(hkdf::HKDF_SHA256, b"shuck session store v1");
        let prk = salt.extract(secret);
        let okm = prk.expand(&[b"sealing"], Aes256KeyLen).ok()?;
        let mut k = [0u8; 32];
        okm.fill(&mut k).ok()?;
        let key = RandomizedNonceKey::new(&AES_256_GCM, &k).ok();
        k.fill(0);
        Some(Sealer { key: key? })
    }

    /// `nonce | ciphertext | tag`, bound to `redis_key`.
    pub(super) fn seal(&self, redis_key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(NONCE_LEN + value.len() + TAG_LEN);
        out.extend_from_slice(&[0u8; NONCE_LEN]);
        out.extend_from_slice(value);
        let (nonce, tag) = self
            .key
            .seal_in_place_separate_tag(Aad::from(redis_key), &mut out[NONCE_LEN..])
            .ok()?;
        out[..NONCE_LEN].copy_from_slice(nonce.as_ref());
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    /// The value, if `sealed` is ours, untouched and stored under `redis_key`.
    pub(super) fn open(&self, redis_key: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = rest.to_vec();
        let n = self
            .key
            .open_in_place(nonce, Aad::from(redis_key), &mut buf)
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
    fn values_open_only_under_their_key_and_untouched() {
        let s = Sealer::from_secret(&[7; 48]).unwrap();
        let sealed = s.seal(b"k1", b"master secret").unwrap();
        assert!(
            !sealed.windows(6).any(|w| w == b"master"),
            "not in the clear"
        );
        assert_eq!(s.open(b"k1", &sealed).unwrap(), b"master secret");
        assert!(s.open(b"k2", &sealed).is_none(), "moved to another key");
        let mut bad = sealed.clone();
        bad[NONCE_LEN] ^= 1;
        assert!(s.open(b"k1", &bad).is_none(), "tampered");
        assert!(s.open(b"k1", b"garbage").is_none());
        let other = Sealer::from_secret(&[8; 48]).unwrap();
        assert!(other.open(b"k1", &sealed).is_none(), "another fleet's key");
    }
}
