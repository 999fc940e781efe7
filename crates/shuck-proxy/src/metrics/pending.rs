//! The metrics listener's connections that have not sent their request yet. Every connection is
//! accepted at once and given the endpoint's request timeout to send its request; what it
//! holds meanwhile is a task and a small buffer, no scrape slot. So that silent connections
//! cannot pile up, one client (an IP address) may have at most [`PER_CLIENT`] of them and all
//! clients [`IN_ALL`]: past either, the oldest of that client (or of all) is closed for the new
//! one. A probe on a fresh connection is thus always read, whoever else is connected.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::AbortHandle;

/// Connections without a request yet, per client address.
pub(super) const PER_CLIENT: usize = 8;
/// Connections without a request yet, in all: with the 8 scrapes, within the descriptors kept
/// back for the process itself (`sys::limits`).
pub(super) const IN_ALL: usize = 32;

/// The connections waiting for their request, oldest first.
#[derive(Default)]
struct Waiting {
    next_id: u64,
    all: BTreeMap<u64, (IpAddr, AbortHandle)>,
    by_client: HashMap<IpAddr, VecDeque<u64>>,
}

impl Waiting {
    fn remove(&mut self, id: u64) -> Option<AbortHandle> {
        let (client, handle) = self.all.remove(&id)?;
        if let Some(ids) = self.by_client.get_mut(&client) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_client.remove(&client);
            }
        }
        Some(handle)
    }

    /// The connection to close for a new one of `client`: its oldest when it is at its cap,
    /// else the oldest of all when all are at theirs.
    fn to_evict(&self, client: IpAddr) -> Option<u64> {
        match self.by_client.get(&client) {
            Some(ids) if ids.len() >= PER_CLIENT => ids.front().copied(),
            _ if self.all.len() >= IN_ALL => self.all.keys().next().copied(),
            _ => None,
        }
    }
}

/// The registry, shared by the accept loop and the connections' tasks.
#[derive(Clone, Default)]
pub(super) struct Pending(Arc<Mutex<Waiting>>);

/// One connection's place in the registry: left when its request arrived, or when it ends.
pub(super) struct Place {
    pending: Pending,
    id: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.pending.lock().remove(self.id);
    }
}

impl Pending {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers the task `handle` serving a new connection of `client`, first closing the
    /// connection over the caps; how many were closed (0 or 1).
    pub(super) fn admit(&self, client: IpAddr, handle: AbortHandle) -> (Place, usize) {
        let mut w = self.lock();
        let mut evicted = 0;
        if let Some(old) = w.to_evict(client) {
            if let Some(h) = w.remove(old) {
                h.abort();
                evicted = 1;
            }
        }
        let id = w.next_id;
        w.next_id += 1;
        w.all.insert(id, (client, handle));
        w.by_client.entry(client).or_default().push_back(id);
        (
            Place {
                pending: self.clone(),
                id,
            },
            evicted,
        )
    }

    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.lock().all.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_oldest_silent_connection_of_a_client_or_of_all_is_closed() {
        let pending = Pending::default();
        let task = || tokio::spawn(std::future::pending::<()>());
        let a: IpAddr = [127, 0, 0, 2].into();
        let mut tasks: VecDeque<_> = (0..PER_CLIENT).map(|_| task()).collect();
        let mut places: Vec<Place> = tasks
            .iter()
            .map(|t| pending.admit(a, t.abort_handle()).0)
            .collect();
        let newest = task();
        let (place, evicted) = pending.admit(a, newest.abort_handle());
        places.push(place);
        assert_eq!(evicted, 1);
        let oldest = tasks.pop_front().unwrap();
        assert!(oldest.await.unwrap_err().is_cancelled(), "the oldest of a");
        assert!(!tasks[0].is_finished());
        assert_eq!(pending.waiting(), PER_CLIENT);
        // A connection whose request came leaves: no eviction is charged to it.
        drop(places.pop());
        assert_eq!(pending.waiting(), PER_CLIENT - 1);
        // Many clients: past IN_ALL, the oldest of all goes.
        let mut others = Vec::new();
        for i in 0..(IN_ALL - PER_CLIENT + 2) {
            let ip: IpAddr = [10, 0, (i / 250) as u8, (i % 250) as u8].into();
            let t = task();
            let (p, _) = pending.admit(ip, t.abort_handle());
            others.push((t, p));
        }
        assert_eq!(pending.waiting(), IN_ALL);
        let oldest = tasks.pop_front().unwrap();
        assert!(
            oldest.await.unwrap_err().is_cancelled(),
            "the oldest of all"
        );
    }
}
