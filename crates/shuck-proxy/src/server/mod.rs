//! The server: loads TLS, binds every listener for every worker, starts the workers and stops
//! them on a shutdown signal. `Server::prepare` then `Server::run(shutdown)` is the testable entry
//! point; the binary only adds signal handling.

mod backend_watch;
pub mod bindings;
mod cert_watch;
pub mod check;
pub mod control;
mod dns_follow;
mod fd_budget;
pub(crate) mod health_checks;
mod health_tls;
mod redirect;
pub mod reload;
pub mod running;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::certs::{acme, staple_refresh};
use crate::config::{Config, Frontend, OcspMode};
use crate::error::{Error, Listener, Result};
use crate::metrics::{self, Metrics};
use crate::server::bindings::{write_ready_file, Bindings, METRICS};
pub use crate::server::reload::Reloader;
use crate::sys::upgrade::Inherited;
use crate::sys::{limits, notify, state_files};
use crate::tls::TlsContext;
use crate::worker::accept::Control;
use crate::worker::{accept, Engine};
use reload::Live;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// A configured, bound server, not yet accepting.
pub struct Server {
    config: Config,
    tls: Vec<TlsContext>,
    /// Per frontend: its slots and what a reload carries over.
    frontends: Vec<Live>,
    /// The listening addresses; the workers' accept loops come from here.
    bindings: Arc<Mutex<Bindings>>,
    /// Per worker, where its sockets come from (taken when the workers start).
    control: Vec<UnboundedReceiver<Control>>,
    metrics: Arc<Metrics>,
    metrics_listener: Option<std::net::TcpListener>,
    /// The `[[redirect]]` listeners' sockets, with the index of their section.
    redirect_listeners: Vec<(usize, std::net::TcpListener)>,
    fd_limit: u64,
    /// `max_connections` as the descriptors can serve it; a reload changes it in place.
    limit: Arc<limits::ConnectionLimit>,
    /// What the workers, the reloader and the server's tasks share (with the access log's
    /// settings, `shutdown_grace` and the expiry lead time, which a reload changes in place).
    engine: Arc<Engine>,
    /// Where the ACME renewal tasks say a frontend's certificate changed.
    renewed: Renewals,
    /// Started by an upgrade: the old process waits to hear this one is listening.
    predecessor: Inherited,
    /// Stops this process's metrics endpoint once a new process serves it (an upgrade).
    metrics_handover: Arc<Notify>,
    /// The DNS followers and the active health checks, shared with the reloader.
    watch: backend_watch::BackendWatch,
    /// The certificate files watched, told of each reload.
    cert_watch: cert_watch::CertWatch,
    /// The ACME renewal jobs, started when the server runs.
    acme_jobs: Vec<acme::renewal::Job>,
    /// The on-demand managers, started when the server runs.
    on_demand: Vec<acme::on_demand::Manager>,
}

/// Stops the metrics endpoint of a process that handed over to a new one: both hold the same
/// listening socket, and a scrape answered by either at random would see counters jump back and
/// forth while the old process drains.
#[derive(Debug, Clone)]
pub struct MetricsHandover(Arc<Notify>);

impl MetricsHandover {
    /// The new process answers scrapes from now on (a scrape under way finishes).
    pub fn hand_over(&self) {
        self.0.notify_one();
    }
}

/// Where the renewal and staple tasks announce the frontend whose certificate they renewed,
/// and the receiving end, until the caller takes it.
struct Renewals {
    announce: UnboundedSender<String>,
    updates: Option<UnboundedReceiver<String>>,
}

/// Names of frontends whose certificate was just renewed (ACME), for the caller to load with
/// [`Reloader::refresh`].
#[derive(Debug)]
pub struct CertificateUpdates(UnboundedReceiver<String>);

impl CertificateUpdates {
    /// The next frontend to refresh; `None` once the server is gone.
    pub async fn next(&mut self) -> Option<String> {
        self.0.recv().await
    }
}

impl Server {
    /// Loads certificates and binds all sockets. Fails with a message naming the file or address.
    pub fn prepare(config: Config) -> Result<Server> {
        Self::prepare_with(config, &mut Inherited::default())
    }

