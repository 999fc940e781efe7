//! A worker thread: one single-threaded tokio runtime, its own listening sockets, an accept loop
//! per socket that hands each connection to [`connection::handle`], and the drain at shutdown.
//! Nothing on the connection path is shared with other workers except read-only tables
//! (certificates), the ticket key and the `max_connections` count.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::{watch, Semaphore};

use crate::config::MAX_CONNECTIONS_LIMIT;
use crate::metrics::Metrics;
use crate::sys::limits::ConnectionLimit;
use crate::sys::listener::is_connection_error;
use crate::tls::TlsSlot;
use crate::worker::connection;
use crate::worker::listing::{ConnFilter, ConnectionView};
use crate::worker::{Engine, FrontendSlot, SettingsSlot, Worker};

/// What the main thread tells a worker.
pub(crate) enum Control {
    /// Accept on `socket` for the frontend whose slots these are; `key` names the address for a
    /// later `Close`.
    Listen {
        key: u64,
        settings: SettingsSlot,
        tls: TlsSlot,
        socket: std::net::TcpListener,
    },
    /// Stop accepting on the address `key` (its connections carry on).
    Close { key: u64 },
    /// The relayed connections `filter` picks (at most `limit` described), closed too with
    /// `close` (close_notify, or an abort when bytes wait for a peer that does not read).
    Connections {
        filter: ConnFilter,
        close: bool,
        limit: usize,
        reply: tokio::sync::oneshot::Sender<Listed>,
    },
}

/// One worker's answer to [`Control::Connections`].
#[derive(Debug, Default)]
pub(crate) struct Listed {
    /// The first `limit` of those picked.
    pub(crate) views: Vec<ConnectionView>,
    /// How many the filter picked.
    pub(crate) picked: usize,
    /// How many were told to close now.
    pub(crate) closed: usize,
}

/// Answers [`Control::Connections`] from `worker`'s registry: the `limit` oldest of those
/// `filter` picks are described.
fn list_connections(worker: &Worker, filter: &ConnFilter, close: bool, limit: usize) -> Listed {
    let mut listed = Listed::default();
    // The age the `limit`-th oldest has: those at least as old are described (no string is
    // made for the others).
    let mut ages = Vec::new();
    worker.idle.each(|c, seen| {
        if filter.picks(c) {
            ages.push(seen.age);
        }
    });
    listed.picked = ages.len();
    let oldest_shown = if limit == 0 {
        None
    } else if ages.len() > limit {
        let (_, nth, _) = ages.select_nth_unstable_by(limit - 1, |a, b| b.cmp(a));
        Some(*nth)
    } else {
        ages.iter().min().copied()
    };
    if let Some(threshold) = oldest_shown {
        worker.idle.each(|c, seen| {
            if listed.views.len() < limit && seen.age >= threshold && filter.picks(c) {
                listed.views.push(ConnectionView::of(worker.id, c, seen));
            }
        });
    }
    if close {
        listed.closed = worker.idle.close_where(|c| filter.picks(c));
    }
    listed
}

/// Everything a worker thread is handed at start.
pub(crate) struct WorkerSpec {
    pub id: usize,
    pub core: Option<core_affinity::CoreId>,
    /// Where the sockets to accept on come from, at start and on reload.
    pub control: UnboundedReceiver<Control>,
    /// `max_connections`, shared by all workers.
    pub limit: Arc<ConnectionLimit>,
    /// The access log's settings and `shutdown_grace`, as a reload leaves them.
    pub engine: Arc<Engine>,
    pub shutdown: watch::Receiver<bool>,
    pub metrics: Arc<Metrics>,
}

pub(crate) fn spawn(spec: WorkerSpec) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("shuck-worker-{}", spec.id))
        .spawn(move || {
            if let Some(core) = spec.core {
                if !core_affinity::set_for_current(core) {
                    tracing::warn!(worker = spec.id, core = core.id, "cannot pin worker to CPU");
                }
            }
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(worker = spec.id, error = %e, "cannot start worker runtime");
                    return;
                }
            };
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, run(spec));
        })
}

