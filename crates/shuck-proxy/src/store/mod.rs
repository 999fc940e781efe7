//! The store shared by the hosts of a fleet: Redis, Sentinel or Cluster (`session_store`,
//! `acme_store`), reached from each worker over its own multiplexed connection, and `fleet`, the
//! process's handle for the fleet's ACME state. This folder knows Redis, sealing (`sealing`,
//! `seal`) and failure handling, not TLS: it fetches and stores opaque values under keys it is
//! given (`sessions::remote` decides which, from the ClientHello; `certs::acme::fleet` for
//! certificates).
//!
//! Never a stalled handshake: a fetch waits at most `session_store_timeout`; writes leave
//! through a bounded queue per worker (dropped and counted when full); repeated failures open a
//! breaker that skips the store for a few seconds. Values are sealed (AES-256-GCM, the key
//! derived from `session_store_key`, the Redis key as associated data) and expire with the
//! session lifetime.

mod breaker;
mod cluster;
mod endpoint;
pub(crate) mod fleet;
mod link;
mod replies;
mod seal;
pub(crate) mod sealing;
mod transport;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use endpoint::Endpoint;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use tokio::sync::mpsc;

use crate::error::{Error, Result};
pub(crate) use breaker::Breaker;
use link::{Conn, Link, Unavailable};
use seal::Sealer;

/// Writes waiting per worker; beyond it new sessions are not stored (and counted).
const QUEUE: usize = 1024;

type Labels = Vec<(&'static str, String)>;
/// Histograms per worker, made with the store's buckets.
pub(crate) type LatencyFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// What the store counts, per frontend (the breaker gauge per worker).
#[derive(Debug, Clone)]
pub(crate) struct StoreCounters {
    pub hits: Counter,
    pub misses: Counter,
    pub timeouts: Counter,
    pub errors: Counter,
    /// Values that did not unseal (wrong key, tampered, another frontend's).
    pub garbage: Counter,
    /// Replies over the bound (`replies::MAX_REPLY`): the connection was ended.
    pub oversized: Counter,
    /// Lookups not made because the breaker was open.
    pub skipped: Counter,
    pub writes: Counter,
    pub writes_dropped: Counter,
    pub write_errors: Counter,
    /// Per worker (a histogram takes a lock to record: never one shared by the workers).
    pub latency: LatencyFamily,
    /// Per worker: 1 while its breaker is open.
    pub breaker_open: Family<Labels, Gauge>,
}

impl Default for StoreCounters {
    fn default() -> Self {
        StoreCounters {
            hits: Counter::default(),
            misses: Counter::default(),
            timeouts: Counter::default(),
            errors: Counter::default(),
            garbage: Counter::default(),
            oversized: Counter::default(),
            skipped: Counter::default(),
            writes: Counter::default(),
            writes_dropped: Counter::default(),
            write_errors: Counter::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            breaker_open: Family::default(),
        }
    }
}

/// Store round trips from 50 µs to about 100 ms.
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.000_05, 2.0, 12,
    ))
}

/// Where the store is and how it is used (from the frontend's `session_store` settings).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// What the redis crate connects to.
    pub url: String,
    /// The URL as logs show it (no password).
    pub shown: String,
    pub timeout: Duration,
    /// The file whose secret seals stored sessions...
    pub key: std::path::PathBuf,
    /// ...and a digest of its contents when read, so a reload notices a new key at the same path.
    pub key_digest: [u8; 32],
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("url", &self.shown)
            .field("timeout", &self.timeout)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// SHA-256 of the key file's contents (zeros if it does not read: opening the store then
    /// reports why).
    pub(crate) fn digest_key_file(path: &std::path::Path) -> [u8; 32] {
        let mut out = [0u8; 32];
        if let Ok(mut bytes) = crate::sys::files::read(path) {
            out.copy_from_slice(
                aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &bytes).as_ref(),
            );
            bytes.fill(0);
        }
        out
    }
}

/// One frontend's store, shared by its workers: the client, the sealing key, the settings.
/// Kept across reloads while the settings are unchanged, so connections stay open.
pub(crate) struct SharedStore {
    core: Arc<Core>,
    /// One per worker, made on first use (the main thread builds worker configurations).
    workers: Mutex<Vec<Option<Arc<WorkerStore>>>>,
}