    /// Like `prepare`, taking over the listening sockets an old process handed over (an upgrade)
    /// where they fit the configuration, binding the rest.
    pub fn prepare_with(config: Config, inherited: &mut Inherited) -> Result<Server> {
        let fd_limit = limits::raise_fd_limit();
        let metrics = Metrics::new();
        let tls = config
            .frontends
            .iter()
            .map(|fe| reload::load_new(fe, &metrics))
            .collect::<Result<Vec<_>>>()?;
        make_state_dirs(&config)?;
        let now = crate::sys::clock::unix_now();
        let frontends: Vec<Live> = config
            .frontends
            .iter()
            .zip(&tls)
            .map(|(fe, t)| Live::start(fe, t, config.workers, &metrics))
            .collect();
        for w in metrics.expiry_warnings(now, config.certificate_expiry_warning) {
            tracing::warn!("{w}");
        }
        // Before any socket is touched: an upgrade's sockets are shared with the old process.
        let addresses = config
            .frontends
            .iter()
            .map(|fe| fe.listen.addrs.len())
            .sum();
        let reserved =
            limits::reserved_fds(config.workers, addresses, fd_budget::other_sockets(&config));
        let limit = limits::ConnectionLimit::new(limits::effective_max_connections(
            config.max_connections,
            fd_limit,
            reserved,
        )?);
        metrics.set_connection_limit(limit.max());
        metrics.set_per_worker(config.metrics_per_worker);
        let (mut bindings, control) = Bindings::new(config.workers);
        let listed: Vec<&Frontend> = config.frontends.iter().collect();
        let prepared = bindings.prepare(&listed, inherited)?;
        let metrics_listener = bind_metrics(config.metrics_listen, inherited)?;
        if let Some(l) = &metrics_listener {
            bindings
                .set_metrics(l)
                .map_err(|source| Error::Worker { worker: 0, source })?;
        }
        let redirect_listeners = redirect::bind(&config, inherited)?;
        bindings
            .set_redirects(&redirect_listeners)
            .map_err(|source| Error::Worker { worker: 0, source })?;
        if inherited.leftover() > 0 {
            tracing::warn!(sockets = inherited.leftover(), "listening sockets handed over for addresses no longer configured are closed (connections waiting in them are dropped)");
            inherited.close_leftovers();
        }
        // Queued for the workers, which take them when they start.
        bindings.commit(prepared, &listed, |name| {
            reload::slots_named(&frontends, name)
        });
        let engine = Engine::new(&config);
        if config.state_dir.is_dir() {
            engine.backend_states.keep_in(&config.state_dir);
            for (k, s) in engine.backend_states.all() {
                metrics.set_backend_admin_state(
                    &k.frontend,
                    &k.route,
                    &k.backend,
                    s.state().gauge(),
                );
            }
        }
        let cert_watch = cert_watch::CertWatch::new(&config);
        let acme_jobs = acme_jobs(&config, &engine, &metrics)?;
        let on_demand = on_demand_managers(&config, &tls, &engine, &metrics)?;
        Ok(Server {
            config,
            tls,
            frontends,
            bindings: Arc::new(Mutex::new(bindings)),
            control,
            metrics: Arc::new(metrics),
            metrics_listener,
            redirect_listeners,
            fd_limit,
            limit,
            watch: backend_watch::BackendWatch::new(engine.clone()),
            engine,
            renewed: {
                let (announce, updates) = tokio::sync::mpsc::unbounded_channel();
                Renewals {
                    announce,
                    updates: Some(updates),
                }
            },
            predecessor: std::mem::take(inherited),
            metrics_handover: Arc::new(Notify::new()),
            cert_watch,
            acme_jobs,
            on_demand,
        })
    }

    /// A handle to apply a new configuration while running (SIGHUP).
    pub fn reloader(&self) -> Reloader {
        Reloader::new(
            self.config.clone(),
            self.frontends.clone(),
            self.bindings.clone(),
            self.metrics.clone(),
            reload::Capacity {
                limit: self.limit.clone(),
                fd_limit: self.fd_limit,
            },
            self.engine.clone(),
            self.watch.clone(),
        )
        .with_cert_watch(self.cert_watch.clone())
    }

    /// The engine's side of the admin socket.
    pub fn control(&self) -> control::Control {
        control::Control::new(
            self.engine.clone(),
            self.metrics.clone(),
            self.bindings.clone(),
            (self.limit.clone(), self.fd_limit),
        )
    }

