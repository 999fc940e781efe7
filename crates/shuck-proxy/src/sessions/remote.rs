//! Sessions by ID shared across hosts through a remote store, without blocking a worker: rustls'
//! session store is synchronous, so the ClientHello stage looks the session up first
//! ([`RemoteSessions::prefetch`], bounded by the store's timeout) and the handshake then reads
//! the value from a slot ([`RemoteSessions::during`]). New sessions go to the process cache at
//! once and to the store through the worker's write queue.
//!
//! Keys are `shuck:<resumption domain>:<session ID or PSK identity>` (hex), so a session is only
//! ever looked up by a frontend with the same names and client-certificate trust.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rustls::server::StoresServerSessions;

use super::cache::SessionCache;
use crate::proto::hello_fields;
use crate::store::{Fetched, WorkerStore};

/// A value fetched for the connection being handshaken: its key (as rustls will ask) and value.
#[derive(Debug)]
pub(crate) struct Prefetched {
    key: Vec<u8>,
    value: Vec<u8>,
}

/// One worker's session storage for one frontend: the process cache in front of the store.
pub(crate) struct RemoteSessions {
    local: Arc<SessionCache>,
    store: Arc<WorkerStore>,
    /// `shuck:<hex of the resumption domain>:`.
    prefix: Vec<u8>,
    lifetime: Duration,
    /// TLS 1.3 enabled on the frontend (a client offering it negotiates it).
    tls13: bool,
    tickets: bool,
    /// The value for the handshake rustls is processing now, set only around that call.
    slot: Mutex<Option<Prefetched>>,
}

impl std::fmt::Debug for RemoteSessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSessions").finish_non_exhaustive()
    }
}

/// What the frontend resumes with, for [`RemoteSessions::new`].
#[derive(Debug)]
pub(crate) struct Resumes {
    pub domain: [u8; 32],
    pub lifetime: Duration,
    pub tls13: bool,
    pub tickets: bool,
}

impl RemoteSessions {
    /// The same storage with a slot of its own, for one handshake processed off its worker:
    /// the worker's slot holds the session of the one handshake it processes at a time.
    pub(crate) fn with_own_slot(&self) -> RemoteSessions {
        RemoteSessions {
            local: self.local.clone(),
            store: self.store.clone(),
            prefix: self.prefix.clone(),
            lifetime: self.lifetime,
            tls13: self.tls13,
            tickets: self.tickets,
            slot: Mutex::new(None),
        }
    }

    pub(crate) fn new(local: Arc<SessionCache>, store: Arc<WorkerStore>, r: &Resumes) -> Self {
        let mut prefix = b"shuck:".to_vec();
        prefix.extend(hex(&r.domain[..16]));
        prefix.push(b':');
        RemoteSessions {
            local,
            store,
            prefix,
            lifetime: r.lifetime,
            tls13: r.tls13,
            tickets: r.tickets,
            slot: Mutex::new(None),
        }
    }

    fn store_key(&self, session: &[u8]) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 2 * session.len());
        k.extend_from_slice(&self.prefix);
        k.extend(hex(session));
        k
    }

    /// The session this hello may resume from the store (and whether it is single-use): a TLS
    /// 1.2 session ID, or a TLS 1.3 PSK identity when tickets are off. `None` when tickets will
    /// do, or for a hello the reader does not understand.
    fn wanted<'h>(&self, f: &hello_fields::HelloFields<'h>) -> Option<(&'h [u8], bool)> {
        if f.offers_tls13 && self.tls13 {
            return f
                .psk_identity
                .filter(|_| !self.tickets)
                .map(|id| (id, true));
        }
        if self.tickets && f.ticket.is_some_and(|t| !t.is_empty()) {
            return None;
        }
        (!f.session_id.is_empty()).then_some((f.session_id, false))
    }

    /// Opens the worker's connection to the store (at worker start).
    pub(crate) fn warm_up(&self) {
        self.store.warm_up();
    }

    /// Looks the hello's session up in the store, unless the process cache has it. Waits at most
    /// the store's timeout; any failure means a full handshake.
    pub(crate) async fn prefetch(&self, hello: &[u8]) -> Option<Prefetched> {
        let message = hello_fields::client_hello(hello)?;
        let fields = hello_fields::fields(&message)?;
        let (session, take) = self.wanted(&fields)?;
        if self.local.contains(session) {
            return None;
        }
        let key = self.store_key(session);
        match self.store.fetch(&key, take).await {
            Fetched::Found(value) => Some(Prefetched {
                key: session.to_vec(),
                value,
            }),
            Fetched::Missing | Fetched::Unavailable => None,
        }
    }

    /// Runs `f` (rustls processing the ClientHello) with `prefetched` where the store's `get`
    /// and `take` find it. The worker runs one connection's code at a time, so the slot belongs
    /// to this handshake alone.
    pub(crate) fn during<R>(&self, prefetched: Option<Prefetched>, f: impl FnOnce() -> R) -> R {
        if prefetched.is_none() {
            return f();
        }
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = prefetched;
        let r = f();
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = None;
        r
    }

    fn take_slot(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.as_ref().is_some_and(|p| p.key == key) {
            return slot.take().map(|p| p.value);
        }
        None
    }
}

impl StoresServerSessions for RemoteSessions {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.store
            .store(self.store_key(&key), &value, self.lifetime);
        self.local.put(key, value);
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        match self.take_slot(key) {
            // Kept here too: the client's next connection to this host needs no lookup.
            Some(v) => {
                self.local.put(key.to_vec(), v.clone());
                Some(v)
            }
            None => self.local.get(key),
        }
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        if let Some(v) = self.take_slot(key) {
            return Some(v);
        }
        let v = self.local.take(key)?;
        // Single-use: the store's copy must not resume on another host.
        self.store.delete(self.store_key(key));
        Some(v)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

fn hex(bytes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes
        .iter()
        .flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]])
}
