//! What watches the backends while the server runs, in one handle for the server and the
//! reloader: the DNS followers (what a host name stands for) and the active health checks
//! (whether each member answers). DNS comes first: the checks check what it gives.

use std::sync::{Arc, Mutex, PoisonError};

use super::dns_follow::Followers;
use super::health_checks::Checkers;
use crate::config::Frontend;
use crate::metrics::Metrics;
use crate::worker::Engine;

#[derive(Clone)]
pub(crate) struct BackendWatch {
    checkers: Arc<Mutex<Checkers>>,
    dns: Arc<Mutex<Followers>>,
    /// Where the answers and verdicts go.
    engine: Arc<Engine>,
}

impl BackendWatch {
    pub(crate) fn new(engine: Arc<Engine>) -> BackendWatch {
        BackendWatch {
            checkers: Arc::default(),
            dns: Arc::default(),
            engine,
        }
    }

    /// From now on, both run on `rt` and count into `metrics`.
    pub(crate) fn start(&self, rt: &tokio::runtime::Handle, metrics: &Arc<Metrics>) {
        self.checkers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .start(rt.clone(), metrics.clone(), self.engine.clone());
        self.dns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .start(
                rt.clone(),
                self.engine.clone(),
                metrics.clone(),
                self.checkers.clone(),
            );
    }

    /// Follows the host names of `frontends` as `lookups` says and waits (blocking the
    /// thread, a few seconds at most) for the first answers of new names, so that the
    /// connections `frontends` take next have addresses to go to. With `prune`, stops following
    /// the names `frontends` do not have.
    pub(crate) fn follow_names(
        &self,
        frontends: &[&Frontend],
        lookups: &crate::config::DnsLookups,
        prune: bool,
    ) {
        let first = self
            .dns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sync(frontends, lookups, prune);
        first.wait();
    }

    /// Checks the checked sets of `frontends` (as DNS gives their members now).
    pub(crate) fn check(&self, frontends: &[&Frontend]) {
        self.checkers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .sync(frontends);
    }
}