    /// The listening addresses: what a successor takes over (`kill -USR2`), as they are when it
    /// starts (a reload may have changed them).
    pub fn bindings(&self) -> Arc<Mutex<Bindings>> {
        self.bindings.clone()
    }

    /// What stops the metrics endpoint after an upgrade's handover.
    pub fn metrics_handover(&self) -> MetricsHandover {
        MetricsHandover(self.metrics_handover.clone())
    }

    /// Where renewed certificates are announced (once; `None` after the first call).
    pub fn certificate_updates(&mut self) -> Option<CertificateUpdates> {
        self.renewed.updates.take().map(CertificateUpdates)
    }

    /// A staple to keep current per certificate file of each `ocsp = "fetch"` frontend.
    fn staple_jobs(&self) -> Vec<staple_refresh::Job> {
        let mut jobs = Vec::new();
        for (fe, tls) in self.config.frontends.iter().zip(&self.tls) {
            if fe.ocsp != OcspMode::Fetch {
                continue;
            }
            let files: Vec<PathBuf> = match fe.acme() {
                Some(acme) => vec![acme.bundle.clone()],
                None => tls.certs.iter().map(|c| c.path.clone()).collect(),
            };
            jobs.extend(files.into_iter().map(|certificate| staple_refresh::Job {
                frontend: fe.name.clone(),
                certificate,
                state_dir: fe.state_dir.clone(),
                now: self.engine.staples_now(&fe.name),
            }));
        }
        jobs
    }

    /// The metrics endpoint's address, when enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// Starts following the backends' host names (their first answers in before a worker
    /// accepts) and checking their health.
    fn watch_backends(&self, rt: &tokio::runtime::Runtime) {
        let c = &self.config;
        let frontends: Vec<&Frontend> = c.frontends.iter().collect();
        self.watch.start(rt.handle(), &self.metrics);
        let (watch, listed, lookups) = (self.watch.clone(), c.frontends.clone(), c.dns_lookups());
        let waiting = rt.spawn_blocking(move || {
            watch.follow_names(&listed.iter().collect::<Vec<_>>(), &lookups, true);
        });
        let waited = rt.block_on(waiting);
        if let Err(e) = waited {
            tracing::error!(error = %e, "waiting for the backends' first DNS answers failed");
        }
        self.watch.check(&frontends);
    }

    /// Runs until `shutdown` completes, then stops accepting, drains for the grace period (or
    /// until `force` completes) and returns. Writes `ready_file` (one address per line) once every
    /// worker is listening. `rt` is the main thread's runtime: it drives `shutdown`, `force`, the
    /// metrics endpoint and whatever the caller spawned on it (signal handling).
    pub fn run(
        mut self,
        rt: &tokio::runtime::Runtime,
        ready_file: Option<&Path>,
        shutdown: impl Future<Output = ()>,
        force: impl Future<Output = ()>,
    ) -> Result<()> {
        let bound = self.listening();
        let metrics_addr = self.metrics_addr();
        self.watch_backends(rt);
        self.cert_watch.start(
            rt.handle(),
            self.renewed.announce.clone(),
            self.metrics.clone(),
        );
        let (stop, workers) = self.start_workers()?;
        let _metrics_task = self.serve_metrics(rt, metrics_addr)?;
        let redirects = self.serve_redirects(rt)?;
        self.start_tasks(rt);
        let listed: Vec<SocketAddr> = bound
            .iter()
            .map(|(_, a)| *a)
            .chain(redirects.iter().map(|(a, _)| *a))
            .chain(metrics_addr)
            .collect();
        self.announce_ready(rt, ready_file, &listed, bound.len())?;
        rt.block_on(shutdown);
        // Port 80 goes quiet at once: after an upgrade the new process answers there, and its
        // HTTP-01 challenges are its own.
        drop(redirects);
        self.drain(rt, &stop, workers, force);
        Ok(())
    }

    /// The addresses listened on, as the metrics and the start's log line show them.
    fn listening(&self) -> Vec<(String, SocketAddr)> {
        let bound = self
            .bindings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .addresses();
        self.metrics.set_listeners(&bound);
        tracing::info!(
            pid = std::process::id(),
            workers = self.config.workers,
            fd_limit = self.fd_limit,
            max_connections = self.limit.max(),
            "starting"
        );
        bound
    }

