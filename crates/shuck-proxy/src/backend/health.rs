//! The active health checks' verdicts (`health_check`): one per checked set of backends in the
//! process, written by its checker (`server::health_checks`), read by every worker's pool (one
//! relaxed atomic load per backend per connection, no lock): a down backend gets no new
//! connection unless every backend is down. The passive cooldown after a failed connect stays.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use crate::config::{Backend, Backends};

/// The verdict on each backend of one set, in its order: written by its checker, read by pools.
#[derive(Debug)]
pub(crate) struct Health {
    up: Vec<AtomicBool>,
}

impl Health {
    pub(crate) fn is_up(&self, i: usize) -> bool {
        self.up.get(i).is_none_or(|u| u.load(Ordering::Relaxed))
    }

    /// The checker's verdict on backend `i`.
    pub(crate) fn set_up(&self, i: usize, up: bool) {
        if let Some(u) = self.up.get(i) {
            u.store(up, Ordering::Relaxed);
        }
    }
}

/// A checked set: which frontend and route, its backends and how they are checked (a change to
/// either makes a new set; a new policy or timeout keeps the verdicts).
pub(crate) fn key(frontend: &str, route: &str, backends: &Backends) -> String {
    format!(
        "{frontend}\u{0}{route}\u{0}{:?}\u{0}{:?}",
        backends.target, backends.health_check
    )
}

/// The verdicts of every checked set, by key. Locked when a pool is built (start, reload) and
/// when checkers are started or stopped, never per connection.
static SETS: LazyLock<Mutex<HashMap<String, Arc<Health>>>> = LazyLock::new(Mutex::default);

/// The verdicts a pool for `backends` reads (every backend up until a check says otherwise);
/// `None` when they are not checked.
pub(crate) fn shared(frontend: &str, route: &str, backends: &Backends) -> Option<Arc<Health>> {
    let Backend::Servers(addrs) = &backends.target else {
        return None;
    };
    backends.health_check.as_ref()?;
    let mut sets = SETS.lock().unwrap_or_else(PoisonError::into_inner);
    let health = sets
        .entry(key(frontend, route, backends))
        .or_insert_with(|| {
            Arc::new(Health {
                up: addrs.iter().map(|_| AtomicBool::new(true)).collect(),
            })
        });
    Some(health.clone())
}

/// Forgets the verdicts of a set no longer checked (pools built before keep their copy).
pub(crate) fn forget(key: &str) {
    SETS.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(key);
}