/// What the workers' sides share. They hold this, not the `SharedStore`, so a store replaced
/// on reload is freed with its connections and writer tasks.
struct Core {
    frontend: String,
    settings: Target,
    endpoint: Endpoint,
    sealer: Sealer,
    counters: StoreCounters,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("settings", &self.core.settings)
            .finish_non_exhaustive()
    }
}

impl SharedStore {
    /// Reads the sealing key and checks the URL (no connection is made here).
    pub(crate) fn open(
        frontend: &str,
        settings: &Target,
        counters: StoreCounters,
    ) -> Result<Arc<SharedStore>> {
        let store_err = |message: String| Error::SessionStore {
            url: settings.shown.clone(),
            message,
        };
        let endpoint = Endpoint::parse_supported(&settings.url).map_err(store_err)?;
        let sealer = Sealer::from_file(&settings.key).map_err(store_err)?;
        Ok(Arc::new(SharedStore {
            core: Arc::new(Core {
                frontend: frontend.to_string(),
                settings: settings.clone(),
                endpoint,
                sealer,
                counters,
            }),
            workers: Mutex::new(Vec::new()),
        }))
    }

    pub(crate) fn target(&self) -> &Target {
        &self.core.settings
    }

    /// Worker `id`'s side of the store (its connection, queue and breaker).
    pub(crate) fn for_worker(&self, id: usize) -> Arc<WorkerStore> {
        let mut workers = self
            .workers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if workers.len() <= id {
            workers.resize(id + 1, None);
        }
        workers[id]
            .get_or_insert_with(|| {
                let core = &self.core;
                let labels = vec![
                    ("frontend", core.frontend.clone()),
                    ("worker", id.to_string()),
                ];
                let gauge = core.counters.breaker_open.get_or_create(&labels).clone();
                let latency = core.counters.latency.get_or_create(&labels).clone();
                Arc::new(WorkerStore::new(core.clone(), id, gauge, latency))
            })
            .clone()
    }
}

/// Where a key's commands go: the one link, or the cluster node that owns its slot.
#[derive(Clone)]
enum Router {
    One(Arc<Link>),
    Cluster(Arc<cluster::Cluster>),
}

impl Router {
    fn new(endpoint: &Endpoint) -> Router {
        match endpoint {
            Endpoint::Cluster { seeds, template } => {
                Router::Cluster(cluster::Cluster::new(seeds.clone(), template.clone()))
            }
            other => Router::One(Link::new(other.clone())),
        }
    }

    /// The link for `key`; `None` while a cluster's slot map is not known.
    fn link_for(&self, key: &[u8]) -> Option<Arc<Link>> {
        match self {
            Router::One(link) => Some(link.clone()),
            Router::Cluster(c) => c.link_for(key),
        }
    }

    fn warm_up(&self) {
        match self {
            Router::One(link) => link.warm_up(),
            // The first key's lookup asks for the slot map.
            Router::Cluster(_) => {}
        }
    }

    /// A reply said the key's slot is elsewhere (`MOVED`), or its node could not be reached (a
    /// master gone, its replica promoted): the map is asked again.
    fn moved(&self) {
        if let Router::Cluster(c) = self {
            c.refresh();
        }
    }
}

/// Whether `e` ends the connection it came on: it is broken, or (READONLY) it reaches a master
/// demoted by a failover, and the next connection asks Sentinel again.
fn is_broken(e: &redis::RedisError) -> bool {
    let demoted = e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly);
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() || demoted
}

/// Whether `e` says the slot is served elsewhere.
fn is_moved(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    // ASK is a slot in migration, still owned where it was: the map is right.
    e.kind() == ErrorKind::Server(ServerErrorKind::Moved)
}

enum Write {
    Set {
        key: Vec<u8>,
        value: Vec<u8>,
        ttl: Duration,
    },
    Delete {
        key: Vec<u8>,
    },
}

