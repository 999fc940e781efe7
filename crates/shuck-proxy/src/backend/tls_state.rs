//! Whether TLS to each backend works (`backend_tls`), for the process: one flag per member,
//! shared by every worker's pool, so that a backend whose handshakes start failing is said once
//! (one warning with the first error) and once again when one succeeds, however many workers
//! and connections see it. The connections' own lines go through the per-connection rate limit
//! as any failure's; these are the lines an operator greps for.
//!
//! A member whose handshakes fail now and then (a virtual address with one bad node behind
//! it) stays failing until none has failed for `QUIET`: at most one pair of lines per `QUIET`
//! per member, however it flaps.
//!
//! The flags are looked up when a pool is built (a lock then, never per connection); a
//! connection reads its member's flag with one relaxed load and writes only on a failure or a
//! change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::admin::MemberKey;
use crate::sys::clock::monotonic_ms as now_ms;

/// How long a failing member must go without a failure before a success says it works.
const QUIET: Duration = Duration::from_secs(10);

/// One member's flag and names, for its lines.
#[derive(Debug)]
pub(crate) struct TlsState {
    failing: AtomicBool,
    /// When its last handshake failed (`now_ms`).
    last_failure_ms: AtomicU64,
    key: MemberKey,
}

impl TlsState {
    /// A handshake with it failed with `error`: says so if it was working.
    pub(crate) fn failed(&self, error: &dyn std::fmt::Display) {
        self.last_failure_ms.store(now_ms(), Ordering::Relaxed);
        if !self.failing.swap(true, Ordering::Relaxed) {
            let k = &self.key;
            tracing::warn!(frontend = %k.frontend, route = %k.route, backend = %k.backend, error = %error, "TLS to the backend fails; said again only once it works");
        }
    }

    /// A handshake with it succeeded: says so if it was failing and none failed for `QUIET`
    /// (a read first, so a backend that works costs no write to the shared line).
    pub(crate) fn worked(&self) {
        self.worked_at(now_ms());
    }

    fn worked_at(&self, now_ms: u64) {
        if !self.failing.load(Ordering::Relaxed) {
            return;
        }
        let quiet = now_ms.saturating_sub(self.last_failure_ms.load(Ordering::Relaxed));
        if u128::from(quiet) >= QUIET.as_millis() && self.failing.swap(false, Ordering::Relaxed) {
            let k = &self.key;
            tracing::info!(frontend = %k.frontend, route = %k.route, backend = %k.backend, "TLS to the backend works again");
        }
    }

    #[cfg(test)]
    fn is_failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }
}

/// Every member's flag, by frontend, route and member; owned by the engine.
#[derive(Debug, Default)]
pub(crate) struct TlsStates {
    all: Mutex<HashMap<MemberKey, Arc<TlsState>>>,
}

impl TlsStates {
    /// The flags of `members` of `frontend`'s `route`, in their order (made working when new);
    /// the route's other members are forgotten (DNS gave it other addresses, or its backends
    /// are no longer in TLS: pass none). A worker whose pool still has them keeps their flags
    /// until it builds its next pool.
    pub(crate) fn of<'a>(
        &self,
        frontend: &str,
        route: &str,
        members: impl Iterator<Item = &'a str> + Clone,
    ) -> Vec<Arc<TlsState>> {
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|k, _| {
            k.frontend != frontend || k.route != route || members.clone().any(|m| m == k.backend)
        });
        members
            .map(|backend| {
                let key = MemberKey {
                    frontend: frontend.to_string(),
                    route: route.to_string(),
                    backend: backend.to_string(),
                };
                all.entry(key.clone())
                    .or_insert_with(|| {
                        Arc::new(TlsState {
                            failing: AtomicBool::new(false),
                            last_failure_ms: AtomicU64::new(0),
                            key,
                        })
                    })
                    .clone()
            })
            .collect()
    }

    /// Forgets the members `keep` no longer wants (a reload dropped them).
    pub(crate) fn keep_only(&self, keep: impl Fn(&MemberKey) -> bool) {
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|k, _| keep(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pool_of_a_member_shares_its_flag_and_a_change_flips_it_once() {
        let states = TlsStates::default();
        let a = states.of("web", "default", ["b:443", "c:443"].into_iter());
        let b = states.of("web", "default", ["b:443"].into_iter());
        assert!(Arc::ptr_eq(&a[0], &b[0]));
        a[0].failed(&"bad certificate");
        assert!(b[0].is_failing() && !a[1].is_failing());
        // Too soon after a failure: still failing (a flapping backend stays one state).
        b[0].worked();
        assert!(a[0].is_failing());
        let failed_at = a[0].last_failure_ms.load(Ordering::Relaxed);
        let quiet = u64::try_from(QUIET.as_millis()).unwrap();
        b[0].worked_at(failed_at + quiet - 1);
        assert!(a[0].is_failing());
        b[0].worked_at(failed_at + quiet);
        assert!(!a[0].is_failing());
        states.keep_only(|k| k.backend == "c:443");
        let again = states.of("web", "default", ["b:443"].into_iter());
        assert!(!Arc::ptr_eq(&again[0], &a[0]));
        // Building the route's flags for other members forgets the ones it no longer has.
        let c = states.of("web", "default", ["c:443"].into_iter());
        let again = states.of("web", "default", ["b:443"].into_iter());
        assert!(!Arc::ptr_eq(&again[0], &b[0]) && !c.is_empty());
    }
}
