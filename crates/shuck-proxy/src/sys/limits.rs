//! Process limits: raise the open-files soft limit to the hard limit, since every proxied
//! connection costs two descriptors; and `max_connections`, one count for all workers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::Error;

/// Descriptors kept for the process itself (main runtime, signals, logs, the metrics endpoint
/// and its scrapes), before those each worker needs.
const RESERVED_FDS: u64 = 64;
/// Per worker: its runtime's epoll and eventfd.
const PER_WORKER_FDS: u64 = 2;
/// Per worker and listen address: the listening socket twice (the worker's, and the copy kept
/// to hand over on an upgrade), and one accepted socket its accept loop may hold while waiting
/// for a `max_connections` slot.
const PER_ADDRESS_FDS: u64 = 3;

/// Descriptors that are not connections', for `workers` workers listening on `addresses`
/// addresses each, and `others` the configuration's tasks open (health checks, DNS, stores).
pub(crate) fn reserved_fds(workers: usize, addresses: usize, others: u64) -> u64 {
    RESERVED_FDS + workers as u64 * (PER_WORKER_FDS + PER_ADDRESS_FDS * addresses as u64) + others
}

/// Raises the limit and returns it (or the unchanged limit when raising is not possible).
pub(crate) fn raise_fd_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-files limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// How many proxied connections fit in `fd_limit` descriptors, `reserved` kept back.
pub(crate) fn connection_capacity(fd_limit: u64, reserved: u64) -> u64 {
    fd_limit.saturating_sub(reserved) / 2
}

/// `max_connections` as the open-files limit can serve it: at most one connection per two
/// descriptors left after the reserve, so a full process stops accepting (clients wait in the
/// backlog) instead of accepting clients whose backend connection then fails for want of a
/// descriptor, with the backend blamed. No room at all is a start-up error.
pub(crate) fn effective_max_connections(
    configured: usize,
    fd_limit: u64,
    reserved: u64,
) -> Result<usize, Error> {
    let capacity = connection_capacity(fd_limit, reserved);
    if capacity == 0 {
        return Err(Error::FdLimit { fd_limit, reserved });
    }
    let capacity = usize::try_from(capacity).unwrap_or(usize::MAX);
    if configured > capacity {
        tracing::warn!(
            max_connections = configured,
            fd_limit,
            using = capacity,
            "max_connections is more than the open-files limit can serve (2 descriptors a connection, {reserved} reserved): using {capacity}; raise `ulimit -n` (LimitNOFILE= under systemd) for more"
        );
        return Ok(capacity);
    }
    Ok(configured)
}

/// `max_connections` for the whole process. Workers take a slot before each `accept()` and give
/// it back when the connection ends: one atomic add and one subtract per connection, no lock. A
/// per-worker share would let a client wait in a full worker's listen queue (SO_REUSEPORT
/// assigns connections by hash) while another worker had room. The maximum is an atomic too, so
/// a reload changes it in place: a lower one stops accepting until enough connections end, none
/// is closed.
#[derive(Debug)]
pub(crate) struct ConnectionLimit {
    max: AtomicUsize,
    active: AtomicUsize,
}

/// A taken slot; returned on drop.
#[derive(Debug)]
pub(crate) struct ConnectionSlot(Arc<ConnectionLimit>);

impl ConnectionLimit {
    pub(crate) fn new(max: usize) -> Arc<ConnectionLimit> {
        Arc::new(ConnectionLimit {
            max: AtomicUsize::new(max),
            active: AtomicUsize::new(0),
        })
    }

    /// A slot, or `None` at the limit.
    pub(crate) fn try_take(self: &Arc<Self>) -> Option<ConnectionSlot> {
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.max()).then_some(n + 1)
            })
            .ok()
            .map(|_| ConnectionSlot(self.clone()))
    }

    pub(crate) fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    /// Applies a reloaded `max_connections`; returns the one it replaces.
    pub(crate) fn set_max(&self, max: usize) -> usize {
        self.max.swap(max, Ordering::Relaxed)
    }

    /// Whether no slot is free now.
    pub(crate) fn is_full(&self) -> bool {
        self.active() >= self.max()
    }

    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_never_exceeds_what_descriptors_can_serve() {
        // One worker on one address keeps 64 + 2 + 3.
        assert_eq!(reserved_fds(1, 1, 0), 69);
        // With 100 checked backends, their sockets too.
        assert_eq!(reserved_fds(1, 1, 100), 169);
        assert_eq!(effective_max_connections(8192, 20_000, 69).unwrap(), 8192);
        assert_eq!(effective_max_connections(8192, 1024, 69).unwrap(), 477);
        // 32 workers on two addresses each keep 64 + 32 * (2 + 2 * 3): fewer connections fit.
        assert_eq!(reserved_fds(32, 2, 0), 320);
        assert_eq!(effective_max_connections(8192, 1024, 320).unwrap(), 352);
        let e = effective_max_connections(10, 64, 68)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("(64)") && e.contains("68") && e.contains("ulimit"),
            "{e}"
        );
    }

    #[test]
    fn slots_are_bounded_and_come_back() {
        let l = ConnectionLimit::new(2);
        let a = l.try_take().expect("first");
        let b = l.try_take().expect("second");
        assert!(l.try_take().is_none(), "a third beyond max 2");
        drop(a);
        let c = l.try_take().expect("a freed slot");
        assert_eq!(l.active(), 2);
        drop((b, c));
        assert_eq!(l.active(), 0);
    }

    #[test]
    fn a_lower_maximum_keeps_the_slots_taken_and_refuses_new_ones() {
        let l = ConnectionLimit::new(3);
        let taken: Vec<_> = (0..3).map(|_| l.try_take().expect("a slot")).collect();
        assert_eq!(l.set_max(1), 3);
        assert!(l.is_full() && l.try_take().is_none());
        drop(taken);
        let one = l.try_take().expect("room again once they end");
        assert!(l.try_take().is_none(), "a second beyond the new max 1");
        l.set_max(2);
        assert!(l.try_take().is_some(), "a raised max frees a slot at once");
        drop(one);
    }
}
