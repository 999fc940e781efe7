//! What a worker holds while it runs: its own identity and, per frontend, its own TLS
//! configuration slot, backend state and metric handles. A worker is one thread, so none of this
//! is shared with another worker (certificates and ticket keys are read-only or lock-free).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::backend::BackendPool;
use crate::certs::acme::challenge;
use crate::config::{Backend, Backends, CertSource, Config, ConnectionLogFormat, Frontend};
use crate::obs::metrics::{FrontendMetrics, Metrics};
use crate::tls::{self, TlsSlot};

/// The process-wide settings a reload changes in place, shared by all workers: written only by
/// a reload, read with a relaxed load (a connection under way when the access log is switched
/// may log without the fields it did not keep).
#[derive(Debug)]
pub(crate) struct Shared {
    log_connections: AtomicBool,
    haproxy_format: AtomicBool,
    shutdown_grace_ms: AtomicU64,
    expiry_warning_s: AtomicU64,
}

impl Shared {
    pub(crate) fn new(c: &Config) -> Arc<Shared> {
        let s = Shared {
            log_connections: AtomicBool::new(false),
            haproxy_format: AtomicBool::new(false),
            shutdown_grace_ms: AtomicU64::new(0),
            expiry_warning_s: AtomicU64::new(0),
        };
        s.apply(c);
        Arc::new(s)
    }

    /// Takes `log_connections`, `connection_log_format`, `shutdown_grace` and
    /// `certificate_expiry_warning` from `c`.
    pub(crate) fn apply(&self, c: &Config) {
        let grace = u64::try_from(c.shutdown_grace.as_millis()).unwrap_or(u64::MAX);
        self.log_connections
            .store(c.log_connections, Ordering::Relaxed);
        self.haproxy_format.store(
            c.connection_log_format == ConnectionLogFormat::Haproxy,
            Ordering::Relaxed,
        );
        self.shutdown_grace_ms.store(grace, Ordering::Relaxed);
        self.expiry_warning_s
            .store(c.certificate_expiry_warning.as_secs(), Ordering::Relaxed);
    }

    /// How long before a certificate's end the twice-daily check warns of it.
    pub(crate) fn expiry_warning(&self) -> Duration {
        Duration::from_secs(self.expiry_warning_s.load(Ordering::Relaxed))
    }

    pub(crate) fn shutdown_grace(&self) -> Duration {
        Duration::from_millis(self.shutdown_grace_ms.load(Ordering::Relaxed))
    }
}

/// One worker, as its connections see it.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) id: usize,
    shared: Arc<Shared>,
    /// Numbers the connections for the PROXY unique-ID TLV, without shared state.
    connections: Cell<u64>,
}

impl Worker {
    pub(crate) fn new(id: usize, shared: Arc<Shared>) -> Worker {
        Worker {
            id,
            shared,
            connections: Cell::new(0),
        }
    }

    /// Whether every connection gets its access-log line (`log_connections`).
    pub(crate) fn log_connections(&self) -> bool {
        self.shared.log_connections.load(Ordering::Relaxed)
    }

    pub(crate) fn log_format(&self) -> ConnectionLogFormat {
        if self.shared.haproxy_format.load(Ordering::Relaxed) {
            ConnectionLogFormat::Haproxy
        } else {
            ConnectionLogFormat::Fields
        }
    }

    /// The next number of this worker's connection sequence.
    pub(crate) fn next_connection(&self) -> u64 {
        let n = self.connections.get();
        self.connections.set(n + 1);
        n
    }
}

/// What one worker knows about one frontend.
pub(crate) struct WorkerFrontend {
    pub(crate) cfg: Arc<Frontend>,
    /// This worker's TLS configuration; replaced whole on reload.
    pub(crate) tls: TlsSlot,
    /// `None` means the built-in demo backend. Shared with the next `WorkerFrontend` while the
    /// frontend's backend section stays the same, so a reload that changes something else keeps the
    /// backends' health and connection counts.
    pub(crate) backends: Option<Rc<BackendPool>>,
    pub(crate) metrics: FrontendMetrics,
    /// One connect-time histogram per backend of the pool, in its order.
    pub(crate) backend_connect_times: Vec<prometheus_client::metrics::histogram::Histogram>,
    /// With ACME: what a TLS-ALPN-01 validator's handshake is served with.
    pub(crate) acme_challenge: Option<Arc<rustls::ServerConfig>>,
}

/// The backend pool `backends` asks for (`None`: the built-in demo page).
fn new_pool(backends: &Backends) -> Option<Rc<BackendPool>> {
    match &backends.target {
        Backend::Demo => None,
        Backend::Servers(addrs) => Some(Rc::new(BackendPool::new(
            addrs.clone(),
            backends.policy,
            backends.connect_timeout,
            backends.cooldown,
        ))),
    }
}

impl WorkerFrontend {
    /// The frontend as `cfg` says, keeping `previous`'s backend pool when its settings are
    /// the same.
    fn new(
        cfg: Arc<Frontend>,
        tls: TlsSlot,
        metrics: FrontendMetrics,
        previous: Option<&WorkerFrontend>,
    ) -> Self {
        let backends = match previous {
            Some(p) if p.cfg.backend == cfg.backend => p.backends.clone(),
            _ => new_pool(&cfg.backend),
        };
        let acme_challenge = match &cfg.certs.source {
            CertSource::Acme => challenge::server_config(tls::provider_for(&cfg))
                .inspect_err(|e| tracing::error!(frontend = %cfg.name, error = %e, "cannot answer ACME challenges"))
                .ok(),
            _ => None,
        };
        let backend_connect_times = match &cfg.backend.target {
            Backend::Demo => Vec::new(),
            Backend::Servers(addrs) => metrics
                .backend_connects()
                .for_backends(addrs.iter().map(|b| b.name.as_str())),
        };
        WorkerFrontend {
            cfg,
            tls,
            backends,
            metrics,
            backend_connect_times,
            acme_challenge,
        }
    }
}

/// A frontend's settings (backends, timeouts, PROXY settings, …): replaced whole on every
/// reload by the main thread, read by the workers when they accept.
pub(crate) type SettingsSlot = Arc<ArcSwap<Frontend>>;

/// One worker's view of one frontend across reloads: a new connection gets the settings in force
/// when it is accepted, and keeps them to its end (a reload never changes a connection midway).
pub(crate) struct FrontendSlot {
    settings: SettingsSlot,
    current: RefCell<Rc<WorkerFrontend>>,
}

impl FrontendSlot {
    pub(crate) fn new(
        settings: SettingsSlot,
        tls: TlsSlot,
        metrics: &Metrics,
        worker: usize,
    ) -> Self {
        let cfg = settings.load_full();
        let handles = metrics.for_frontend(&cfg.name, worker);
        FrontendSlot {
            current: RefCell::new(Rc::new(WorkerFrontend::new(cfg, tls, handles, None))),
            settings,
        }
    }

    /// The frontend as a connection accepted now sees it: rebuilt when a reload stored new
    /// settings, around the same backend pool unless the pool's own settings changed.
    pub(crate) fn current(&self) -> Rc<WorkerFrontend> {
        let want = self.settings.load();
        let now = self.current.borrow().clone();
        if Arc::ptr_eq(&now.cfg, &want) {
            return now;
        }
        let next = Rc::new(WorkerFrontend::new(
            Arc::clone(&want),
            now.tls.clone(),
            now.metrics.clone(),
            Some(&now),
        ));
        *self.current.borrow_mut() = next.clone();
        next
    }

    pub(crate) fn name(&self) -> String {
        self.current.borrow().cfg.name.clone()
    }
}
