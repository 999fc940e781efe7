//! Session-ticket keys shared by all workers without a lock: random keys rotated by shuck, or
//! keys from files a fleet shares (see `ticket_keys`).
//!
//! rustls's own rotating ticketer guards its keys with a lock taken on every ticket operation;
//! with one ticketer shared by all workers (so a resumption can land on any worker) that is a
//! lock shared by all workers on the handshake path. Here the key set sits behind an `ArcSwap`:
//! reading it is lock-free, and rotation, every `lifetime`, swaps in a new set.
//!
//! A ticket is `key name (16) | nonce (12) | AES-256-GCM(issued at (8) | session) | tag (16)`,
//! sealed with the key name and the frontend's resumption domain as associated data: a ticket
//! opens only under a frontend with the same names and client-certificate trust, so sharing a
//! key file between frontends (or hosts) never lets a session resume where it would not have
//! been accepted. Random keys: the previous key still decrypts, so a ticket stays usable for
//! between one and two lifetimes. File keys: every key of the file decrypts, one encrypts, and a
//! ticket is refused once it is `lifetime` old, whatever keys the file still holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::ProducesTickets;

use super::ticket_keys::{FileKey, FileKeys, NAME_LEN};
use crate::config::TicketKeyFormat;
use crate::store::sealing::{SealingKey, OVERHEAD};
use crate::sys::clock::unix_now;

/// Bytes of the issue time sealed inside each ticket.
const ISSUED_LEN: usize = 8;
/// Associated data: the key name and the resumption domain.
const AAD_LEN: usize = NAME_LEN + 32;

struct TicketKey {
    name: [u8; NAME_LEN],
    key: SealingKey,
}

impl TicketKey {
    fn generate() -> Option<TicketKey> {
        let mut name = [0u8; NAME_LEN];
        aws_lc_rs::rand::fill(&mut name).ok()?;
        let key = SealingKey::random()?;
        Some(TicketKey { name, key })
    }

    /// The key derived from a file key's material (HKDF-SHA256, the name as info): the same
    /// file gives the same key on every host.
    fn derive(file_key: &FileKey) -> Option<TicketKey> {
        let key = SealingKey::derive(
            b"shuck session ticket key v1",
            &file_key.secret,
            &file_key.name,
        )?;
        Some(TicketKey {
            name: file_key.name,
            key,
        })
    }
}

struct KeySet {
    /// The key that seals new tickets.
    current: Arc<TicketKey>,
    /// Keys that still open tickets: the previous random key, or the file's other keys.
    others: Vec<Arc<TicketKey>>,
    /// Unix seconds at which `current` is replaced (never for file keys).
    rotate_at: u64,
    /// Unix seconds after which `others` no longer decrypt. Rotation only happens when a
    /// ticket is used, so without this bound a quiet server would accept very old tickets.
    others_until: u64,
}

pub(crate) struct Ticketer {
    keys: ArcSwap<KeySet>,
    /// Changed in place by a reload (`set_lifetime`).
    lifetime_secs: AtomicU64,
    /// With keys from files (which never rotate here: a ticket's age is checked instead): how
    /// many keys, which one encrypts (counted from 1) and the files' format, for `shuck check`.
    from_files: Option<(usize, usize, TicketKeyFormat)>,
    /// The frontend's resumption domain (names and client-certificate trust).
    domain: [u8; 32],
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticketer")
            .field("lifetime_secs", &self.lifetime_secs())
            .field("from_files", &self.from_files)
            .finish_non_exhaustive()
    }
}

impl Ticketer {
    /// A ticketer whose random keys rotate every `lifetime_secs` (at least 1).
    pub(crate) fn new(
        lifetime_secs: u64,
        domain: [u8; 32],
    ) -> Result<Arc<Ticketer>, rustls::Error> {
        let lifetime_secs = lifetime_secs.max(1);
        let current = TicketKey::generate().ok_or(rustls::Error::FailedToGetRandomBytes)?;
        Ok(Arc::new(Ticketer {
            keys: ArcSwap::from_pointee(KeySet {
                current: Arc::new(current),
                others: Vec::new(),
                rotate_at: unix_now().unsigned_abs() + lifetime_secs,
                others_until: 0,
            }),
            lifetime_secs: AtomicU64::new(lifetime_secs),
            from_files: None,
            domain,
        }))
    }