async fn stopped(rx: &mut watch::Receiver<bool>) {
    // An error means the server is gone: stop too.
    let _ = rx.wait_for(|v| *v).await;
}

async fn run(spec: WorkerSpec) {
    let worker = Rc::new(Worker::new(
        spec.id,
        spec.engine.clone(),
        spec.limit.clone(),
    ));
    tokio::task::spawn_local(free_slots_near_the_limit(
        worker.clone(),
        spec.limit.clone(),
        spec.shutdown.clone(),
    ));
    // This worker's own connections, counted for the drain at shutdown (never a limit: the
    // shared count stops accepting first). Sized by the highest `max_connections` there can be,
    // as a reload may raise it.
    let max = MAX_CONNECTIONS_LIMIT;
    let local = Arc::new(Semaphore::new(max));
    let mut listening = Listening {
        fronts: Vec::new(),
        loops: HashMap::new(),
    };
    let mut control = spec.control;
    let mut shutdown = spec.shutdown.clone();
    loop {
        let command = tokio::select! {
            () = stopped(&mut shutdown) => break,
            c = control.recv() => c,
        };
        match command {
            Some(Control::Listen {
                key,
                settings,
                tls,
                socket,
            }) => {
                let listener = match TcpListener::from_std(socket) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(worker = spec.id, error = %e, "cannot register listener");
                        continue;
                    }
                };
                let slot = listening.front(&spec.engine, settings, tls, &spec.metrics, spec.id);
                let task = tokio::task::spawn_local(accept_loop(
                    listener,
                    slot,
                    worker.clone(),
                    (spec.limit.clone(), local.clone()),
                    spec.shutdown.clone(),
                ));
                listening.loops.entry(key).or_default().push(task);
            }
            Some(Control::Close { key }) => {
                for task in listening.loops.remove(&key).unwrap_or_default() {
                    task.abort();
                }
                // Let the runtime drop the aborted loops (and their sockets) before the
                // frontends they served are looked at.
                tokio::task::yield_now().await;
            }
            Some(Control::Connections {
                filter,
                close,
                limit,
                reply,
            }) => {
                let _ = reply.send(list_connections(&worker, &filter, close, limit));
            }
            // The server is gone: nothing more will be asked; wait for the stop.
            None => {
                stopped(&mut shutdown).await;
                break;
            }
        }
        listening.forget_unused();
    }
    for task in listening.loops.into_values().flatten() {
        let _ = task.await;
    }
    // Drain: wait for connections in flight, up to the grace period.
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    let active = max - local.available_permits();
    if active > 0 {
        let grace = spec.engine.shutdown_grace();
        tracing::info!(worker = spec.id, active, grace = ?grace, "draining connections");
        if tokio::time::timeout(grace, local.acquire_many(all))
            .await
            .is_err()
        {
            let left = max - local.available_permits();
            tracing::warn!(
                worker = spec.id,
                left,
                "grace period over; closing remaining connections"
            );
        }
    }
}

/// A worker's accept loops (by address key) and the frontends they serve.
struct Listening {
    /// One per frontend (by its settings slot), shared by that frontend's accept loops.
    fronts: Vec<(SettingsSlot, Rc<FrontendSlot>)>,
    loops: HashMap<u64, Vec<tokio::task::JoinHandle<()>>>,
}

impl Listening {
    /// This worker's view of the frontend whose settings slot this is, made on first use (a
    /// remote session store's connection opens now, not in the first client's lookup, whose
    /// short timeout it would spend).
    fn front(
        &mut self,
        engine: &Arc<Engine>,
        settings: SettingsSlot,
        tls: TlsSlot,
        metrics: &Metrics,
        worker: usize,
    ) -> Rc<FrontendSlot> {
        if let Some((_, f)) = self.fronts.iter().find(|(s, _)| Arc::ptr_eq(s, &settings)) {
            return f.clone();
        }
        let f = FrontendSlot::new(engine.clone(), settings.clone(), tls, metrics, worker);
        let f = Rc::new(f);
        if let Some(remote) = &f.current().tls.load().remote {
            remote.warm_up();
        }
        self.fronts.push((settings, f.clone()));
        f
    }

