//! Whether TLS to each backend works (`backend_tls`), for the process: one flag per member,
//! shared by every worker's pool, so that a backend whose handshakes start failing is said once
//! (one warning with the first error) and once again when one succeeds, however many workers
//! and connections see it. The connections' own lines go through the per-connection rate limit
//! as any failure's; these are the lines an operator greps for.
//!
//! The flags are looked up when a pool is built (a lock then, never per connection); a
//! connection reads its member's flag with one relaxed load and writes it only on a change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::admin::MemberKey;

/// One member's flag and names, for its lines.
#[derive(Debug)]
pub(crate) struct TlsState {
    failing: AtomicBool,
    key: MemberKey,
}

impl TlsState {
    /// A handshake with it failed with `error`: says so if it was working.
    pub(crate) fn failed(&self, error: &dyn std::fmt::Display) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            let k = &self.key;
            tracing::warn!(frontend = %k.frontend, route = %k.route, backend = %k.backend, error = %error, "TLS to the backend fails; said again only once it works");
        }
    }

    /// A handshake with it succeeded: says so if it was failing (a read first, so a backend
    /// that works costs no write to the shared line).
    pub(crate) fn worked(&self) {
        if self.failing.load(Ordering::Relaxed) && self.failing.swap(false, Ordering::Relaxed) {
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
    /// The flags of `members` of `frontend`'s `route`, in their order (made working when new).
    pub(crate) fn of<'a>(
        &self,
        frontend: &str,
        route: &str,
        members: impl Iterator<Item = &'a str>,
    ) -> Vec<Arc<TlsState>> {
        let mut all = self.all.lock().unwrap_or_else(PoisonError::into_inner);
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
        b[0].worked();
        assert!(!a[0].is_failing());
        states.keep_only(|k| k.backend == "c:443");
        let again = states.of("web", "default", ["b:443"].into_iter());
        assert!(!Arc::ptr_eq(&again[0], &a[0]));
    }
}