    /// A ticketer with the keys read from files: `keys.encrypting` seals, all of them open
    /// tickets younger than `lifetime_secs`.
    pub(crate) fn from_files(
        keys: &FileKeys,
        lifetime_secs: u64,
        domain: [u8; 32],
    ) -> Result<Arc<Ticketer>, rustls::Error> {
        let derived = keys
            .keys
            .iter()
            .map(|k| TicketKey::derive(k).map(Arc::new))
            .collect::<Option<Vec<_>>>()
            .ok_or(rustls::Error::General(
                "ticket key derivation failed".into(),
            ))?;
        let current = derived[keys.encrypting].clone();
        let others = derived
            .into_iter()
            .enumerate()
            .filter(|(i, _)| *i != keys.encrypting)
            .map(|(_, k)| k)
            .collect();
        Ok(Arc::new(Ticketer {
            keys: ArcSwap::from_pointee(KeySet {
                current,
                others,
                rotate_at: u64::MAX,
                others_until: u64::MAX,
            }),
            lifetime_secs: AtomicU64::new(lifetime_secs.max(1)),
            from_files: Some((keys.keys.len(), keys.encrypting + 1, keys.format)),
            domain,
        }))
    }

    fn lifetime_secs(&self) -> u64 {
        self.lifetime_secs.load(Ordering::Relaxed)
    }

    /// A reload's new `session_ticket_lifetime` for random keys, which are kept across reloads
    /// so tickets issued before still resume: the next rotation comes no later than one new
    /// lifetime from now, and tickets carry the new lifetime from now on.
    pub(crate) fn set_lifetime(&self, lifetime_secs: u64) {
        let lifetime_secs = lifetime_secs.max(1);
        if self.lifetime_secs.swap(lifetime_secs, Ordering::Relaxed) == lifetime_secs {
            return;
        }
        let due = unix_now().unsigned_abs() + lifetime_secs;
        self.keys.rcu(|k| {
            Arc::new(KeySet {
                current: Arc::clone(&k.current),
                others: k.others.clone(),
                rotate_at: k.rotate_at.min(due),
                others_until: k.others_until,
            })
        });
    }

    /// True when the keys came from files (a reload reads them again rather than keep these).
    pub(crate) fn is_from_files(&self) -> bool {
        self.from_files.is_some()
    }

    /// What `shuck check` says of the keys (never the keys).
    pub(crate) fn describe(&self) -> String {
        let life = humantime::format_duration(std::time::Duration::from_secs(self.lifetime_secs()));
        match self.from_files {
            None => format!("random keys rotating every {life}"),
            Some((n, enc, format)) => format!(
                "{n} key(s) from file ({format} format), key {enc} encrypts, a ticket lives {life}"
            ),
        }
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
                    others: vec![Arc::clone(&old.current)],
                    rotate_at: now + self.lifetime_secs(),
                    // The old key issued tickets until `old.rotate_at`; each gets one lifetime
                    // beyond that, however late this rotation happens.
                    others_until: old.rotate_at + self.lifetime_secs(),
                }),
                // No randomness: keep the old key rather than stop issuing tickets.
                None => Arc::clone(old),
            }
        });
        self.keys.load()
    }

    fn aad(&self, name: &[u8; NAME_LEN]) -> [u8; AAD_LEN] {
        let mut aad = [0u8; AAD_LEN];
        aad[..NAME_LEN].copy_from_slice(name);
        aad[NAME_LEN..].copy_from_slice(&self.domain);
        aad
    }

    fn encrypt_at(&self, plain: &[u8], now: u64) -> Option<Vec<u8>> {
        let keys = self.keys_at(now);
        let k = &keys.current;
        let mut out = Vec::with_capacity(NAME_LEN + OVERHEAD + ISSUED_LEN + plain.len());
        out.extend_from_slice(&k.name);
        k.key
            .seal_into(&self.aad(&k.name), &[&now.to_be_bytes(), plain], &mut out)?;
        Some(out)
    }

    fn decrypt_at(&self, ticket: &[u8], now: u64) -> Option<Vec<u8>> {
        if ticket.len() < NAME_LEN + OVERHEAD + ISSUED_LEN {
            return None;
        }
        let (name, sealed) = ticket.split_at(NAME_LEN);
        let keys = self.keys_at(now);
        let others = keys.others.iter().filter(|_| now < keys.others_until);
        let key = std::iter::once(&keys.current)
            .chain(others)
            .find(|k| k.name == name)?;
        let mut buf = key.key.open(&self.aad(&key.name), sealed)?;
        let issued = u64::from_be_bytes(buf.get(..ISSUED_LEN)?.try_into().ok()?);
        if self.from_files.is_some() && now.saturating_sub(issued) >= self.lifetime_secs() {
            return None;
        }
        buf.drain(..ISSUED_LEN);
        Some(buf)
    }
}