    /// Drops the frontends no accept loop serves any more (a reload removed them).
    fn forget_unused(&mut self) {
        self.fronts.retain(|(_, f)| Rc::strong_count(f) > 1);
    }
}

async fn accept_loop(
    listener: TcpListener,
    slot: Rc<FrontendSlot>,
    worker: Rc<Worker>,
    (limit, local): (Arc<ConnectionLimit>, Arc<Semaphore>),
    mut shutdown: watch::Receiver<bool>,
) {
    const MIN_BACKOFF: Duration = Duration::from_millis(5);
    const MAX_BACKOFF: Duration = Duration::from_secs(1);
    let mut backoff = Duration::ZERO;
    loop {
        // At the process's or the frontend's limit, stop accepting: new connections wait in the
        // kernel's backlog instead of being accepted and dropped.
        while limit.is_full() || slot.current().gate.limit.is_full() {
            if !at_limit_pause(&mut shutdown).await {
                return;
            }
        }
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = stopped(&mut shutdown) => return,
        };
        match accepted {
            Ok((tcp, client)) => {
                backoff = Duration::ZERO;
                let fe = slot.current();
                fe.metrics.accepted.inc();
                // Another worker may have taken the last slot since the check: this one
                // connection then waits here, unserved, like those in the backlog.
                let slots = loop {
                    if let Some(s) = limit.try_take() {
                        if let Some(f) = fe.gate.limit.try_take() {
                            break (s, f);
                        }
                    }
                    if !at_limit_pause(&mut shutdown).await {
                        return;
                    }
                };
                let Ok(mine) = local.clone().try_acquire_owned() else {
                    return; // closed: cannot happen while the worker runs
                };
                let pressured = worker.near_the_limit(limit.active(), limit.max());
                let worker = worker.clone();
                tokio::task::spawn_local(async move {
                    connection::handle(worker, fe, tcp, (client, pressured)).await;
                    drop((slots, mine));
                });
            }
            Err(e) if is_connection_error(&e) => {}
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: retrying at once would spin; back off and let
                // connections finish and free descriptors.
                backoff = (backoff * 2).clamp(MIN_BACKOFF, MAX_BACKOFF);
                slot.current().metrics.accept_errors.inc();
                tracing::warn!(worker = worker.id, frontend = %slot.name(), error = %e, backoff = ?backoff, "accept failed; backing off");
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stopped(&mut shutdown) => return,
                }
            }
        }
    }
}

/// How often a worker looks whether it must close idle connections to free slots.
const FREE_SLOTS_EVERY: Duration = Duration::from_secs(1);

/// Near `max_connections`, closes idle connections to free slots (`Worker::free_slots`), until
/// the server stops.
async fn free_slots_near_the_limit(
    worker: Rc<Worker>,
    limit: Arc<ConnectionLimit>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(FREE_SLOTS_EVERY) => {}
            () = stopped(&mut shutdown) => return,
        }
        worker.free_slots(limit.active(), limit.max());
    }
}

/// How often a worker at the process-wide limit looks for a freed slot. Polling keeps the
/// release path a plain atomic subtract (no waker list shared by the workers); the cost is a
/// wake-up per worker every 10 ms, and only while the whole process is full.
const AT_LIMIT_POLL: Duration = Duration::from_millis(10);

/// Waits one poll interval; false when the server is stopping.
async fn at_limit_pause(shutdown: &mut watch::Receiver<bool>) -> bool {
    tokio::select! {
        () = tokio::time::sleep(AT_LIMIT_POLL) => true,
        () = stopped(shutdown) => false,
    }
}
