//! A worker: one thread that accepts (`accept`) and runs each connection's pipeline
//! (`connection`), and what it holds while it runs (here): its own identity and, per frontend,
//! its own TLS configuration slot, backend state and metric handles. A worker is one thread, so
//! none of this is shared with another worker (certificates and ticket keys are read-only or
//! lock-free).

pub(crate) mod accept;
mod access_log;
mod admission;
mod clients;
pub(crate) mod connection;
mod engine;
pub(crate) mod listing;
mod on_demand;
mod tcplog;
mod templated;

pub(crate) use engine::Engine;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use crate::backend::admin::AdminState;
use crate::backend::BackendPool;
use crate::config::{Backend, BackendAddr, Backends, CertSource, ConnectionLogFormat, Frontend};
use crate::conn::idle::{Freed, IdleSet};
use crate::metrics::{FrontendMetrics, Metrics};
use crate::tls::{self, TlsSlot};

/// One worker, as its connections see it.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) id: usize,
    engine: Arc<Engine>,
    /// Numbers the connections for the PROXY unique-ID TLV, without shared state.
    connections: Cell<u64>,
    /// Its time in handshakes, and the share of new full handshakes it lets in.
    pub(crate) load: crate::sys::load::HandshakeLoad,
    /// Whether its last accept came near `max_connections` (said once per change).
    pressured: Cell<bool>,
    /// Its relayed connections, which it may close near `max_connections`.
    pub(crate) idle: IdleSet<listing::ConnInfo>,
    /// Connections closed to free slots since the last line said so, and when that was.
    freed: Cell<(usize, Option<Instant>)>,
    /// `max_connections`, shared by all workers: its count is the process's open connections.
    limit: Arc<crate::sys::limits::ConnectionLimit>,
}

impl Worker {
    pub(crate) fn new(
        id: usize,
        engine: Arc<Engine>,
        limit: Arc<crate::sys::limits::ConnectionLimit>,
    ) -> Worker {
        Worker {
            id,
            engine,
            connections: Cell::new(0),
            load: crate::sys::load::HandshakeLoad::new(id),
            pressured: Cell::new(false),
            idle: IdleSet::default(),
            freed: Cell::new((0, None)),
            limit,
        }
    }

    /// What the workers share with the server and its tasks.
    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Whether every connection gets its access-log line (`log_connections`).
    pub(crate) fn log_connections(&self) -> bool {
        self.engine.log_connections()
    }

    /// How access-log lines are written now (`connection_log_format`).
    pub(crate) fn log_format(&self) -> Arc<ConnectionLogFormat> {
        self.engine.log_format()
    }

    /// Whether the process, with `active` of `max` connections taken, is near the limit: from
    /// 90% taken until below 80% again (so a count hovering at 90% does not switch at every
    /// look); one line each way. Looked at on each accept (connections accepted near the limit
    /// get shorter timeouts: `Timeouts::under_pressure`) and once a second (`free_slots`).
    pub(crate) fn near_the_limit(&self, active: usize, max: usize) -> bool {
        let was = self.pressured.get();
        let now = if was {
            active.saturating_mul(10) >= max.saturating_mul(8)
        } else {
            active.saturating_mul(10) >= max.saturating_mul(9)
        };
        if was != now {
            self.pressured.set(now);
            if now {
                tracing::warn!(worker = self.id, handshake_timeout = ?crate::config::PRESSURED_HANDSHAKE, idle_timeout = ?crate::config::PRESSURED_IDLE, "90% of max_connections taken: new connections get shorter timeouts, idle ones may be closed");
            } else {
                tracing::info!(worker = self.id, "below 80% of max_connections again: new connections get the configured timeouts");
            }
        }
        now
    }

    /// Near the limit, closes this worker's share of the idle connections whose close brings
    /// the process below 80% of `max` (where the pressure ends): relayed connections idle for
    /// `EVICTABLE_AFTER` or more, the heaviest sources' oldest first. Called once a second.
    pub(crate) fn free_slots(&self, active: usize, max: usize) {
        if !self.near_the_limit(active, max) {
            return;
        }
        let below = max.saturating_mul(8).div_ceil(10).saturating_sub(1);
        let excess = active.saturating_sub(below);
        let mine = self.idle.len();
        if excess == 0 || mine == 0 {
            return;
        }
        // Each worker its share, as SO_REUSEPORT spread the connections.
        let share = excess.saturating_mul(mine).div_ceil(active).min(mine);
        let freed = self.idle.free(share, crate::config::EVICTABLE_AFTER);
        self.said_freed(freed);
    }

    /// One line for the first connections freed, then at most one a minute with the count.
    fn said_freed(&self, freed: Freed) {
        let (count, said_at) = self.freed.get();
        let count = count + freed.closed;
        let now = Instant::now();
        let due = said_at.is_none_or(|t| now.duration_since(t) >= FREED_LINE_EVERY);
        match freed.heaviest {
            Some((source, held)) if freed.closed > 0 && due => {
                tracing::warn!(worker = self.id, closed = count, heaviest_source = %source, held, "near max_connections: closed idle connections, the heaviest sources' first");
                self.freed.set((0, Some(now)));
            }
            _ => self.freed.set((count, said_at)),
        }
    }

