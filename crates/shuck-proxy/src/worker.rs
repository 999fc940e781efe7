//! What a worker holds while it runs: its own identity and, per frontend, its own TLS
//! configuration slot, backend state and metric handles. A worker is one thread, so none of this
//! is shared with another worker (certificates and ticket keys are read-only or lock-free).

use std::cell::Cell;
use std::sync::Arc;

use crate::acme::challenge;
use crate::backend::BackendPool;
use crate::config::{Backend, CertSource, Frontend};
use crate::metrics::{FrontendMetrics, Metrics};
use crate::tls::{self, TlsSlot};

/// One worker, as its connections see it.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) id: usize,
    pub(crate) log_connections: bool,
    /// Numbers the connections for the PROXY unique-ID TLV, without shared state.
    connections: Cell<u64>,
}

impl Worker {
    pub(crate) fn new(id: usize, log_connections: bool) -> Worker {
        Worker {
            id,
            log_connections,
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
    pub(crate) fn new(cfg: Arc<Frontend>, tls: TlsSlot, metrics: &Metrics, worker: usize) -> Self {
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
            metrics: metrics.for_frontend(&cfg.name, worker),
            cfg,
            tls,
            backends,
            acme_challenge,
        }
    }
}
