//! What the status page shows, read from the metric handles themselves as typed values: the
//! handles the workers count with are indexed here when they are made (at start and reload,
//! never per connection), and a [`Snapshot`] sums them. The page thus shows the same atomics a
//! `/metrics` scrape encodes, without reading the exposition text back.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use std::sync::atomic::AtomicU64;

use super::certificates::CertRecord;
use super::FrontendMetrics;
use crate::conn::conn_error::{CountedIn, Reason};

/// A backend's connect times: the histogram `/metrics` exports, and its count and sum kept
/// beside it where the status page can read them (prometheus-client keeps a histogram's own
/// private).
#[derive(Debug, Clone)]
pub(crate) struct ConnectTime {
    histogram: Histogram,
    count: Counter,
    seconds: Counter<f64, AtomicU64>,
}

impl ConnectTime {
    pub(super) fn new(histogram: Histogram) -> ConnectTime {
        ConnectTime {
            histogram,
            count: Counter::default(),
            seconds: Counter::default(),
        }
    }

    /// Records one connect that took `secs`.
    pub(crate) fn observe(&self, secs: f64) {
        self.histogram.observe(secs);
        self.count.inc();
        self.seconds.inc_by(secs);
    }
}

/// `(frontend, route, backend)`.
type BackendKey = (String, String, String);

/// The connect times made so far, per backend and worker.
#[derive(Debug, Clone, Default)]
pub(super) struct Connects {
    made: Arc<Mutex<BTreeMap<(BackendKey, usize), ConnectTime>>>,
    /// The workers that dropped a backend some other worker still has: its series stay
    /// exported until the last one drops it, so a sum over the workers never falls (Prometheus
    /// would take the fall for a counter reset).
    leaving: Arc<Mutex<BTreeMap<BackendKey, Vec<usize>>>>,
}

impl Connects {
    /// The connect time of one backend of one worker: the one made before, or `make()`'s.
    pub(super) fn get(
        &self,
        key: BackendKey,
        worker: usize,
        make: impl FnOnce() -> ConnectTime,
    ) -> ConnectTime {
        if let Some(w) = locked(&self.leaving).get_mut(&key) {
            w.retain(|&x| x != worker);
        }
        locked(&self.made)
            .entry((key, worker))
            .or_insert_with(make)
            .clone()
    }

    /// `worker` dropped the backend `key`; the workers whose series of it may go now: all
    /// that had it once the last one drops it, none before.
    pub(super) fn forget(&self, key: &BackendKey, worker: usize) -> Vec<usize> {
        let mut made = locked(&self.made);
        made.remove(&(key.clone(), worker));
        let mut leaving = locked(&self.leaving);
        let gone = leaving.entry(key.clone()).or_default();
        if !gone.contains(&worker) {
            gone.push(worker);
        }
        let still_held = made
            .range((key.clone(), 0)..=(key.clone(), usize::MAX))
            .next()
            .is_some();
        if still_held {
            Vec::new()
        } else {
            leaving.remove(key).unwrap_or_default()
        }
    }
}

/// The handles made so far, by what they count.
#[derive(Debug, Default)]
pub(super) struct Index {
    /// Per `(frontend, worker)`: the one set of handles that worker counts with.
    frontends: Mutex<BTreeMap<(String, usize), FrontendMetrics>>,
    /// Per backend and worker (shared with the workers' [`super::BackendConnects`]).
    connects: Connects,
    /// The checked backends' verdicts.
    up: Mutex<BTreeMap<BackendKey, Gauge>>,
    /// What an operator set, by backend as named (a host name stands for its addresses).
    admin: Mutex<BTreeMap<BackendKey, Gauge>>,
    listeners: Mutex<Vec<(String, SocketAddr)>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Index {
    pub(super) fn frontend(&self, name: &str, worker: usize, handles: &FrontendMetrics) {
        locked(&self.frontends).insert((name.to_string(), worker), handles.clone());
    }

    pub(super) fn connects(&self) -> Connects {
        self.connects.clone()
    }

    pub(super) fn up(&self, key: BackendKey, gauge: &Gauge) {
        locked(&self.up).insert(key, gauge.clone());
    }

    pub(super) fn admin(&self, key: BackendKey, gauge: &Gauge) {
        locked(&self.admin).insert(key, gauge.clone());
    }

    pub(super) fn forget_admin(&self, key: &BackendKey) {
        locked(&self.admin).remove(key);
    }

    pub(super) fn forget_up(&self, key: &BackendKey) {
        locked(&self.up).remove(key);
    }

    pub(super) fn listeners(&self, addrs: &[(String, SocketAddr)]) {
        *locked(&self.listeners) = addrs.to_vec();
    }

    /// Every frontend's numbers now, with what the process and the certificates say.
    pub(super) fn snapshot(
        &self,
        process: Process,
        certificates: BTreeMap<String, Vec<CertRecord>>,
        at: f64,
    ) -> Snapshot {
        let mut frontends: BTreeMap<String, Frontend> = BTreeMap::new();
        for ((name, _), h) in locked(&self.frontends).iter() {
            frontends.entry(name.clone()).or_default().add(h);
        }
        for (((fe, route, backend), _), t) in locked(&self.connects.made).iter() {
            let b = backend_of(&mut frontends, fe, route, backend);
            b.connects += t.count.get();
            b.seconds += t.seconds.get();
        }
        for ((fe, route, backend), g) in locked(&self.up).iter() {
            backend_of(&mut frontends, fe, route, backend).up = Some(g.get() > 0);
        }
        for ((fe, route, named), g) in locked(&self.admin).iter() {
            let Some(f) = frontends.get_mut(fe) else {
                continue;
            };
            // A host name's setting applies to each of its addresses (`name@address`).
            for ((r, b), backend) in &mut f.backends {
                let is = crate::backend::dns::stands_for(named, b);
                if r == route && is && (backend.admin == 0 || b == named) {
                    backend.admin = g.get();
                }
            }
        }
        for (fe, addr) in locked(&self.listeners).iter() {
            if let Some(f) = frontends.get_mut(fe) {
                f.listeners.push(*addr);
            }
        }
        for (fe, records) in certificates {
            if let Some(f) = frontends.get_mut(&fe) {
                f.certificates = records;
            }
        }
        Snapshot {
            at,
            process,
            frontends,
        }
    }
}

fn backend_of<'a>(
    frontends: &'a mut BTreeMap<String, Frontend>,
    fe: &str,
    route: &str,
    backend: &str,
) -> &'a mut Backend {
    frontends
        .entry(fe.to_string())
        .or_default()
        .backends
        .entry((route.to_string(), backend.to_string()))
        .or_default()
}

