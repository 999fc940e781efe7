//! Session-ticket keys shared by all workers without a lock.
//!
//! rustls's own rotating ticketer guards its keys with a lock taken on every ticket operation;
//! with one ticketer shared by all workers (so a resumption can land on any worker) that is a
//! lock shared by all workers on the handshake path. Here the key set sits behind an `ArcSwap`:
//! reading it is lock-free, and rotation, every `lifetime`, swaps in a new set. Tickets are
//! AES-256-GCM with a random nonce: `key name (16) | nonce (12) | ciphertext | tag (16)`, the key
//! name authenticated as associated data. The previous key still decrypts, so a ticket stays
//! usable for between one and two lifetimes.

use std::sync::Arc;

use super::now_secs;

use arc_swap::ArcSwap;
use aws_lc_rs::aead::{Aad, Nonce, RandomizedNonceKey, AES_256_GCM, NONCE_LEN};
use rustls::server::ProducesTickets;

const NAME_LEN: usize = 16;

struct TicketKey {
    name: [u8; NAME_LEN],
    key: RandomizedNonceKey,
}

impl TicketKey {
    fn generate() -> Option<TicketKey> {
        let mut name = [0u8; NAME_LEN];
        let mut secret = [0u8; 32];
        aws_lc_rs::rand::fill(&mut name).ok()?;
        aws_lc_rs::rand::fill(&mut secret).ok()?;
        let key = RandomizedNonceKey::new(&AES_256_GCM, &secret).ok()?;
        Some(TicketKey { name, key })
    }
}

struct KeySet {
    current: Arc<TicketKey>,
    previous: Option<Arc<TicketKey>>,
    /// Unix seconds at which `current` is replaced.
    rotate_at: u64,
    /// Unix seconds after which `previous` no longer decrypts. Rotation only happens when a
    /// ticket is used, so without this bound a quiet server would accept very old tickets.
    previous_until: u64,
}

pub struct Ticketer {
    keys: ArcSwap<KeySet>,
    lifetime_secs: u64,
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticketer")
            .field("lifetime_secs", &self.lifetime_secs)
            .finish_non_exhaustive()
    }
}

impl Ticketer {
    /// A ticketer whose keys rotate every `lifetime_secs` (at least 1).
    pub fn new(lifetime_secs: u64) -> Result<Arc<Ticketer>, rustls::Error> {
        let lifetime_secs = lifetime_secs.max(1);
        let current = TicketKey::generate().ok_or(rustls::Error::FailedToGetRandomBytes)?;
        Ok(Arc::new(Ticketer {
            keys: ArcSwap::from_pointee(KeySet {
                current: Arc::new(current),
                previous: None,
                rotate_at: now_secs() + lifetime_secs,
                previous_until: 0,
            }),
            lifetime_secs,
        }))
    }

    /// The key set in force at `now`, rotating first when it is due.
    fn keys_at(&self, now: u64) -> arc_swap::Guard<Arc<KeySet>> {
        let keys = self.keys.load();
        if now < keys.rotate_at {
            return keys;
        }
        drop(keys);
        // Whichever worker notices first rotates; `rcu` makes a concurrent rotation a no-op.
        self.keys.rcu(|old| {
            if now < old.rotate_at {
                return Arc::clone(old);
            }
            match TicketKey::generate() {
                Some(fresh) => Arc::new(KeySet {
                    current: Arc::new(fresh),
                    previous: Some(Arc::clone(&old.current)),
                    rotate_at: now + self.lifetime_secs,
                    // The old key issued tickets until `old.rotate_at`; each gets one lifetime
                    // beyond that, however late this rotation happens.
                    previous_until: old.rotate_at + self.lifetime_secs,
                }),
                // No randomness: keep the old key rather than stop issuing tickets.
                None => Arc::clone(old),
            }
        });
        self.keys.load()
    }

    fn encrypt_at(&self, plain: &[u8], now: u64) -> Option<Vec<u8>> {
        let keys = self.keys_at(now);
        let k = &keys.current;
        let mut sealed = Vec::with_capacity(plain.len() + 16);
        sealed.extend_from_slice(plain);
        let nonce = k
            .key
            .seal_in_place_append_tag(Aad::from(k.name), &mut sealed)
            .ok()?;
        let mut out = Vec::with_capacity(NAME_LEN + NONCE_LEN + sealed.len());
        out.extend_from_slice(&k.name);
        out.extend_from_slice(nonce.as_ref());
        out.extend_from_slice(&sealed);
        Some(out)
    }

    fn decrypt_at(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        if ticket.len() < NAME_LEN + NONCE_LEN + 16 {
            return None;
        }
        let (name, rest) = ticket.split_at(NAME_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let keys = self.keys_at(now);
        let previous = keys.previous.as_ref().filter(|_| now < keys.previous_until);
        let key = [Some(&keys.current), previous]
            .into_iter()
            .flatten()
            .find(|k| k.name == name)?;
        let mut buf = sealed.to_vec();
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let plain_len = key
            .key
            .open_in_place(nonce, Aad::from(key.name), &mut buf)
            .ok()?
            .len();
        buf.truncate(plain_len);
        Some(buf)
    }
}

impl ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.lifetime_secs).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.encrypt_at(plain, now_secs())
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.decrypt_at(cipher, now_secs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let t = Ticketer::new(3600).unwrap();
        let c = t.encrypt(b"session state").unwrap();
        assert_eq!(c.len(), NAME_LEN + NONCE_LEN + 13 + 16);
        assert_eq!(t.decrypt(&c).unwrap(), b"session state");
        let mut bad = c.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(t.decrypt(&bad).is_none(), "a modified ticket is refused");
        assert!(t.decrypt(&c[..20]).is_none(), "a short ticket is refused");
        let other = Ticketer::new(3600).unwrap();
        assert!(
            other.decrypt(&c).is_none(),
            "another ticketer's keys do not open it"
        );
    }

    #[test]
    fn a_quiet_server_does_not_extend_old_tickets() {
        let t = Ticketer::new(100).unwrap();
        let now = now_secs();
        let old = t.encrypt_at(b"old", now).unwrap();
        // No ticket traffic for ten lifetimes: the first use rotates, and the old ticket, far
        // past one lifetime after its key stopped issuing, is refused.
        assert!(t.decrypt_at(&old, now + 1000).is_none());
    }

    #[test]
    fn previous_key_still_decrypts_after_one_rotation_but_not_two() {
        let t = Ticketer::new(100).unwrap();
        let now = now_secs();
        let old = t.encrypt_at(b"old", now).unwrap();
        // One lifetime later: a new key, the old one kept.
        let new = t.encrypt_at(b"new", now + 150).unwrap();
        assert_ne!(old[..NAME_LEN], new[..NAME_LEN], "the key rotated");
        assert_eq!(t.decrypt_at(&old, now + 150).unwrap(), b"old");
        // Another lifetime: the first key is gone.
        assert_eq!(t.decrypt_at(&new, now + 300).unwrap(), b"new");
        assert!(t.decrypt_at(&old, now + 300).is_none());
    }
}
