//! The active health checks' verdicts (`health_check`): one per checked set of backends in the
//! process, written by its checker (`server::health_checks`), read by every worker's pool (one
//! relaxed atomic load per backend per connection, no lock): a down backend gets no new
//! connection unless every backend is down. The passive cooldown after a failed connect stays.
//!
//! With `observe`, real traffic writes them too: each member counts the failures in a row its
//! connections see, across workers (relaxed atomics, written on a failure, only read on a
//! success while the count is 0), and the one that reaches `error_limit` takes the member out,
//! then wakes its checker, which says so and counts `rise` afresh.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::config::{Backend, BackendAddr, Backends, HealthCheck};

/// The verdict on each backend of one set, in its order: written by its checker, read by pools.
#[derive(Debug)]
pub(crate) struct Health {
    up: Vec<AtomicBool>,
    /// The members' names, for the next set of the same route to take their verdicts.
    names: Vec<String>,
    /// With `observe`: each member's failures in a row on real traffic (empty without).
    failures: Vec<AtomicU32>,
    /// With `observe`: the failures in a row that take a member out.
    error_limit: u32,
    /// Woken when traffic took a member out, for its checker to say so at once.
    taken_out: tokio::sync::Notify,
}

/// What one connection showed of its backend, for `observe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    /// It answered (a byte came back), or the relay ended in order.
    Answered,
    /// Its connect failed, or it reset or broke the connection before its first byte.
    Failed,
    /// Nothing to judge it by (the client went away before the backend said anything).
    Nothing,
}

impl Health {
    pub(crate) fn is_up(&self, i: usize) -> bool {
        self.up.get(i).is_none_or(|u| u.load(Ordering::Relaxed))
    }

    /// The checker's verdict on backend `i`. Back up, its count of failures on traffic starts
    /// afresh.
    pub(crate) fn set_up(&self, i: usize, up: bool) {
        if let Some(u) = self.up.get(i) {
            u.store(up, Ordering::Relaxed);
        }
        if let (true, Some(f)) = (up, self.failures.get(i)) {
            f.store(0, Ordering::Relaxed);
        }
    }

    /// What a connection to backend `i` showed (`observe`; nothing without it). The failure
    /// that makes `error_limit` in a row takes it out, once however many workers see it.
    pub(crate) fn seen(&self, i: usize, seen: Seen) {
        let Some(failures) = self.failures.get(i) else {
            return;
        };
        match seen {
            Seen::Nothing => {}
            // Read first: a backend that answers costs no write to the shared line.
            Seen::Answered => {
                if failures.load(Ordering::Relaxed) != 0 {
                    failures.store(0, Ordering::Relaxed);
                }
            }
            // Failures while down (every backend down, or connections already under way)
            // are not counted: the checks bring it back.
            Seen::Failed if !self.is_up(i) => {}
            Seen::Failed => {
                let n = failures.fetch_add(1, Ordering::Relaxed).saturating_add(1);
                let out = n >= self.error_limit
                    && self.up[i]
                        .compare_exchange(true, false, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok();
                if out {
                    failures.store(0, Ordering::Relaxed);
                    self.taken_out.notify_one();
                }
            }
        }
    }

    /// `error_limit`, when traffic is observed.
    pub(crate) fn error_limit(&self) -> Option<u32> {
        (!self.failures.is_empty()).then_some(self.error_limit)
    }

    /// Until traffic takes a member out (`seen`); at once if it did since the last wait.
    pub(crate) async fn taken_out(&self) {
        self.taken_out.notified().await;
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
    /// Checks go in TLS as the connections do.
    tls: Option<crate::config::backend_tls::BackendTls>,
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
            tls: backends.tls.clone(),
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
        let error_limit = backends.health_check.as_ref().and_then(|c| c.error_limit);
        let health = Arc::new(Health {
            up: members
                .iter()
                .map(|m| AtomicBool::new(earlier.get(m.name.as_str()).copied().unwrap_or(true)))
                .collect(),
            names: members.iter().map(|m| m.name.clone()).collect(),
            failures: match error_limit {
                Some(_) => members.iter().map(|_| AtomicU32::new(0)).collect(),
                None => Vec::new(),
            },
            error_limit: error_limit.unwrap_or(u32::MAX),
            taken_out: tokio::sync::Notify::new(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{BackendPolicy, Target};
    use std::time::Duration;

    /// The verdicts of a checked set of two, traffic observed with `error_limit`.
    fn observed(error_limit: Option<u32>) -> Arc<Health> {
        let members: Vec<BackendAddr> = (0..2)
            .map(|i| BackendAddr {
                name: format!("b{i}"),
                addr: Target::Tcp(([127, 0, 0, 1], 1000 + i).into()),
                weight: 1,
            })
            .collect();
        let second = Duration::from_secs(1);
        let backends = Backends {
            target: Backend::Servers(members.clone()),
            policy: BackendPolicy::RoundRobin,
            connect_timeout: second,
            cooldown: second,
            health_check: Some(HealthCheck {
                interval: second,
                timeout: second,
                rise: 2,
                fall: 3,
                http: None,
                expect_status: 200,
                host: None,
                error_limit,
            }),
            dns_refresh: None,
            tls: None,
        };
        Verdicts::default()
            .shared("web", "default", &backends, &members)
            .expect("checked")
    }

    #[tokio::test(start_paused = true)]
    async fn failures_in_a_row_on_traffic_take_a_member_out_once() {
        let h = observed(Some(3));
        h.seen(0, Seen::Failed);
        h.seen(0, Seen::Failed);
        // An answer starts the count afresh; a connection that showed nothing does not.
        h.seen(0, Seen::Answered);
        h.seen(0, Seen::Failed);
        h.seen(0, Seen::Nothing);
        h.seen(0, Seen::Failed);
        assert!(h.is_up(0));
        h.seen(0, Seen::Failed);
        assert!(!h.is_up(0) && h.is_up(1));
        // Its checker hears of it at once, and once: failures while down are not counted.
        let woken = tokio::time::timeout(Duration::from_secs(1), h.taken_out()).await;
        assert!(woken.is_ok());
        for _ in 0..10 {
            h.seen(0, Seen::Failed);
        }
        let again = tokio::time::timeout(Duration::from_secs(1), h.taken_out()).await;
        assert!(again.is_err());
        // Brought back by the checks, it starts from no failure.
        h.set_up(0, true);
        h.seen(0, Seen::Failed);
        h.seen(0, Seen::Failed);
        assert!(h.is_up(0));
    }

    #[test]
    fn without_observe_traffic_takes_nothing_out() {
        let h = observed(None);
        for _ in 0..200 {
            h.seen(0, Seen::Failed);
        }
        assert!(h.is_up(0));
        assert_eq!(h.error_limit(), None);
    }
}
