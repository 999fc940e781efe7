//! What a worker holds while it runs: its own identity and, per frontend, its own TLS
//! configuration slot, backend state and metric handles. A worker is one thread, so none of this
//! is shared with another worker (certificates and ticket keys are read-only or lock-free).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::acme::challenge;
use crate::backend::BackendPool;
use crate::config::{Backend, CertSource, ConnectionLogFormat, Frontend};
use crate::metrics::{FrontendMetrics, Metrics};
use crate::tls::{self, TlsSlot};

/// One worker, as its connections see it.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) id: usize,
    pub(crate) log_connections: bool,
    pub(crate) log_format: ConnectionLogFormat,
    /// Numbers the connections for the PROXY unique-ID TLV, without shared state.
    connections: Cell<u64>,
}

impl Worker {
    pub(crate) fn new(id: usize, log_connections: bool, log_format: ConnectionLogFormat) -> Worker {
        Worker {
            id,
            log_connections,
            log_format,
            connections: Cell::new(0),
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
pub(crate) struct FrontendRt {
    pub(crate) cfg: Arc<Frontend>,
    /// This worker's TLS configuration; replaced whole on reload.
    pub(crate) tls: TlsSlot,
    /// `None` means the built-in demo backend.
    pub(crate) backends: Option<BackendPool>,
    pub(crate) metrics: FrontendMetrics,
    /// With ACME: what a TLS-ALPN-01 validator's handshake is served with.
    pub(crate) acme_challenge: Option<Arc<rustls::ServerConfig>>,
}

impl FrontendRt {
    fn new(cfg: Arc<Frontend>, tls: TlsSlot, metrics: FrontendMetrics) -> Self {
        let backends = match &cfg.backend {
            Backend::Demo => None,
            Backend::Tcp(addrs) => Some(BackendPool::new(
                addrs.clone(),
                cfg.backend_policy,
                cfg.connect_timeout,
                cfg.backend_cooldown,
            )),
        };
        let acme_challenge = match &cfg.certs {
            CertSource::Acme(_) => challenge::server_config(tls::provider_for(&cfg))
                .inspect_err(|e| tracing::error!(frontend = %cfg.name, error = %e, "cannot answer ACME challenges"))
                .ok(),
            _ => None,
        };
        FrontendRt {
            cfg,
            tls,
            backends,
            metrics,
            acme_challenge,
        }
    }
}

/// A frontend's settings outside TLS (backends, timeouts, PROXY settings, …): replaced whole on
/// reload by the main thread, read by the workers when they accept.
pub(crate) type SettingsSlot = Arc<ArcSwap<Frontend>>;

/// One worker's view of one frontend across reloads: a new connection gets the settings in force
/// when it is accepted, and keeps them to its end (a reload never changes a connection midway).
pub(crate) struct FrontendSlot {
    settings: SettingsSlot,
    current: RefCell<Rc<FrontendRt>>,
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
            current: RefCell::new(Rc::new(FrontendRt::new(cfg, tls, handles))),
            settings,
        }
    }

    /// The frontend as a connection accepted now sees it: rebuilt (a new backend pool, its
    /// health and counts starting afresh) only when a reload stored new settings.
    pub(crate) fn current(&self) -> Rc<FrontendRt> {
        let want = self.settings.load();
        let now = self.current.borrow().clone();
        if Arc::ptr_eq(&now.cfg, &want) {
            return now;
        }
        let next = Rc::new(FrontendRt::new(
            Arc::clone(&want),
            now.tls.clone(),
            now.metrics.clone(),
        ));
        *self.current.borrow_mut() = next.clone();
        next
    }

    pub(crate) fn name(&self) -> String {
        self.current.borrow().cfg.name.clone()
    }
}
