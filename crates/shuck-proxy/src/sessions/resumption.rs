//! Which mechanism resumed a session: a TLS 1.2 session ID, a ticket (TLS 1.2 or 1.3) or a TLS
//! 1.3 stateful PSK. rustls does not say, so each worker's configuration wraps the frontend's
//! ticket keys and session storage in a [`WorkerResumption`] that notes which one handed rustls
//! a session while the ClientHello was processed (that happens inside one synchronous call, and
//! a worker runs one connection's code at a time, so the note belongs to that handshake).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use rustls::server::{ProducesTickets, StoresServerSessions};

/// How a resumed session was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mechanism {
    /// A TLS 1.2 session ID found in a session store.
    Id = 1,
    /// A ticket that decrypted (TLS 1.2 or TLS 1.3).
    Ticket = 2,
    /// A TLS 1.3 stateful PSK taken from a session store.
    Psk = 3,
}

impl Mechanism {
    pub(crate) const ALL: [Mechanism; 3] = [Mechanism::Id, Mechanism::Ticket, Mechanism::Psk];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Mechanism::Id => "id",
            Mechanism::Ticket => "ticket",
            Mechanism::Psk => "psk",
        }
    }

    fn from_u8(v: u8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| *m as u8 == v)
    }
}

/// One worker's view of the frontend's ticket keys and session storage.
pub(crate) struct WorkerResumption {
    tickets: Arc<dyn ProducesTickets>,
    sessions: Arc<dyn StoresServerSessions>,
    noted: AtomicU8,
    /// Set while rustls finishes a resumed handshake (`tickets_during`): one new ticket only.
    one_ticket: AtomicBool,
    /// Tickets issued while `one_ticket` is set.
    issued: AtomicU8,
}

impl std::fmt::Debug for WorkerResumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerResumption").finish_non_exhaustive()
    }
}

impl WorkerResumption {
    pub(crate) fn new(
        tickets: Arc<dyn ProducesTickets>,
        sessions: Arc<dyn StoresServerSessions>,
    ) -> WorkerResumption {
        WorkerResumption {
            tickets,
            sessions,
            noted: AtomicU8::new(0),
            one_ticket: AtomicBool::new(false),
            issued: AtomicU8::new(0),
        }
    }

    /// A view of the same tickets and sessions with notes of its own, for one handshake
    /// processed off its worker (`tls::handshake`), whose notes must not mix with the worker's.
    /// With `sessions`, when given: the storage's own copy for that handshake.
    pub(crate) fn fresh(
        &self,
        sessions: Option<Arc<dyn StoresServerSessions>>,
    ) -> WorkerResumption {
        WorkerResumption::new(
            self.tickets.clone(),
            sessions.unwrap_or_else(|| self.sessions.clone()),
        )
    }

    /// Runs `f` (rustls going on with a handshake, which issues the TLS 1.3 tickets once the
    /// client's Finished is in), issuing one ticket at most when the handshake `resumed`. That
    /// is what OpenSSL's servers do (nginx, HAProxy, hitch): after a full handshake rustls'
    /// two, so two resumptions may follow at once; after a resumption one, in place of the
    /// ticket the client used, instead of a ticket encrypted and sent for nothing on every
    /// resumed connection. Like `noted_during`, this relies on `f` being one synchronous call
    /// on the worker's thread.
    pub(crate) fn tickets_during<R>(&self, resumed: bool, f: impl FnOnce() -> R) -> R {
        struct Reset<'a>(&'a AtomicBool);
        impl Drop for Reset<'_> {
            fn drop(&mut self) {
                self.0.store(false, Ordering::Relaxed);
            }
        }
        if !resumed {
            return f();
        }
        self.issued.store(0, Ordering::Relaxed);
        self.one_ticket.store(true, Ordering::Relaxed);
        let _reset = Reset(&self.one_ticket);
        f()
    }

    /// Whether another ticket may be issued now (see `tickets_during`).
    fn may_issue(&self) -> bool {
        !self.one_ticket.load(Ordering::Relaxed) || self.issued.fetch_add(1, Ordering::Relaxed) == 0
    }

    /// Runs `f` (rustls processing a ClientHello) and says which mechanism, if any, gave it a
    /// session.
    pub(crate) fn noted_during<R>(&self, f: impl FnOnce() -> R) -> (R, Option<Mechanism>) {
        self.noted.store(0, Ordering::Relaxed);
        let r = f();
        let m = Mechanism::from_u8(self.noted.swap(0, Ordering::Relaxed));
        (r, m)
    }

    fn note(&self, m: Mechanism) {
        self.noted.store(m as u8, Ordering::Relaxed);
    }
}

impl ProducesTickets for WorkerResumption {
    fn enabled(&self) -> bool {
        self.tickets.enabled()
    }

    fn lifetime(&self) -> u32 {
        self.tickets.lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        // rustls sends no ticket for a None.
        if !self.may_issue() {
            return None;
        }
        self.tickets.encrypt(plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let plain = self.tickets.decrypt(cipher);
        if plain.is_some() {
            self.note(Mechanism::Ticket);
        }
        plain
    }
}

impl StoresServerSessions for WorkerResumption {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        // A TLS 1.3 stateful ticket: rustls sends none when this says false.
        if !self.may_issue() {
            return false;
        }
        self.sessions.put(key, value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let v = self.sessions.get(key);
        if v.is_some() {
            self.note(Mechanism::Id);
        }
        v
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let v = self.sessions.take(key);
        if v.is_some() {
            self.note(Mechanism::Psk);
        }
        v
    }

    fn can_cache(&self) -> bool {
        self.sessions.can_cache()
    }
}