/// One worker's connection to the store. Used only on that worker's thread, except that
/// `put` is called from inside rustls (synchronously, on the same thread).
pub(crate) struct WorkerStore {
    shared: Arc<Core>,
    worker: usize,
    router: Router,
    queue: mpsc::Sender<Write>,
    /// Taken by the writer task when it starts.
    pending: Mutex<Option<mpsc::Receiver<Write>>>,
    breaker: Breaker,
    latency: Histogram,
}

/// How a lookup ended, for the caller's decision (a value, or a full handshake).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fetched {
    Found(Vec<u8>),
    Missing,
    /// Timed out, failed, garbage, or skipped by the open breaker.
    Unavailable,
}

impl WorkerStore {
    fn new(
        shared: Arc<Core>,
        worker: usize,
        breaker_gauge: Gauge,
        latency: Histogram,
    ) -> WorkerStore {
        let (tx, rx) = mpsc::channel(QUEUE);
        let breaker = Breaker::new(
            &shared.frontend,
            worker,
            &shared.settings.shown,
            breaker_gauge,
        );
        let router = Router::new(&shared.endpoint);
        WorkerStore {
            shared,
            worker,
            router,
            queue: tx,
            pending: Mutex::new(Some(rx)),
            breaker,
            latency,
        }
    }

    /// Makes sure the worker's connection exists or is being made, and its writer runs (the
    /// ClientHello stage calls it for every connection, so the first session of a worker finds
    /// it open). Needs the worker's runtime.
    pub(crate) fn warm_up(&self) {
        self.router.warm_up();
        let rx = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(rx) = rx {
            tokio::spawn(write_loop(rx, self.router.clone(), self.shared.clone()));
        }
    }

    /// Fetches (and with `take`, deletes: a TLS 1.3 stateful session resumes once) the value
    /// under `key`, within the store's timeout.
    pub(crate) async fn fetch(&self, key: &[u8], take: bool) -> Fetched {
        let c = &self.shared.counters;
        if !self.breaker.allows(Instant::now()) {
            c.skipped.inc();
            return Fetched::Unavailable;
        }
        self.warm_up();
        let started = tokio::time::Instant::now();
        let deadline = started + self.shared.settings.timeout;
        let url = self.shared.settings.shown.clone();
        let Some(link) = self.router.link_for(key) else {
            c.errors.inc();
            self.breaker
                .failed(self.worker, &url, "no cluster slot map yet");
            return Fetched::Unavailable;
        };
        let conn = match link.connected_by(deadline).await {
            Ok(conn) => conn,
            Err(Unavailable::Connecting) => {
                c.timeouts.inc();
                self.breaker
                    .failed(self.worker, &url, "timed out connecting");
                return Fetched::Unavailable;
            }
            Err(Unavailable::Failed(why)) => {
                c.errors.inc();
                self.breaker.failed(self.worker, &url, &why);
                self.router.moved();
                return Fetched::Unavailable;
            }
        };
        let mut cmd = redis::cmd(if take { "GETDEL" } else { "GET" });
        cmd.arg(key);
        let mut redis = conn.redis.clone();
        let reply =
            tokio::time::timeout_at(deadline, cmd.query_async::<Option<Vec<u8>>>(&mut redis)).await;
        self.latency.observe(started.elapsed().as_secs_f64());
        match reply {
            Err(_) => {
                c.timeouts.inc();
                // One slow reply is a busy store (the crate drops a reply nobody waits for);
                // failures enough to open the breaker make the connection suspect: a reply may
                // be stuck half-sent in front of the next ones.
                if self.breaker.failed(self.worker, &url, "timed out") {
                    link.close(&conn);
                }
                Fetched::Unavailable
            }
            Ok(Err(e)) => {
                self.failed_on(&link, &conn, &e);
                Fetched::Unavailable
            }
            Ok(Ok(None)) => {
                self.breaker.succeeded(self.worker, &url);
                c.misses.inc();
                Fetched::Missing
            }
            Ok(Ok(Some(sealed))) => {
                self.breaker.succeeded(self.worker, &url);
                if let Some(v) = self.shared.sealer.open(key, &sealed) {
                    c.hits.inc();
                    Fetched::Found(v)
                } else {
                    c.garbage.inc();
                    Fetched::Unavailable
                }
            }
        }
    }