    /// The process's open connections now.
    pub(crate) fn open_connections(&self) -> usize {
        self.limit.active()
    }

    /// The next number of this worker's connection sequence.
    pub(crate) fn next_connection(&self) -> u64 {
        let n = self.connections.get();
        self.connections.set(n + 1);
        n
    }
}

/// How often a line says how many idle connections were closed near the limit.
const FREED_LINE_EVERY: Duration = Duration::from_secs(60);

/// What one worker knows about one frontend.
pub(crate) struct WorkerFrontend {
    pub(crate) cfg: Arc<Frontend>,
    /// This worker's TLS configuration; replaced whole on reload.
    pub(crate) tls: TlsSlot,
    /// The frontend's own backends; `None`: none (the built-in demo page, or with routes, no
    /// default). Shared with the next `WorkerFrontend` while the frontend's backend section stays
    /// the same, so a reload that changes something else keeps the backends' health and
    /// connection counts.
    pub(crate) backends: Option<WorkerPool>,
    /// Each route's backends, in the order of `cfg.routes`, kept across reloads the same way.
    pub(crate) routes: Vec<WorkerPool>,
    pub(crate) metrics: FrontendMetrics,
    /// With ACME: what a TLS-ALPN-01 validator's handshake is served with.
    pub(crate) acme_challenge: Option<Arc<rustls::ServerConfig>>,
    /// With ACME shared by a fleet: where another host's challenge is found.
    pub(crate) acme_store: Option<Arc<crate::store::fleet::FleetStore>>,
    /// Validators' handshakes that found every store lookup slot taken (and were answered
    /// without the store): counted only where `acme_store` is set.
    pub(crate) challenge_lookups_busy: prometheus_client::metrics::counter::Counter,
    /// The frontend's admission counts, shared with its other workers.
    pub(crate) gate: admission::Gate,
}

/// One set of backends as a worker uses it: the pool, and a connect-time histogram per backend
/// in its order.
#[derive(Clone)]
pub(crate) struct WorkerPool {
    pub(crate) pool: Rc<BackendPool>,
    pub(crate) connect_times: Vec<crate::metrics::ConnectTime>,
    /// Each backend's error counters, in the same order.
    pub(crate) errors: Vec<crate::metrics::BackendErrorCounts>,
    /// With `backend_tls`: whether TLS to each works, in the same order (else empty).
    pub(crate) tls_states: Vec<Arc<crate::backend::tls_state::TlsState>>,
    /// What the pool was built from: the backends, host names standing for their addresses,
    /// with the operator's weights.
    members: Rc<[BackendAddr]>,
    /// The members an operator drained or disabled, a bit each.
    out: u128,
}

/// The pool `backends` asks for (`None`: no backend), or `previous` when it was built from the
/// same settings and DNS still gives its host names the same addresses.
fn pool_for(
    engine: &Engine,
    (frontend, route): (&str, &str),
    backends: &Backends,
    previous: Option<(&Backends, &WorkerPool)>,
    metrics: &FrontendMetrics,
) -> Option<WorkerPool> {
    let Backend::Servers(addrs) = &backends.target else {
        return None;
    };
    let mut members = engine.dns.members(addrs);
    let health = engine.health.shared(frontend, route, backends, &members);
    let applied = engine.backend_states.applied(frontend, route, &members);
    let mut out = 0u128;
    for (i, (m, a)) in members.iter_mut().zip(&applied).enumerate() {
        m.weight = a.weight;
        if a.state != AdminState::Enabled {
            out |= 1 << i;
        }
    }
    // Kept only while its verdicts are the ones its checker writes.
    let same_health = |p: &WorkerPool| match (p.pool.health(), &health) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        _ => false,
    };
    if let Some((_, pool)) = previous
        .filter(|(s, p)| *s == backends && *p.members == *members && p.out == out && same_health(p))
    {
        return Some(pool.clone());
    }
    Some(WorkerPool {
        pool: Rc::new(
            BackendPool::checked(
                members.clone(),
                backends.policy,
                backends.connect_timeout,
                backends.cooldown,
                health,
            )
            .without(out),
        ),
        connect_times: metrics
            .backend_connects()
            .for_backends(route, members.iter().map(|b| b.name.as_str())),
        errors: metrics
            .backend_connects()
            .errors_for(route, members.iter().map(|b| b.name.as_str())),
        tls_states: match backends.tls {
            Some(_) => engine.backend_tls_states.of(
                frontend,
                route,
                members.iter().map(|b| b.name.as_str()),
            ),
            // Forgets the route's flags: TLS added again starts from working.
            None => engine
                .backend_tls_states
                .of(frontend, route, std::iter::empty()),
        },
        members: members.into(),
        out,
    })
}

impl WorkerPool {
    /// The error counters of the member named `name` (a pool has at most 128).
    pub(crate) fn errors_of(&self, name: &str) -> Option<&crate::metrics::BackendErrorCounts> {
        let i = self.members.iter().position(|m| m.name == name)?;
        self.errors.get(i)
    }
}

