//! Sealing stored sessions: they hold master secrets, and Redis persistence (RDB, AOF, replicas)
//! should not keep them in the clear. AES-256-GCM with a key derived (HKDF-SHA256) from a file the
//! fleet shares, and the Redis key as associated data, so a value moved under another key (or
//! another frontend's prefix) does not open.

use std::path::Path;

use crate::store::sealing::SealingKey;

pub(super) struct Sealer {
    key: SealingKey,
}

impl Sealer {
    /// The key from `path`: at least 32 bytes of secret (raw, or a line of base64 as
    /// `shuck ticket-key` writes). Errors say what is wrong, never the contents.
    pub(super) fn from_file(path: &Path) -> Result<Sealer, String> {
        let mut bytes = crate::sys::files::read(path)
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
        SealingKey::derive(b"shuck session store v1", secret, b"sealing").map(|key| Sealer { key })
    }

    /// `nonce | ciphertext | tag`, bound to `redis_key`.
    pub(super) fn seal(&self, redis_key: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(crate::store::sealing::OVERHEAD + value.len());
        self.key.seal_into(redis_key, &[value], &mut out)?;
        Some(out)
    }

    /// The value, if `sealed` is ours, untouched and stored under `redis_key`.
    pub(super) fn open(&self, redis_key: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        self.key.open(redis_key, sealed)
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
        bad[12] ^= 1;
        assert!(s.open(b"k1", &bad).is_none(), "tampered");
        assert!(s.open(b"k1", b"garbage").is_none());
        let other = Sealer::from_secret(&[8; 48]).unwrap();
        assert!(other.open(b"k1", &sealed).is_none(), "another fleet's key");
    }
}
