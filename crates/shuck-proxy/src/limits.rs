//! Process limits: raise the open-files soft limit to the hard limit, since every proxied
//! connection costs two descriptors; and `max_connections`, one count for all workers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Descriptors kept for listeners, logs and the runtime.
const RESERVED_FDS: u64 = 64;

/// Raises the limit and returns it (or the unchanged limit when raising is not possible).
pub fn raise_fd_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-files limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// How many proxied connections fit in `fd_limit` descriptors.
pub fn connection_capacity(fd_limit: u64) -> u64 {
    fd_limit.saturating_sub(RESERVED_FDS) / 2
}

/// `max_connections` for the whole process. Workers take a slot before each `accept()` and give
/// it back when the connection ends: one atomic add and one subtract per connection, no lock. A
/// per-worker share would let a client wait in a full worker's listen queue (SO_REUSEPORT
/// assigns connections by hash) while another worker had room.
#[derive(Debug)]
pub struct ConnectionLimit {
    max: usize,
    active: AtomicUsize,
}

/// A taken slot; returned on drop.
#[derive(Debug)]
pub struct ConnectionSlot(Arc<ConnectionLimit>);

impl ConnectionLimit {
    pub fn new(max: usize) -> Arc<ConnectionLimit> {
        Arc::new(ConnectionLimit {
            max,
            active: AtomicUsize::new(0),
        })
    }

    /// A slot, or `None` at the limit.
    pub fn try_take(self: &Arc<Self>) -> Option<ConnectionSlot> {
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| ConnectionSlot(self.clone()))
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn active(&self) -> usize {
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
}