impl WorkerFrontend {
    /// The frontend as `cfg` says, keeping `previous`'s backend pool when its settings are
    /// the same.
    fn new(
        engine: &Engine,
        cfg: Arc<Frontend>,
        tls: TlsSlot,
        metrics: FrontendMetrics,
        previous: Option<&WorkerFrontend>,
    ) -> Self {
        let backends = pool_for(
            engine,
            (&cfg.name, "default"),
            &cfg.backend,
            previous.and_then(|p| Some((&p.cfg.backend, p.backends.as_ref()?))),
            &metrics,
        );
        let routes = cfg
            .route
            .0
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                // Kept only for the same route (its name labels the connect histograms).
                let before = previous.and_then(|p| {
                    let was = p.cfg.route.0.get(i).filter(|w| w.name == r.name)?;
                    Some((&was.backend, p.routes.get(i)?))
                });
                pool_for(engine, (&cfg.name, &r.name), &r.backend, before, &metrics)
            })
            .collect();
        let acme_challenge = match (&cfg.certificates.source, cfg.acme()) {
            (CertSource::Acme, Some(acme)) => engine
                .challenges
                .server_config(
                    tls::provider_for(&cfg),
                    // On demand, the names being ordered are any the endpoint allows.
                    acme.on_demand.is_none().then(|| acme.names.clone()),
                )
                .inspect_err(|e| tracing::error!(frontend = %cfg.name, error = %e, "cannot answer ACME challenges"))
                .ok(),
            _ => None,
        };
        // Opened at start (`server::acme_jobs`): found here, not opened again.
        let acme_store = cfg
            .fleet_store()
            .and_then(|s| engine.fleet_stores.shared(&s.url, &s.key).ok());
        let challenge_lookups_busy = if acme_store.is_some() {
            metrics.challenge_lookups_busy()
        } else {
            prometheus_client::metrics::counter::Counter::default()
        };
        let gate = engine.gates.gate(&cfg);
        WorkerFrontend {
            cfg,
            tls,
            backends,
            routes,
            metrics,
            acme_challenge,
            acme_store,
            challenge_lookups_busy,
            gate,
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
    /// The DNS answers `current` was built with (`dns::Directory::generation`).
    dns_seen: Cell<u64>,
    engine: Arc<Engine>,
}

/// The `(route, member)` pairs of a frontend's pools.
fn members_of(wf: &WorkerFrontend) -> std::collections::BTreeSet<(&str, &str)> {
    let default = wf.backends.iter().map(|p| ("default", p));
    let routes = wf
        .cfg
        .route
        .0
        .iter()
        .map(|r| r.name.as_str())
        .zip(&wf.routes);
    default
        .chain(routes)
        .flat_map(|(route, p)| p.members.iter().map(move |m| (route, m.name.as_str())))
        .collect()
}

/// Drops this worker's connect-time series of the members `now` had and `next` has not (a name
/// whose address changed, a backend a reload removed): the series of every address a name ever
/// had would otherwise grow without bound. A connection under way to such a member has
/// connected already; its time was counted.
fn forget_members_gone(now: &WorkerFrontend, next: &WorkerFrontend) {
    if now.cfg.name != next.cfg.name {
        return;
    }
    let kept = members_of(next);
    for (route, member) in members_of(now).difference(&kept) {
        now.metrics.backend_connects().forget(route, member);
    }
}

impl FrontendSlot {
    pub(crate) fn new(
        engine: Arc<Engine>,
        settings: SettingsSlot,
        tls: TlsSlot,
        metrics: &Metrics,
        worker: usize,
    ) -> Self {
        let cfg = settings.load_full();
        let handles = metrics.for_frontend(&cfg.name, worker);
        let dns_seen = Cell::new(engine.dns.generation());
        let first = WorkerFrontend::new(&engine, cfg, tls, handles, None);
        FrontendSlot {
            current: RefCell::new(Rc::new(first)),
            settings,
            dns_seen,
            engine,
        }
    }

    /// The frontend as a connection accepted now sees it: rebuilt when a reload stored new
    /// settings or DNS changed an answer, around the same backend pools unless a pool's own
    /// settings or members changed. Connections under way keep what they had.
    pub(crate) fn current(&self) -> Rc<WorkerFrontend> {
        let want = self.settings.load();
        let now = self.current.borrow().clone();
        // Read before the answers are: a change while this rebuilds shows at the next accept.
        let dns = self.engine.dns.generation();
        if Arc::ptr_eq(&now.cfg, &want) && self.dns_seen.get() == dns {
            return now;
        }
        self.dns_seen.set(dns);
        let next = Rc::new(WorkerFrontend::new(
            &self.engine,
            Arc::clone(&want),
            now.tls.clone(),
            now.metrics.clone(),
            Some(&now),
        ));
        forget_members_gone(&now, &next);
        *self.current.borrow_mut() = next.clone();
        next
    }

    pub(crate) fn name(&self) -> String {
        self.current.borrow().cfg.name.clone()
    }
}