/// The process as the page heads it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Process {
    pub version: &'static str,
    pub commit: String,
    /// Unix seconds.
    pub started: Option<f64>,
    pub resident_bytes: Option<i64>,
    pub open_fds: Option<i64>,
    pub max_fds: Option<i64>,
}

/// What the page shows, at one time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// Unix seconds.
    pub at: f64,
    pub process: Process,
    pub frontends: BTreeMap<String, Frontend>,
}

/// One frontend, summed over its workers.
#[derive(Debug, Clone, Default)]
pub(crate) struct Frontend {
    pub accepted: u64,
    pub active: i64,
    /// `[full, resumed][TLS 1.2, TLS 1.3]`.
    pub handshakes: [[u64; 2]; 2],
    /// Connections ended early, by the family and label they are counted under.
    pub failures: BTreeMap<(Family, &'static str), u64>,
    pub listeners: Vec<SocketAddr>,
    /// By `(route, backend)`.
    pub backends: BTreeMap<(String, String), Backend>,
    pub certificates: Vec<CertRecord>,
}

/// The families connections that ended early are counted in, in the page's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Family {
    Handshake,
    Backend,
    ProxyHeader,
    Resources,
    Client,
    Idle,
    Refused,
}

impl Family {
    fn of(c: CountedIn) -> Family {
        match c {
            CountedIn::HandshakeFailures => Family::Handshake,
            CountedIn::BackendErrors => Family::Backend,
            CountedIn::ProxyHeaderErrors => Family::ProxyHeader,
            CountedIn::ResourceErrors => Family::Resources,
            CountedIn::ClientErrors => Family::Client,
            CountedIn::IdleTimeouts => Family::Idle,
            CountedIn::Refusals => Family::Refused,
        }
    }
}

/// One backend of one route.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Backend {
    pub connects: u64,
    pub seconds: f64,
    /// The active checks' verdict; `None` when not checked.
    pub up: Option<bool>,
    /// What an operator set: 0 enabled, 1 drain, 2 disabled.
    pub admin: i64,
}

impl Frontend {
    fn add(&mut self, h: &FrontendMetrics) {
        self.accepted += h.accepted.get();
        self.active += h.active.get();
        for (kind, row) in h.handshakes.iter().enumerate() {
            for (version, c) in row.iter().enumerate() {
                self.handshakes[kind][version] += c.get();
            }
        }
        // Several reasons may share one counter (one label): each counter is read once.
        let mut ends = BTreeMap::new();
        for (reason, counter) in Reason::ALL.iter().zip(&h.ends) {
            if let (Some((family, label)), Some(c)) = (reason.metric(), counter) {
                ends.insert((Family::of(family), label), c.get());
            }
        }
        for (key, n) in ends {
            *self.failures.entry(key).or_default() += n;
        }
    }

    /// Handshake failures of every reason.
    pub(crate) fn handshake_failures(&self) -> u64 {
        self.failures
            .iter()
            .filter(|((f, _), _)| *f == Family::Handshake)
            .map(|(_, n)| n)
            .sum()
    }
}