    /// A lookup failed on `conn`: counted by cause; a reply over the bound or a broken
    /// connection ends it.
    fn failed_on(&self, link: &Link, conn: &Conn, e: &redis::RedisError) {
        let c = &self.shared.counters;
        let url = &self.shared.settings.shown;
        if conn.refused() {
            c.oversized.inc();
            link.close(conn);
            let why = format!("a reply over the {} KiB bound", replies::MAX_REPLY / 1024);
            self.breaker.failed(self.worker, url, &why);
            return;
        }
        c.errors.inc();
        if is_moved(e) {
            self.router.moved();
        }
        if self.breaker.failed(self.worker, url, &e.to_string()) || is_broken(e) {
            link.close(conn);
        }
    }

    /// Queues `value` under `key` for `ttl`; never waits (a full queue drops it, counted).
    pub(crate) fn store(&self, key: Vec<u8>, value: &[u8], ttl: Duration) {
        let Some(value) = self.shared.sealer.seal(&key, value) else {
            return;
        };
        self.send(Write::Set { key, value, ttl });
    }

    /// Queues the deletion of `key` (a single-use session taken from another cache).
    pub(crate) fn delete(&self, key: Vec<u8>) {
        self.send(Write::Delete { key });
    }

    /// Writes are not held back by an open breaker: a slow store should still learn new
    /// sessions (the other hosts look for them); a dead one fills the queue, and then drops.
    fn send(&self, w: Write) {
        self.warm_up();
        if self.queue.try_send(w).is_err() {
            self.shared.counters.writes_dropped.inc();
        }
    }
}

/// Writes sent in one pipeline at most.
const BATCH: usize = 64;

/// Sends queued writes on the worker's connection (with a cluster, on each node's): whatever is
/// waiting, up to `BATCH`, in one pipeline per connection (one round trip), bounded by a timeout
/// far longer than a lookup's (a write delays no handshake). A busy host's writes reach the
/// store sooner, and the queue seldom fills. Ends when its worker's store is dropped (a reload
/// replaced it).
async fn write_loop(mut rx: mpsc::Receiver<Write>, router: Router, shared: Arc<Core>) {
    let bound = shared.settings.timeout.max(Duration::from_millis(500));
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let mut groups: Vec<(Arc<Link>, redis::Pipeline)> = Vec::new();
        for w in batch.drain(..) {
            let key = match &w {
                Write::Set { key, .. } | Write::Delete { key } => key,
            };
            let Some(link) = router.link_for(key) else {
                shared.counters.write_errors.inc();
                continue;
            };
            let at = if let Some(at) = groups.iter().position(|(l, _)| Arc::ptr_eq(l, &link)) {
                at
            } else {
                groups.push((link, redis::pipe()));
                groups.len() - 1
            };
            add(&mut groups[at].1, w);
        }
        let deadline = tokio::time::Instant::now() + bound;
        for (link, pipe) in groups {
            send(&link, &pipe, deadline, &router, &shared).await;
        }
    }
}

/// One write as a command of `pipe`.
fn add(pipe: &mut redis::Pipeline, w: Write) {
    match w {
        Write::Set { key, value, ttl } => {
            let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
            pipe.cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(ms)
                .ignore();
        }
        Write::Delete { key } => {
            pipe.cmd("DEL").arg(key).ignore();
        }
    }
}

/// Sends one pipeline on `link`, counting its writes.
async fn send(
    link: &Arc<Link>,
    pipe: &redis::Pipeline,
    deadline: tokio::time::Instant,
    router: &Router,
    shared: &Core,
) {
    let n = pipe.len() as u64;
    let Ok(conn) = link.connected_by(deadline).await else {
        shared.counters.write_errors.inc_by(n);
        return;
    };
    let mut redis = conn.redis.clone();
    match tokio::time::timeout_at(deadline, pipe.query_async::<()>(&mut redis)).await {
        Ok(Ok(())) => {
            shared.counters.writes.inc_by(n);
        }
        Ok(Err(e)) => {
            shared.counters.write_errors.inc_by(n);
            if is_moved(&e) {
                router.moved();
            }
            if conn.refused() || e.is_io_error() || e.is_connection_dropped() {
                link.close(&conn);
            }
        }
        Err(_) => {
            shared.counters.write_errors.inc_by(n);
        }
    }
}