impl ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.lifetime_secs()).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.encrypt_at(plain, unix_now().unsigned_abs())
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.decrypt_at(cipher, unix_now().unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let t = Ticketer::new(3600, [7; 32]).unwrap();
        let c = t.encrypt(b"session state").unwrap();
        assert_eq!(c.len(), NAME_LEN + OVERHEAD + ISSUED_LEN + 13);
        assert_eq!(t.decrypt(&c).unwrap(), b"session state");
        let mut bad = c.clone();
        *bad.last_mut().unwrap() ^= 1;
        assert!(t.decrypt(&bad).is_none(), "a modified ticket is refused");
        assert!(t.decrypt(&c[..20]).is_none(), "a short ticket is refused");
        let other = Ticketer::new(3600, [7; 32]).unwrap();
        assert!(
            other.decrypt(&c).is_none(),
            "another ticketer's keys do not open it"
        );
    }

    #[test]
    fn a_shorter_lifetime_brings_the_next_rotation_in_and_keeps_the_key() {
        let t = Ticketer::new(3600, [7; 32]).unwrap();
        let now = unix_now().unsigned_abs();
        let before = t.encrypt_at(b"before", now).unwrap();
        t.set_lifetime(60);
        assert_eq!(t.lifetime(), 60);
        // Tickets issued before the change still open: the key is kept.
        assert_eq!(t.decrypt_at(&before, now + 1).unwrap(), b"before");
        // The next rotation comes within the new lifetime, not the old one.
        let after = t.encrypt_at(b"after", now + 120).unwrap();
        assert_ne!(
            before[..NAME_LEN],
            after[..NAME_LEN],
            "rotated by now + 120 s"
        );
        // A longer lifetime does not postpone a rotation already due sooner.
        let t = Ticketer::new(60, [7; 32]).unwrap();
        let first = t.encrypt_at(b"a", now).unwrap();
        t.set_lifetime(3600);
        let later = t.encrypt_at(b"b", now + 120).unwrap();
        assert_ne!(first[..NAME_LEN], later[..NAME_LEN]);
    }

    #[test]
    fn a_quiet_server_does_not_extend_old_tickets() {
        let t = Ticketer::new(100, [7; 32]).unwrap();
        let now = unix_now().unsigned_abs();
        let old = t.encrypt_at(b"old", now).unwrap();
        // No ticket traffic for ten lifetimes: the first use rotates, and the old ticket, far
        // past one lifetime after its key stopped issuing, is refused.
        assert!(t.decrypt_at(&old, now + 1000).is_none());
    }

    #[test]
    fn previous_key_still_decrypts_after_one_rotation_but_not_two() {
        let t = Ticketer::new(100, [7; 32]).unwrap();
        let now = unix_now().unsigned_abs();
        let old = t.encrypt_at(b"old", now).unwrap();
        // One lifetime later: a new key, the old one kept.
        let new = t.encrypt_at(b"new", now + 150).unwrap();
        assert_ne!(old[..NAME_LEN], new[..NAME_LEN], "the key rotated");
        assert_eq!(t.decrypt_at(&old, now + 150).unwrap(), b"old");
        // Another lifetime: the first key is gone.
        assert_eq!(t.decrypt_at(&new, now + 300).unwrap(), b"new");
        assert!(t.decrypt_at(&old, now + 300).is_none());
    }

    fn file_keys(n: usize, encrypting: usize) -> FileKeys {
        let keys = (0..n)
            .map(|i| FileKey {
                name: [i as u8; NAME_LEN],
                secret: vec![i as u8 + 100; 32],
            })
            .collect();
        FileKeys {
            keys,
            encrypting,
            format: TicketKeyFormat::Haproxy,
        }
    }

    #[test]
    fn file_keys_bind_tickets_to_the_domain_and_limit_their_age() {
        let keys = file_keys(3, 1);
        let a = Ticketer::from_files(&keys, 100, [1; 32]).unwrap();
        let now = unix_now().unsigned_abs();
        let t = a.encrypt_at(b"s", now).unwrap();
        assert_eq!(t[..NAME_LEN], [1u8; NAME_LEN], "the encrypting key's name");
        // Another host with the same file opens it...
        let b = Ticketer::from_files(&file_keys(3, 1), 100, [1; 32]).unwrap();
        assert_eq!(b.decrypt_at(&t, now + 99).unwrap(), b"s");
        // ...until the ticket is one lifetime old, whatever keys remain.
        assert!(b.decrypt_at(&t, now + 100).is_none());
        // A frontend with other names or other client trust does not.
        let other = Ticketer::from_files(&keys, 100, [2; 32]).unwrap();
        assert!(other.decrypt_at(&t, now).is_none());
        // Any key of the file opens; a file without the sealing key does not.
        let later = Ticketer::from_files(&file_keys(3, 2), 100, [1; 32]).unwrap();
        assert_eq!(later.decrypt_at(&t, now).unwrap(), b"s");
        let mut without = file_keys(3, 0);
        without.keys.remove(1);
        let without = Ticketer::from_files(&without, 100, [1; 32]).unwrap();
        assert!(without.decrypt_at(&t, now).is_none());
    }
}
