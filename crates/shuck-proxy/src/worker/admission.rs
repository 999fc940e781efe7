//! Who gets in: a frontend's `allow`/`deny` lists and `per_client` limits, checked on the real
//! client's address (after `accept_proxy`) before any TLS work, and the full-handshake rate and
//! `deny_ja4` after the ClientHello. What every worker of a frontend shares for it (its
//! `max_connections` count, its client table, which sources were logged lately) is its [`Gate`],
//! kept by name in the engine's [`Gates`] across reloads.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::config::{Admission, Frontend, HandshakeRate};
use crate::conn::conn_error::Refusal;
use crate::sys::limits::ConnectionLimit;
use crate::worker::clients::{ClientHold, ClientKey, ClientTable};

/// What a frontend's workers share for admission.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    /// The frontend's own `max_connections` (unbounded without one).
    pub(crate) limit: Arc<ConnectionLimit>,
    pub(crate) clients: Option<Arc<ClientTable>>,
    /// Which sources' refusals were logged lately (32 KiB; every frontend can refuse: an
    /// overloaded worker sheds).
    log: Arc<SourceLog>,
}

/// The gates of a server's frontends, by name.
#[derive(Debug, Default)]
pub(crate) struct Gates(Mutex<HashMap<String, Gate>>);

impl Gates {
    /// The gate for `fe` as its settings say now: the same counts across reloads (open
    /// connections stay counted), a new client table only when its size or prefixes changed.
    /// Called when a worker rebuilds its view of a frontend, never per connection.
    pub(crate) fn gate(&self, fe: &Frontend) -> Gate {
        let a = &fe.admission;
        let mut gates = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let gate = gates.entry(fe.name.clone()).or_insert_with(|| Gate {
            limit: ConnectionLimit::new(usize::MAX),
            clients: None,
            log: Arc::new(SourceLog::new()),
        });
        gate.limit.set_max(a.max_connections.unwrap_or(usize::MAX));
        gate.clients = match (&a.per_client, gate.clients.take()) {
            (Some(p), Some(t)) if t.fits(p) => Some(t),
            (Some(p), _) => Some(Arc::new(ClientTable::new(p))),
            (None, _) => None,
        };
        gate.clone()
    }

    /// Forgets the gates of frontends no longer configured.
    pub(crate) fn keep_only(&self, names: &[&str]) {
        let mut gates = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        gates.retain(|n, _| names.contains(&n.as_str()));
    }
}

/// A client let in: where its counts are, and its open connection counted.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub(crate) key: ClientKey,
    _hold: Option<ClientHold>,
}

impl Gate {
    /// The checks on the client's address, in order: `deny`, `allow`, `per_client.connections`.
    /// `None` when no per-client limit applies.
    pub(crate) fn admit(&self, a: &Admission, ip: IpAddr) -> Result<Option<Admitted>, Refusal> {
        if a.checks_address() {
            if a.deny.contains(ip) {
                return Err(Refusal::Denied);
            }
            if !a.allow.is_empty() && !a.allow.contains(ip) {
                return Err(Refusal::NotAllowed);
            }
        }
        let (Some(table), Some(p)) = (&self.clients, &a.per_client) else {
            return Ok(None);
        };
        let key = table.key(ip);
        let hold = match p.connections {
            Some(limit) => Some(table.open(key, limit).ok_or(Refusal::ClientConnections)?),
            None => None,
        };
        Ok(Some(Admitted { key, _hold: hold }))
    }

    /// Whether `a` limits full handshakes (the ClientHello is then looked at for resumption).
    pub(crate) fn limits_handshakes(&self, a: &Admission) -> bool {
        self.clients.is_some() && a.per_client.is_some_and(|p| p.handshakes.is_some())
    }

    /// The table, rate and client key when `a` limits full handshakes and `who` was counted.
    fn rated(
        &self,
        a: &Admission,
        who: Option<&Admitted>,
    ) -> Option<(&ClientTable, HandshakeRate, ClientKey)> {
        Some((
            self.clients.as_deref()?,
            a.per_client?.handshakes?,
            who?.key,
        ))
    }

    /// The full-handshake rate, once the ClientHello is read: every hello let through is
    /// charged as a full handshake now (a client that closes after the server's signature has
    /// cost it), and one that resumed is given its charge back ([`Gate::refund_resumed`]); a
    /// hello offering resumption is held back only when the client is deep in debt.
    pub(crate) fn handshake(
        &self,
        a: &Admission,
        who: Option<&Admitted>,
        offers_resumption: bool,
    ) -> Result<(), Refusal> {
        let Some((table, rate, key)) = self.rated(a, who) else {
            return Ok(());
        };
        if table.handshake(key, rate, offers_resumption) {
            Ok(())
        } else {
            Err(Refusal::ClientHandshakes)
        }
    }

    /// Whether the client has full handshakes charged that have not yet come back (`false`
    /// without a handshake rate): the heavier sources a shedding worker refuses first.
    pub(crate) fn is_heavy(&self, a: &Admission, who: Option<&Admitted>) -> bool {
        self.rated(a, who)
            .is_some_and(|(table, _, key)| table.in_debt(key))
    }

    /// Gives back a resumed handshake's charge.
    pub(crate) fn refund_resumed(&self, a: &Admission, who: Option<&Admitted>) {
        if let Some((table, rate, key)) = self.rated(a, who) {
            table.refund(key, rate);
        }
    }

    /// Whether a refusal of `ip` may be logged now: once a minute per source (by a keyed hash;
    /// a source sharing a slot with another may be logged sooner).
    pub(crate) fn log_refusal_of(&self, ip: IpAddr) -> bool {
        self.log.first_in_a_minute(ip)
    }
}

/// When each source's refusal was last logged, in a fixed table.
#[derive(Debug)]
struct SourceLog {
    /// `tag << 32 | seconds since epoch` per slot.
    slots: Box<[AtomicU64]>,
    hasher: std::hash::RandomState,
    epoch: Instant,
}

const SOURCE_LOG_SLOTS: usize = 4096;
const LOG_EVERY_S: u64 = 60;

impl SourceLog {
    fn new() -> SourceLog {
        SourceLog {
            slots: (0..SOURCE_LOG_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            hasher: std::hash::RandomState::new(),
            epoch: Instant::now(),
        }
    }

    fn first_in_a_minute(&self, ip: IpAddr) -> bool {
        let mut h = self.hasher.build_hasher();
        ip.to_canonical().hash(&mut h);
        let bits = std::hash::Hasher::finish(&h);
        let slot = &self.slots[(bits as usize) % SOURCE_LOG_SLOTS];
        // A tag of 0 would match an empty slot: tags are odd.
        let tag = (bits >> 32) | 1;
        let now = self.epoch.elapsed().as_secs() + LOG_EVERY_S;
        slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            let (t, at) = (v >> 32, v & u64::from(u32::MAX));
            (t != tag || now.saturating_sub(at) >= LOG_EVERY_S)
                .then_some((tag << 32) | (now & u64::from(u32::MAX)))
        })
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_logged_once_a_minute() {
        let log = SourceLog::new();
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let b: IpAddr = "192.0.2.2".parse().expect("ip");
        assert!(log.first_in_a_minute(a));
        assert!(!log.first_in_a_minute(a));
        assert!(!log.first_in_a_minute("::ffff:192.0.2.1".parse().expect("ip")));
        assert!(log.first_in_a_minute(b));
    }
}