    /// One thread per worker, pinned when `pin_cpus` says so; the sender stops them accepting.
    fn start_workers(&mut self) -> Result<(watch::Sender<bool>, Vec<std::thread::JoinHandle<()>>)> {
        let cores = if self.config.pin_cpus {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        let (tx, rx) = watch::channel(false);
        let mut handles = Vec::with_capacity(self.config.workers);
        for (id, control) in std::mem::take(&mut self.control).into_iter().enumerate() {
            let spec = accept::WorkerSpec {
                id,
                core: (!cores.is_empty()).then(|| cores[id % cores.len()]),
                control,
                limit: self.limit.clone(),
                engine: self.engine.clone(),
                shutdown: rx.clone(),
                metrics: self.metrics.clone(),
            };
            handles
                .push(accept::spawn(spec).map_err(|source| Error::Worker { worker: id, source })?);
        }
        Ok((tx, handles))
    }

    /// The metrics endpoint on the main runtime, until a new process takes it over.
    fn serve_metrics(
        &mut self,
        rt: &tokio::runtime::Runtime,
        addr: Option<SocketAddr>,
    ) -> Result<Option<tokio::task::JoinHandle<()>>> {
        let (Some(l), Some(addr)) = (self.metrics_listener.take(), addr) else {
            return Ok(None);
        };
        let _guard = rt.enter();
        let l = tokio::net::TcpListener::from_std(l)
            .map_err(|source| Error::bind(addr, Listener::Metrics, source))?;
        tracing::info!(%addr, "metrics on http://{addr}/metrics");
        let (serve, handover) = (
            metrics::serve(l, self.metrics.clone()),
            self.metrics_handover.clone(),
        );
        Ok(Some(rt.spawn(async move {
            tokio::select! {
                () = serve => {}
                () = handover.notified() => tracing::info!("metrics endpoint handed over to the new process"),
            }
        })))
    }

    /// The `[[redirect]]` listeners on the main runtime, each address with its task (aborted
    /// when dropped: at the end of `run`).
    fn serve_redirects(
        &mut self,
        rt: &tokio::runtime::Runtime,
    ) -> Result<Vec<(SocketAddr, AbortOnDrop)>> {
        let _guard = rt.enter();
        let sections: Vec<Arc<redirect::Shared>> = self
            .config
            .redirect
            .iter()
            .map(|r| {
                Arc::new(redirect::Shared::new(
                    r.clone(),
                    self.engine.clone(),
                    self.metrics.clone(),
                ))
            })
            .collect();
        let mut tasks = Vec::new();
        for (i, l) in std::mem::take(&mut self.redirect_listeners) {
            let addr = l
                .local_addr()
                .map_err(|source| Error::Worker { worker: 0, source })?;
            let l = tokio::net::TcpListener::from_std(l)
                .map_err(|source| Error::bind(addr, Listener::Redirect, source))?;
            tracing::info!(%addr, "redirecting http://{addr}/ to HTTPS");
            let task = rt.spawn(redirect::serve(l, sections[i].clone()));
            tasks.push((addr, AbortOnDrop(task)));
        }
        Ok(tasks)
    }

    /// The main runtime's own tasks: the expiry warning, staples, ACME renewals.
    fn start_tasks(&mut self, rt: &tokio::runtime::Runtime) {
        let announce = &self.renewed.announce;
        rt.spawn(watch_expiry(self.metrics.clone(), self.engine.clone()));
        rt.spawn(drop_lapsed_staples(self.metrics.clone(), announce.clone()));
        for job in self.staple_jobs() {
            rt.spawn(staple_refresh::run(job, announce.clone()));
        }
        for job in std::mem::take(&mut self.acme_jobs) {
            rt.spawn(acme::renewal::run(job, announce.clone()));
        }
        for manager in std::mem::take(&mut self.on_demand) {
            rt.spawn(acme::on_demand::run(manager));
        }
    }

    /// Everything is bound and running: the record `shuck check` compares with (not a start
    /// that failed), the ready file (the `listed` addresses, the metrics endpoint's last), the
    /// service manager told.
    fn announce_ready(
        &self,
        rt: &tokio::runtime::Runtime,
        ready_file: Option<&Path>,
        listed: &[SocketAddr],
        listening: usize,
    ) -> Result<()> {
        // Before the ready file, so whoever waits on it finds the record.
        running::record(&self.config);
        for k in self.engine.publish(&self.config) {
            self.metrics
                .forget_backend_admin_state(&k.frontend, &k.route, &k.backend);
        }
        if let Some(path) = ready_file {
            write_ready_file(path, listed)?;
        }
        // After an upgrade, the service manager follows this process only once its
        // predecessor has heard it is ready (or is gone): one that cancelled the upgrade is not
        // followed to a process about to stop.
        if self.predecessor.is_upgrade() && self.predecessor.say_ready() {
            notify::main_pid();
            if let Some(alive) = self.predecessor.keep_saying_alive() {
                rt.spawn(alive);
            }
        }
        notify::ready(&format!("listening on {listening} addresses"));
        self.metrics.set_phase(metrics::Phase::Serving);
        rt.spawn(report_status(self.limit.clone(), self.bindings.clone()));
        Ok(())
    }

    /// Stops accepting and waits for the workers' connections (`shutdown_grace` each), or
    /// until `force`. The runtime keeps running meanwhile, so metrics stay up and a second
    /// signal can cut the drain short.
    fn drain(
        &self,
        rt: &tokio::runtime::Runtime,
        stop: &watch::Sender<bool>,
        workers: Vec<std::thread::JoinHandle<()>>,
        force: impl Future<Output = ()>,
    ) {
        notify::stopping();
        self.metrics.set_phase(metrics::Phase::Draining);
        tracing::info!("shutting down: no new connections");
        let _ = stop.send(true);
        rt.block_on(async {
            let drained = tokio::task::spawn_blocking(move || {
                for h in workers {
                    let _ = h.join();
                }
            });
            tokio::select! {
                _ = drained => {}
                () = force => tracing::warn!("second stop signal: exiting without waiting for open connections"),
            }
        });
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The renewal job of each frontend with ACME, with its fleet when it shares a session store.
/// Made before privileges are dropped: the fleet's key file may be readable by root only.
fn acme_jobs(c: &Config, engine: &Engine, metrics: &Metrics) -> Result<Vec<acme::renewal::Job>> {
    let mut jobs = Vec::new();
    for fe in &c.frontends {
        check_tsig_key(fe, engine)?;
        // An on-demand frontend may have no names of its own.
        let Some(acme) = fe.acme().filter(|a| !a.names.is_empty()) else {
            continue;
        };
        jobs.push(acme::renewal::Job {
            frontend: fe.name.clone(),
            acme: acme.clone(),
            fleet: fleet_of(fe, engine)?,
            challenges: engine.challenges.clone(),
            events: metrics.acme_fleet_events(&fe.name),
            ask: None,
        });
    }
    Ok(jobs)
}

/// A DNS-01 frontend's TSIG key, read now (before privileges are dropped, and not months later
/// at the first renewal) so a missing or malformed file stops the start with its name.
/// The key is kept: an order signs with it should the file be unreadable by then (a file only
/// root may read, once privileges are dropped).
fn check_tsig_key(fe: &Frontend, engine: &Engine) -> Result<()> {
    let Some(update) = fe.acme().and_then(|a| a.dns_update.as_ref()) else {
        return Ok(());
    };
    let key = acme::dns01::read_key(&update.tsig_key_file).map_err(|e| Error::TsigKey {
        frontend: fe.name.clone(),
        message: e.to_string(),
    })?;
    engine.challenges.dns_keys.keep(&update.tsig_key_file, key);
    Ok(())
}

/// The on-demand manager of each frontend with `on_demand`, over the table its TLS serves from.
fn on_demand_managers(
    c: &Config,
    tls: &[TlsContext],
    engine: &Engine,
    metrics: &Metrics,
) -> Result<Vec<acme::on_demand::Manager>> {
    let mut managers = Vec::new();
    let reserved: Arc<std::collections::HashSet<String>> = Arc::new(
        c.frontends
            .iter()
            .filter_map(Frontend::acme)
            .flat_map(|a| &a.names)
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .collect(),
    );
    for (fe, ctx) in c.frontends.iter().zip(tls) {
        let (Some(acme), Some(certs)) = (fe.acme(), ctx.on_demand.clone()) else {
            continue;
        };
        managers.push(acme::on_demand::Manager {
            frontend: fe.name.clone(),
            acme: acme.clone(),
            certs,
            fleet: fleet_of(fe, engine)?,
            challenges: engine.challenges.clone(),
            fleet_events: metrics.acme_fleet_events(&fe.name),
            reserved: reserved.clone(),
        });
    }
    Ok(managers)
}

/// The fleet a frontend with ACME shares its certificate with, through its `acme_store` (or
/// `session_store`).
fn fleet_of(fe: &Frontend, engine: &Engine) -> Result<Option<acme::fleet::Fleet>> {
    let Some(store) = fe.fleet_store() else {
        return Ok(None);
    };
    // A store that cannot be used stops the start: each host ordering alone would have the
    // CA's validations land on hosts that know nothing of its order.
    let shared = engine
        .fleet_stores
        .shared(&store.url, &store.key)
        .map_err(|message| Error::SessionStore {
            url: crate::config::url_without_password(&store.url),
            message,
        })?;
    Ok(Some(acme::fleet::Fleet::new(shared)))
}

/// Warns, twice a day, about certificates shuck does not renew that expire soon: a process that
/// runs for months sees no reload to warn at.
async fn watch_expiry(metrics: Arc<Metrics>, engine: Arc<Engine>) {
    const EVERY: Duration = Duration::from_secs(12 * 3600);
    loop {
        tokio::time::sleep(EVERY).await;
        let within = engine.expiry_warning();
        for w in metrics.expiry_warnings(crate::sys::clock::unix_now(), within) {
            tracing::warn!("{w}");
        }
    }
}

/// The service manager's status line: the connections open and the addresses listened on (a
/// reload may change them), every 5 s while it changes.
async fn report_status(limit: Arc<limits::ConnectionLimit>, bindings: Arc<Mutex<Bindings>>) {
    const EVERY: Duration = Duration::from_secs(5);
    let mut shown = None;
    loop {
        tokio::time::sleep(EVERY).await;
        let open = limit.active();
        let listening = bindings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .addresses()
            .len();
        if shown != Some((open, listening)) {
            notify::status(&format!(
                "{open} connections open; listening on {listening} addresses"
            ));
            shown = Some((open, listening));
        }
    }
}

/// A stapled OCSP response is good until its nextUpdate; past it (a `.ocsp` file nobody renewed,
/// a responder down for long), the frontend is loaded again, which checks it and drops it.
async fn drop_lapsed_staples(metrics: Arc<Metrics>, reload: UnboundedSender<String>) {
    const EVERY: Duration = Duration::from_secs(30);
    loop {
        tokio::time::sleep(EVERY).await;
        for frontend in metrics.lapsed_staples(crate::sys::clock::unix_now()) {
            if reload.send(frontend).is_err() {
                return;
            }
        }
    }
}

/// The metrics endpoint's socket: handed over by an old process, or bound.
fn bind_metrics(
    metrics_listen: Option<SocketAddr>,
    inherited: &mut Inherited,
) -> Result<Option<std::net::TcpListener>> {
    // A plain socket, without SO_REUSEPORT: nothing else may share the metrics port.
    let metrics_listener = match metrics_listen {
        None => None,
        Some(addr) => {
            let inherited = inherited.take(METRICS, usize::MAX, addr).into_iter().next();
            let l = match inherited {
                Some(l) => l,
                None => metrics_socket(addr)
                    .map_err(|source| Error::bind(addr, Listener::Metrics, source))?,
            };
            Some(l)
        }
    };
    Ok(metrics_listener)
}

/// The metrics listener's socket: a listen queue deep enough (1024) that a burst of connections
/// (a flood of silent ones, which the endpoint closes as it accepts them) does not fill it and
/// leave a probe's SYN unanswered for the kernel's 1 s retransmission.
fn metrics_socket(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

/// Made now, as whoever started shuck: a `user` it becomes gets them handed over.
fn make_state_dirs(config: &Config) -> Result<()> {
    for fe in &config.frontends {
        let mut dirs = Vec::new();
        if let Some(acme) = fe.acme() {
            dirs.push(acme.dir.clone());
        }
        if fe.ocsp == OcspMode::Fetch {
            dirs.push(fe.state_dir.join("ocsp"));
        }
        for dir in dirs {
            state_files::ensure_private_dir(&dir)
                .map_err(|e| Error::StateDir(format!("{}: {e}", dir.display())))?;
        }
    }
    Ok(())
}
