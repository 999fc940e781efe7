//! The engine: what the parts of one running server share, as one value. The server makes it at
//! start and hands it to every worker, the reloader and the tasks that write it (DNS followers,
//! health checkers, ACME orders). None of it is a process-wide static: two servers in one
//! process (the tests start many) never see each other's answers, verdicts or challenges.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::dns::Directory;
use crate::backend::health::Verdicts;
use crate::certs::acme::challenge::Challenges;
use crate::config::{Config, ConnectionLogFormat};
use crate::store::fleet::FleetStores;

#[derive(Debug)]
pub(crate) struct Engine {
    /// What each followed backend host name resolves to now.
    pub(crate) dns: Directory,
    /// The active health checks' verdicts, by checked set.
    pub(crate) health: Verdicts,
    /// The ACME challenges validators are answered with: this process's orders' and those
    /// fetched from a fleet's store.
    pub(crate) challenges: Arc<Challenges>,
    /// The stores fleets share their ACME state through, one per URL and key.
    pub(crate) fleet_stores: FleetStores,
    /// Each frontend's admission counts, shared by its workers and kept across reloads.
    pub(crate) gates: super::admission::Gates,
    /// The process-wide settings a reload changes in place, shared by all workers: written only
    /// by a reload, read with a relaxed load (a connection under way when the access log is
    /// switched may log without the fields it did not keep).
    log_connections: AtomicBool,
    /// `connection_log_format`, replaced whole by a reload.
    log_format: arc_swap::ArcSwap<ConnectionLogFormat>,
    shutdown_grace_ms: AtomicU64,
    /// `overload_threshold` in millionths.
    overload_ppm: std::sync::atomic::AtomicU32,
    expiry_warning_s: AtomicU64,
    /// Started with an admin socket: relayed connections keep their server name for
    /// `shuck ctl show connections`.
    lists_connections: bool,
    /// The operator's states and weights of backends (`shuck ctl backend …`).
    pub(crate) backend_states: crate::backend::admin::AdminStates,
    /// Whether TLS to each backend works (`backend_tls`), said once per change.
    pub(crate) backend_tls_states: crate::backend::tls_state::TlsStates,
    /// The configuration in force (the frontends as the workers read them), for the admin
    /// socket.
    in_force: arc_swap::ArcSwap<Config>,
    /// What wakes each `ocsp = "fetch"` frontend's staple tasks to ask the responder now, one
    /// per task (a wake-up waits for a task that is not waiting yet).
    staples_now: std::sync::Mutex<std::collections::HashMap<String, Vec<Arc<tokio::sync::Notify>>>>,
}

/// A share (validated to 0.05–1.0) in millionths.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "the share is validated to 0.05..=1.0, so the product fits a u32 and is positive"
)]
fn millionths(share: f64) -> u32 {
    (share * 1_000_000.0).round() as u32
}

impl Engine {
    pub(crate) fn new(c: &Config) -> Arc<Engine> {
        let e = Engine {
            dns: Directory::default(),
            health: Verdicts::default(),
            challenges: Arc::default(),
            fleet_stores: FleetStores::default(),
            gates: super::admission::Gates::default(),
            log_connections: AtomicBool::new(false),
            log_format: arc_swap::ArcSwap::from_pointee(ConnectionLogFormat::Fields),
            shutdown_grace_ms: AtomicU64::new(0),
            overload_ppm: std::sync::atomic::AtomicU32::new(1_000_000),
            expiry_warning_s: AtomicU64::new(0),
            // As started: the socket is made once, and a reload does not change it.
            lists_connections: c.admin_socket.is_some(),
            backend_states: crate::backend::admin::AdminStates::default(),
            backend_tls_states: crate::backend::tls_state::TlsStates::default(),
            in_force: arc_swap::ArcSwap::from_pointee(c.clone()),
            staples_now: std::sync::Mutex::default(),
        };
        e.apply(c);
        Arc::new(e)
    }

    /// Takes `log_connections`, `connection_log_format`, `shutdown_grace` and
    /// `certificate_expiry_warning` from `c`.
    pub(crate) fn apply(&self, c: &Config) {
        let grace = u64::try_from(c.shutdown_grace.as_millis()).unwrap_or(u64::MAX);
        self.log_connections
            .store(c.log_connections, Ordering::Relaxed);
        self.log_format
            .store(Arc::new(c.connection_log_format.clone()));
        self.shutdown_grace_ms.store(grace, Ordering::Relaxed);
        self.overload_ppm
            .store(millionths(c.overload_threshold), Ordering::Relaxed);
        self.expiry_warning_s
            .store(c.certificate_expiry_warning.as_secs(), Ordering::Relaxed);
    }

    /// Whether relayed connections keep their server name for the admin socket.
    pub(crate) fn lists_connections(&self) -> bool {
        self.lists_connections
    }

    /// Records `c` as the configuration in force (at start and after each reload), and
    /// forgets the backend states of backends it no longer has; those forgotten.
    pub(crate) fn publish(&self, c: &Config) -> Vec<crate::backend::admin::MemberKey> {
        self.in_force.store(Arc::new(c.clone()));
        self.backend_tls_states
            .keep_only(|k| crate::backend::admin::configured(c, k));
        self.backend_states
            .keep_configured(|k| crate::backend::admin::configured(c, k))
    }

    /// The configuration in force.
    pub(crate) fn in_force(&self) -> Arc<Config> {
        self.in_force.load_full()
    }

    /// What wakes one of `frontend`'s staple tasks.
    pub(crate) fn staples_now(&self, frontend: &str) -> Arc<tokio::sync::Notify> {
        let wake = Arc::new(tokio::sync::Notify::new());
        self.staples_now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(frontend.to_string())
            .or_default()
            .push(wake.clone());
        wake
    }

    /// Wakes `frontend`'s staple tasks to ask their responders now; whether it has any.
    pub(crate) fn fetch_staples_now(&self, frontend: &str) -> bool {
        let all = self
            .staples_now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tasks = all.get(frontend).map(Vec::as_slice).unwrap_or_default();
        for t in tasks {
            t.notify_one();
        }
        !tasks.is_empty()
    }

    /// Whether every connection gets its access-log line (`log_connections`).
    pub(crate) fn log_connections(&self) -> bool {
        self.log_connections.load(Ordering::Relaxed)
    }

    /// How access-log lines are written now (`connection_log_format`).
    pub(crate) fn log_format(&self) -> Arc<ConnectionLogFormat> {
        self.log_format.load_full()
    }

    /// How long before a certificate's end the twice-daily check warns of it.
    pub(crate) fn expiry_warning(&self) -> Duration {
        Duration::from_secs(self.expiry_warning_s.load(Ordering::Relaxed))
    }

    /// `overload_threshold` in millionths (1,000,000: never shed).
    pub(crate) fn overload_threshold(&self) -> u32 {
        self.overload_ppm.load(Ordering::Relaxed)
    }

    pub(crate) fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms.load(Ordering::Relaxed))
    }

    /// Forgets the verdicts of every checked set not in `wanted`; the workers then rebuild the
    /// pools built on them (a pool never keeps verdicts no checker writes any more).
    pub(crate) fn keep_health_sets(
        &self,
        wanted: &dyn Fn(&crate::backend::health::SetKey) -> bool,
    ) {
        if self.health.keep_only(wanted) {
            self.dns.touch();
        }
    }
}
