//! The descriptors a configuration needs besides its connections' and the workers' own: health
//! checks, DNS lookups, store links. They are kept back from `max_connections`, so that a full
//! process cannot leave a health check (or a DNS lookup) without a socket, a backend being
//! marked down for what was this host's shortage.

use std::collections::HashSet;

use crate::config::{Backend, Backends, Config, Frontend, Target};

/// A host name stands for at most this many addresses (`dns_follow`'s cap on one answer).
const ADDRESSES_PER_NAME: u64 = 64;
/// A set holds at most this many members (`MAX_BACKENDS`).
const MEMBERS_PER_SET: u64 = crate::config::MAX_BACKENDS as u64;
/// One lookup may hold a UDP and a TCP socket (TCP when UDP fails).
const SOCKETS_PER_LOOKUP: u64 = 2;
/// What one store keeps open per user of it: a link per master of a cluster (a few), and a
/// subscription or a Sentinel query beside it.
const SOCKETS_PER_STORE: u64 = 6;

/// Descriptors `c` needs besides connections and what `limits::reserved_fds` counts for the
/// workers and listeners.
pub(crate) fn other_sockets(c: &Config) -> u64 {
    let mut names = HashSet::new();
    let mut checks = 0;
    let mut stores = 0;
    for fe in &c.frontends {
        for set in sets(fe) {
            names.extend(set.names().cloned());
            if set.health_check.is_some() {
                checks += members_at_most(set);
            }
        }
        // Each worker's own links to the session store; the process's to the fleet's.
        stores += u64::from(fe.session_store.is_some()) * c.workers as u64;
        stores += u64::from(fe.fleet_store().is_some());
    }
    checks + names.len() as u64 * SOCKETS_PER_LOOKUP + stores * SOCKETS_PER_STORE
}

fn sets(fe: &Frontend) -> impl Iterator<Item = &Backends> {
    std::iter::once(&fe.backend).chain(fe.route.0.iter().map(|r| &r.backend))
}

/// The most members `set` can have: its addresses, each host name standing for as many as an
/// answer gives.
fn members_at_most(set: &Backends) -> u64 {
    let Backend::Servers(addrs) = &set.target else {
        return 0;
    };
    let n: u64 = addrs
        .iter()
        .map(|b| match b.addr {
            Target::Name(_) => ADDRESSES_PER_NAME,
            Target::Tcp(_) | Target::Unix(_) => 1,
        })
        .sum();
    n.min(MEMBERS_PER_SET)
}
