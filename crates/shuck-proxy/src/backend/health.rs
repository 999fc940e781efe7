//! The active health checks' verdicts (`health_check`): one per checked set of backends in the
//! process, written by its checker (`server::health_checks`), read by every worker's pool (one
//! relaxed atomic load per backend per connection, no lock): a down backend gets no new
//! connection unless every backend is down. The passive cooldown after a failed connect stays.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::{Backend, BackendAddr, Backends, HealthCheck};

/// The verdict on each backend of one set, in its order: written by its checker, read by pools.
#[derive(Debug)]
pub(crate) struct Health {
    up: Vec<AtomicBool>,
    /// The members' names, for the next set of the same route to take their verdicts.
    names: Vec<String>,
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

/// A checked set: which frontend and route, its members (host names stand for their addresses
/// now) and how they are checked. A change to either makes a new set, which starts with the
/// verdicts of the members that stay; a new policy or timeout keeps the set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct SetKey {
    frontend: String,
    route: String,
    members: Vec<BackendAddr>,
    check: Option<HealthCheck>,
}

impl SetKey {
    pub(crate) fn new(
        frontend: &str,
        route: &str,
        backends: &Backends,
        members: &[BackendAddr],
    ) -> SetKey {
        SetKey {
            frontend: frontend.to_string(),
            route: route.to_string(),
            members: members.to_vec(),
            check: backends.health_check.clone(),
        }
    }

    fn same_route(&self, other: &SetKey) -> bool {
        self.frontend == other.frontend && self.route == other.route
    }
}

/// The verdicts of every checked set in the process, by set: one value, owned by the engine
/// (`worker::Engine`). Locked when a pool is built (start, reload, a DNS change) and when
/// checkers are started or stopped, never per connection.
#[derive(Debug, Default)]
pub(crate) struct Verdicts {
    sets: Mutex<HashMap<SetKey, Arc<Health>>>,
}

impl Verdicts {
    /// The verdicts a pool of `members` (of `backends`) reads; `None` when they are not
    /// checked. A new set takes the verdict of each member an earlier set of the same route had
    /// (DNS gave the route another address; the others stay as checked); a new member starts up.
    pub(crate) fn shared(
        &self,
        frontend: &str,
        route: &str,
        backends: &Backends,
        members: &[BackendAddr],
    ) -> Option<Arc<Health>> {
        if !matches!(backends.target, Backend::Servers(_)) {
            return None;
        }
        backends.health_check.as_ref()?;
        let key = SetKey::new(frontend, route, backends, members);
        let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(h) = sets.get(&key) {
            return Some(h.clone());
        }
        let earlier: HashMap<&str, bool> = sets
            .iter()
            .filter(|(k, _)| k.same_route(&key))
            .flat_map(|(_, h)| {
                h.names
                    .iter()
                    .map(String::as_str)
                    .zip(h.up.iter().map(|u| u.load(Ordering::Relaxed)))
            })
            .collect();
        let health = Arc::new(Health {
            up: members
                .iter()
                .map(|m| AtomicBool::new(earlier.get(m.name.as_str()).copied().unwrap_or(true)))
                .collect(),
            names: members.iter().map(|m| m.name.clone()).collect(),
        });
        sets.insert(key, health.clone());
        Some(health)
    }

    /// Forgets the verdicts of every set not in `wanted`; whether any went. Pools built on
    /// them must then be rebuilt by their workers (`dns::Directory::touch`): a pool never keeps
    /// verdicts no checker writes any more.
    pub(crate) fn keep_only(&self, wanted: &dyn Fn(&SetKey) -> bool) -> bool {
        let mut sets = self.sets.lock().unwrap_or_else(PoisonError::into_inner);
        let before = sets.len();
        sets.retain(|k, _| wanted(k));
        sets.len() != before
    }
}
