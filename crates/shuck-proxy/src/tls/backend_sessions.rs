//! A worker's cache of its sessions with the backends (`backend_tls`): rustls' client session
//! store, with room for as many TLS 1.3 tickets per backend as a worker has connections to it
//! at once. rustls' own memory cache keeps 8 per server name, and a ticket is used once: a
//! worker opening 32 connections at once to one backend found no ticket for a fifth of them
//! and made a full handshake each time (measured by `bench/reencrypt`: 80% of the backend's
//! connections resumed, against 99% with room for 32).
//!
//! One per worker: its lock is never contended by another thread.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

use rustls::client::{ClientSessionStore, Tls12ClientSessionValue, Tls13ClientSessionValue};
use rustls::pki_types::ServerName;
use rustls::NamedGroup;

/// Backend names remembered (a `server_name = "client"` set has one per client name).
const SERVERS: usize = 64;
/// TLS 1.3 tickets kept per name: a worker's connections to one backend at once, commonly.
const TICKETS_PER_SERVER: usize = 32;

#[derive(Default)]
struct ServerData {
    kx_hint: Option<NamedGroup>,
    tls12: Option<Tls12ClientSessionValue>,
    /// Oldest first; the newest is used first.
    tls13: VecDeque<Tls13ClientSessionValue>,
}

/// The sessions of one worker, by backend name, and the names in the order they came.
#[derive(Default)]
pub(crate) struct BackendSessions {
    servers: Mutex<(
        HashMap<ServerName<'static>, ServerData>,
        VecDeque<ServerName<'static>>,
    )>,
}

impl std::fmt::Debug for BackendSessions {
    // Session secrets stay out of any output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BackendSessions")
    }
}

impl BackendSessions {
    /// `edit` on `name`'s data, made when new (the name that came first forgotten when full,
    /// as rustls' own cache does).
    fn edit(&self, name: ServerName<'static>, edit: impl FnOnce(&mut ServerData)) {
        let mut guard = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        let (servers, order) = &mut *guard;
        if !servers.contains_key(&name) {
            if servers.len() >= SERVERS {
                if let Some(oldest) = order.pop_front() {
                    servers.remove(&oldest);
                }
            }
            order.push_back(name.clone());
        }
        edit(servers.entry(name).or_default());
    }

    fn read<T>(
        &self,
        name: &ServerName<'static>,
        read: impl FnOnce(&mut ServerData) -> T,
    ) -> Option<T> {
        let mut guard = self.servers.lock().unwrap_or_else(PoisonError::into_inner);
        guard.0.get_mut(name).map(read)
    }
}

impl ClientSessionStore for BackendSessions {
    fn set_kx_hint(&self, name: ServerName<'static>, group: NamedGroup) {
        self.edit(name, |d| d.kx_hint = Some(group));
    }

    fn kx_hint(&self, name: &ServerName<'_>) -> Option<NamedGroup> {
        // rustls asks with a borrowed name: owned for the lookup (a short copy per handshake).
        self.read(&name.to_owned(), |d| d.kx_hint).flatten()
    }

    fn set_tls12_session(&self, name: ServerName<'static>, value: Tls12ClientSessionValue) {
        self.edit(name, |d| d.tls12 = Some(value));
    }

    fn tls12_session(&self, name: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        self.read(&name.to_owned(), |d| d.tls12.clone()).flatten()
    }

    fn remove_tls12_session(&self, name: &ServerName<'static>) {
        self.read(name, |d| d.tls12 = None);
    }

    fn insert_tls13_ticket(&self, name: ServerName<'static>, value: Tls13ClientSessionValue) {
        self.edit(name, |d| {
            if d.tls13.len() >= TICKETS_PER_SERVER {
                d.tls13.pop_front();
            }
            d.tls13.push_back(value);
        });
    }

    fn take_tls13_ticket(&self, name: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        self.read(name, |d| d.tls13.pop_back()).flatten()
    }
}
