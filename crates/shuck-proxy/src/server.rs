//! The server: loads TLS, binds every listener for every worker, starts the workers and stops
//! them on a shutdown signal. `Server::prepare` then `Server::run(shutdown)` is the testable entry
//! point; the binary only adds signal handling.

use std::future::Future;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::ProducesTickets;

use crate::tls::tickets::Ticketer;
use tokio::sync::watch;

use crate::config::Config;
use crate::config::{CertSource, OcspMode};
use crate::error::{Error, Result};
use crate::metrics::{self, Metrics};
use crate::session_store::{SharedStore as SessionStoreHandle, StoreCounters};
use crate::tls::sessions::SessionCache;
use crate::tls::{Carried, TlsContext, TlsSlot};
use crate::upgrade::{Handover, Inherited};
use crate::worker::SettingsSlot;
use crate::{accept, acme, limits, listener, notify, staple_refresh, state_files};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// A configured, bound server, not yet accepting.
pub struct Server {
    config: Config,
    tls: Vec<TlsContext>,
    /// `[frontend][worker]`: each worker's own TLS configuration, replaceable on reload.
    slots: Vec<Vec<TlsSlot>>,
    /// Per worker: (frontend index, socket).
    listeners: PerWorker,
    bound: Vec<(String, SocketAddr)>,
    metrics: Arc<Metrics>,
    metrics_listener: Option<std::net::TcpListener>,
    fd_limit: u64,
    /// Where the ACME renewal tasks say a frontend's certificate changed.
    renewed: (UnboundedSender<String>, Option<UnboundedReceiver<String>>),
    /// Per frontend: its settings outside TLS, which workers read at each accept.
    settings: Vec<SettingsSlot>,
    /// Duplicates of every listening socket, for a successor (`kill -USR2`).
    handover: Handover,
    /// Started by an upgrade: the old process waits to hear this one is listening.
    predecessor: Inherited,
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
            .map(|fe| {
                let sessions = SessionCache::new(
                    fe.session_cache_size,
                    fe.session_ticket_lifetime,
                    metrics.session_counters(&fe.name),
                );
                TlsContext::load_keeping(
                    fe,
                    Carried {
                        ticketer: None,
                        sessions: Some(sessions),
                        store: None,
                        store_counters: metrics.store_counters(&fe.name),
                    },
                )
            })
            .collect::<Result<Vec<_>>>()?;
        // Made now, as whoever started shuck: a `user` it becomes gets them handed over.
        for fe in &config.frontends {
            let mut dirs = Vec::new();
            if let CertSource::Acme(acme) = &fe.certs {
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
        for (fe, t) in config.frontends.iter().zip(&tls) {
            metrics.set_certificates(&fe.name, cert_records(fe, t));
        }
        let now = crate::clock::unix_now();
        for w in metrics.expiry_warnings(now, config.certificate_expiry_warning) {
            tracing::warn!("{w}");
        }
        let mut handover = Handover::default();
        let (listeners, bound) = bind_frontends(&config, inherited, &mut handover)?;
        let metrics_listener = bind_metrics(config.metrics_listen, inherited, &mut handover)?;
        if inherited.leftover() > 0 {
            tracing::warn!(sockets = inherited.leftover(), "listening sockets handed over for addresses no longer configured are closed (connections waiting in them are dropped)");
        }
        let settings = config
            .frontends
            .iter()
            .map(|fe| Arc::new(ArcSwap::from_pointee(fe.clone())))
            .collect();
        let slots = tls
            .iter()
            .map(|t| {
                (0..config.workers)
                    .map(|w| Arc::new(ArcSwap::new(t.worker_config(w))))
                    .collect()
            })
            .collect();
        Ok(Server {
            config,
            tls,
            slots,
            listeners,
            bound,
            metrics: Arc::new(metrics),
            metrics_listener,
            fd_limit,
            renewed: {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (tx, Some(rx))
            },
            handover,
            predecessor: std::mem::take(inherited),
            settings,
        })
    }

    /// A handle to swap in new certificates and TLS settings while running (SIGHUP).
    pub fn reloader(&self) -> Reloader {
        Reloader {
            started: self.config.clone(),
            ticketers: self.tls.iter().map(|t| t.ticketer.clone()).collect(),
            sessions: self.tls.iter().map(|t| t.sessions.clone()).collect(),
            stores: self.tls.iter().map(|t| t.store.clone()).collect(),
            store_counters: self
                .config
                .frontends
                .iter()
                .map(|fe| self.metrics.store_counters(&fe.name))
                .collect(),
            client_trust: self.tls.iter().map(|t| t.client_trust).collect(),
            slots: self.slots.clone(),
            current: self.config.frontends.clone(),
            settings: self.settings.clone(),
            metrics: self.metrics.clone(),
            expiry_warning: self.config.certificate_expiry_warning,
        }
    }

    /// The listening sockets a successor takes over (`kill -USR2`): duplicates, so they stay open
    /// in this process until it stops.
    pub fn handover(&mut self) -> Handover {
        std::mem::take(&mut self.handover)
    }

    /// Where renewed certificates are announced (once; `None` after the first call).
    pub fn certificate_updates(&mut self) -> Option<CertificateUpdates> {
        self.renewed.1.take().map(CertificateUpdates)
    }

    /// A staple to keep current per certificate file of each `ocsp = "fetch"` frontend.
    fn staple_jobs(&self) -> Vec<staple_refresh::Job> {
        let mut jobs = Vec::new();
        for (fe, tls) in self.config.frontends.iter().zip(&self.tls) {
            if fe.ocsp != OcspMode::Fetch {
                continue;
            }
            let files: Vec<PathBuf> = match &fe.certs {
                CertSource::Acme(acme) => vec![acme.bundle.clone()],
                _ => tls.certs.iter().map(|c| c.path.clone()).collect(),
            };
            jobs.extend(files.into_iter().map(|certificate| staple_refresh::Job {
                frontend: fe.name.clone(),
                certificate,
                state_dir: fe.state_dir.clone(),
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

    /// Runs until `shutdown` completes, then stops accepting, drains for the grace period (or
    /// until `force` completes) and returns. Writes `ready_file` (one address per line) once every
    /// worker is listening. `rt` is the main thread's runtime: it drives `shutdown`, `force`, the
    /// metrics endpoint and whatever the caller spawned on it (signal handling).
    pub fn run(
        self,
        rt: &tokio::runtime::Runtime,
        ready_file: Option<&Path>,
        shutdown: impl Future<Output = ()>,
        force: impl Future<Output = ()>,
    ) -> Result<()> {
        let staple_jobs = self.staple_jobs();
        let c = &self.config;
        let addresses = c.frontends.iter().map(|f| f.listen.len()).sum();
        let reserved = limits::reserved_fds(c.workers, addresses);
        let max_connections =
            limits::effective_max_connections(c.max_connections, self.fd_limit, reserved)?;
        tracing::info!(
            pid = std::process::id(),
            workers = c.workers,
            fd_limit = self.fd_limit,
            max_connections,
            "starting"
        );
        let frontends = self.settings.clone();
        let limit = limits::ConnectionLimit::new(max_connections);
        let cores = if c.pin_cpus {
            core_affinity::get_core_ids().unwrap_or_default()
        } else {
            Vec::new()
        };
        let metrics_addr = self.metrics_addr();
        let (tx, rx) = watch::channel(false);
        let mut handles = Vec::with_capacity(c.workers);
        for (id, listeners) in self.listeners.into_iter().enumerate() {
            let spec = accept::WorkerSpec {
                id,
                core: (!cores.is_empty()).then(|| cores[id % cores.len()]),
                listeners,
                frontends: frontends
                    .iter()
                    .zip(&self.slots)
                    .map(|(fe, slots)| (fe.clone(), slots[id].clone()))
                    .collect(),
                limit: limit.clone(),
                log_connections: c.log_connections,
                connection_log_format: c.connection_log_format,
                shutdown_grace: c.shutdown_grace,
                shutdown: rx.clone(),
                metrics: self.metrics.clone(),
            };
            handles
                .push(accept::spawn(spec).map_err(|source| Error::Worker { worker: id, source })?);
        }
        for (name, addr) in &self.bound {
            tracing::info!(frontend = %name, %addr, "listening");
        }
        let _metrics_task = match (self.metrics_listener, metrics_addr) {
            (Some(l), Some(addr)) => {
                let _guard = rt.enter();
                let l = tokio::net::TcpListener::from_std(l).map_err(|source| Error::Bind {
                    addr,
                    frontend: "metrics".into(),
                    source,
                })?;
                tracing::info!(%addr, "metrics on http://{addr}/metrics");
                Some(rt.spawn(metrics::serve(l, self.metrics.clone())))
            }
            _ => None,
        };
        rt.spawn(watch_expiry(
            self.metrics.clone(),
            c.certificate_expiry_warning,
        ));
        rt.spawn(drop_lapsed_staples(
            self.metrics.clone(),
            self.renewed.0.clone(),
        ));
        for job in staple_jobs {
            rt.spawn(staple_refresh::run(job, self.renewed.0.clone()));
        }
        for fe in &c.frontends {
            if let CertSource::Acme(acme) = &fe.certs {
                let job = acme::renewal::Job {
                    frontend: fe.name.clone(),
                    acme: (**acme).clone(),
                };
                rt.spawn(acme::renewal::run(job, self.renewed.0.clone()));
            }
        }
        if let Some(path) = ready_file {
            let mut lines: Vec<SocketAddr> = self.bound.iter().map(|(_, a)| *a).collect();
            lines.extend(metrics_addr);
            write_ready_file(path, &lines)?;
        }
        let listening = self.bound.len();
        if self.predecessor.is_upgrade() {
            // The service manager follows this process from now on.
            notify::main_pid();
            self.predecessor.say_ready();
        }
        notify::ready(&format!("listening on {listening} addresses"));
        rt.spawn(report_status(limit.clone(), listening));
        rt.block_on(shutdown);
        notify::stopping();
        tracing::info!("shutting down: no new connections");
        let _ = tx.send(true);
        // The runtime keeps running while workers drain, so metrics stay up and a second signal
        // can cut the drain short.
        rt.block_on(async {
            let drained = tokio::task::spawn_blocking(move || {
                for h in handles {
                    let _ = h.join();
                }
            });
            tokio::select! {
                _ = drained => {}
                () = force => tracing::warn!("second stop signal: exiting without waiting for open connections"),
            }
        });
        Ok(())
    }
}

/// One address per line: the listeners in configuration order, then the metrics endpoint.
/// Written to a temporary name then renamed, so a reader never sees half a file.
fn write_ready_file(path: &Path, addrs: &[SocketAddr]) -> Result<()> {
    let err = |source| Error::ReadyFile {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(err)?;
    for addr in addrs {
        writeln!(f, "{addr}").map_err(err)?;
    }
    f.sync_all().map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// Reloads running frontends (matched by name): certificates and TLS settings, backends, timeouts
/// and PROXY settings. Everything is loaded and checked before anything is swapped, so a bad
/// certificate leaves the old ones serving. Listen addresses, the backlog and workers need a
/// restart (or an upgrade).
pub struct Reloader {
    /// The configuration the server started with: what non-reloadable settings are compared to.
    started: Config,
    /// Per frontend, the ticket keys in use, kept across reloads so tickets issued before a
    /// reload still resume (random keys; keys from files are read again).
    ticketers: Vec<Option<Arc<Ticketer>>>,
    /// Per frontend, the remote session store (kept while its settings are unchanged) and the
    /// counters a new one counts into.
    stores: Vec<Option<Arc<SessionStoreHandle>>>,
    store_counters: Vec<StoreCounters>,
    /// Per frontend, the session cache (kept across reloads, so a reload does not cost every
    /// cached session a full handshake).
    sessions: Vec<Arc<SessionCache>>,
    /// Per frontend, the digest of the client-certificate trust in force. Resumption does not
    /// check a client certificate again, so when this changes (a new CRL, a new CA, optional
    /// made required) the old tickets and cached sessions must go with it.
    client_trust: Vec<Option<[u8; 32]>>,
    slots: Vec<Vec<TlsSlot>>,
    /// Per frontend (as started), the settings in force: what a refresh loads again.
    current: Vec<crate::config::Frontend>,
    /// Per frontend, the settings slot the workers read at each accept.
    settings: Vec<SettingsSlot>,
    /// Where the served certificates are shown, and how early their expiry is warned about.
    metrics: Arc<Metrics>,
    expiry_warning: Duration,
}

impl Reloader {
    /// Applies `new`; returns notes about changes that were not applied.
    pub fn reload(&mut self, new: &Config) -> Result<Vec<String>> {
        let mut notes: Vec<String> = global_changes(&self.started, new)
            .into_iter()
            .map(|key| format!("{key} changed; restart to apply it"))
            .collect();
        let mut built = Vec::new();
        for (i, old) in self.started.frontends.iter().enumerate() {
            let Some(fe) = new.frontends.iter().find(|f| f.name == old.name) else {
                notes.push(format!(
                    "frontend {:?} is no longer configured: restart to remove it",
                    old.name
                ));
                continue;
            };
            // Frontends are matched by name, and unnamed ones are named by position: if the
            // addresses differ, this may be another frontend, whose certificates must not be
            // served here.
            if old.listen != fe.listen {
                notes.push(format!(
                    "frontend {:?}: listen changed; not reloaded, restart to apply it",
                    fe.name
                ));
                continue;
            }
            // The renewal task keeps the settings it started with: another name list or CA would
            // serve a temporary certificate nobody orders a replacement for.
            if acme_settings(old) != acme_settings(fe) {
                notes.push(format!(
                    "frontend {:?}: acme changed; not reloaded, restart to apply it",
                    fe.name
                ));
                continue;
            }
            if old.ocsp != fe.ocsp {
                notes.push(format!(
                    "frontend {:?}: ocsp changed; restart to apply it (its fetch tasks follow the settings shuck started with)",
                    fe.name
                ));
            }
            if let Some(t) = self.ticketers[i].as_ref().filter(|t| !t.is_from_files()) {
                if fe.session_tickets
                    && u64::from(t.lifetime()) != fe.session_ticket_lifetime.as_secs()
                {
                    notes.push(format!(
                        "frontend {:?}: session_ticket_lifetime changed; restart to apply it (the ticket key is kept across reloads)",
                        fe.name
                    ));
                }
            }
            // state_dir and ocsp stay as started: the tasks that write there were started with them.
            let mut fe = fe.clone();
            fe.state_dir.clone_from(&old.state_dir);
            fe.ocsp = old.ocsp;
            let (ctx, trust_changed) = self.load_frontend(i, &fe)?;
            if trust_changed {
                notes.push(format!(
                    "frontend {:?}: client certificate trust changed; sessions and tickets issued before were invalidated",
                    fe.name
                ));
            }
            if let Some(what) = needs_restart(old, &fe) {
                notes.push(format!(
                    "frontend {:?}: {what} changed; restart to apply it (TLS settings were reloaded)",
                    fe.name
                ));
            }
            built.push((i, fe, ctx));
        }
        for fe in &new.frontends {
            if !self.started.frontends.iter().any(|o| o.name == fe.name) {
                notes.push(format!("frontend {:?} is new: restart to add it", fe.name));
            }
        }
        for (i, fe, ctx) in built {
            self.install(i, &fe, &ctx);
            // Backends, timeouts, PROXY settings: new connections get them from now on. Stored
            // only when they changed: the workers then start new backend pools (health and
            // connection counts afresh), which a certificate reload should not cost.
            if runtime_settings_differ(&self.settings[i].load(), &fe) {
                self.settings[i].store(Arc::new(fe));
            }
        }
        Ok(notes)
    }

    /// Loads frontend `i` with `fe`, keeping what it carries (ticket keys, session cache, store)
    /// unless the client-certificate trust changed: then a fresh ticket key and a fresh session
    /// cache, since sessions resumed under the old trust would skip the new checks (a revoked
    /// certificate would keep working until its ticket expired). The old cache stays with the
    /// old configuration, whose handshakes still running may fill it. Also says whether the
    /// trust changed.
    fn load_frontend(&self, i: usize, fe: &crate::config::Frontend) -> Result<(TlsContext, bool)> {
        let carried = |ticketer, sessions| Carried {
            ticketer,
            sessions: Some(sessions),
            store: self.stores[i].clone(),
            store_counters: self.store_counters[i].clone(),
        };
        let keep = self.ticketers[i].clone().filter(|_| fe.session_tickets);
        let ctx = TlsContext::load_keeping(fe, carried(keep, self.sessions[i].clone()))?;
        if ctx.client_trust == self.client_trust[i] {
            return Ok((ctx, false));
        }
        let fresh = TlsContext::load_keeping(fe, carried(None, self.sessions[i].fresh()))?;
        Ok((fresh, true))
    }

    /// Loads frontend `name`'s certificates again with the settings in force, for that frontend
    /// alone: an ACME renewal stored a new certificate. The same checks and swap as a reload.
    pub fn refresh(&mut self, name: &str) -> Result<()> {
        let Some(i) = self.current.iter().position(|f| f.name == name) else {
            return Ok(());
        };
        let fe = self.current[i].clone();
        let (ctx, trust_changed) = self.load_frontend(i, &fe)?;
        if trust_changed {
            tracing::warn!(frontend = %fe.name, "client certificate trust changed on disk; sessions and tickets issued before were invalidated");
        }
        self.install(i, &fe, &ctx);
        Ok(())
    }

    /// Puts a loaded frontend into every worker's slot and keeps what the next load carries.
    fn install(&mut self, i: usize, fe: &crate::config::Frontend, ctx: &TlsContext) {
        let now = crate::clock::unix_now();
        if !matches!(fe.certs, CertSource::Acme(_)) {
            for w in ctx
                .certs
                .iter()
                .flat_map(|c| c.warnings(now, self.expiry_warning))
            {
                tracing::warn!("{w}");
            }
        }
        self.metrics
            .set_certificates(&fe.name, cert_records(fe, ctx));
        ctx.sessions
            .reconfigure(fe.session_cache_size, fe.session_ticket_lifetime);
        self.sessions[i].clone_from(&ctx.sessions);
        for (w, slot) in self.slots[i].iter().enumerate() {
            slot.store(ctx.worker_config(w));
        }
        self.stores[i].clone_from(&ctx.store);
        self.client_trust[i] = ctx.client_trust;
        self.ticketers[i].clone_from(&ctx.ticketer);
        self.current[i] = fe.clone();
    }
}

/// The certificate gauges' view of what a frontend serves.
fn cert_records(fe: &crate::config::Frontend, tls: &TlsContext) -> Vec<metrics::CertRecord> {
    tls.certs
        .iter()
        .map(|c| metrics::CertRecord {
            path: c.path.display().to_string(),
            subject: c.subject.clone(),
            not_after: c.not_after,
            managed: matches!(fe.certs, CertSource::Acme(_)),
            staple: c.staple.map(|v| (v.this_update, v.next_update)),
        })
        .collect()
}

/// Warns, twice a day, about certificates shuck does not renew that expire soon: a process that
/// runs for months sees no reload to warn at.
async fn watch_expiry(metrics: Arc<Metrics>, within: Duration) {
    const EVERY: Duration = Duration::from_secs(12 * 3600);
    loop {
        tokio::time::sleep(EVERY).await;
        for w in metrics.expiry_warnings(crate::clock::unix_now(), within) {
            tracing::warn!("{w}");
        }
    }
}

/// The service manager's status line: the connections open, every 5 s while it changes.
async fn report_status(limit: Arc<limits::ConnectionLimit>, listening: usize) {
    const EVERY: Duration = Duration::from_secs(5);
    let mut shown = None;
    loop {
        tokio::time::sleep(EVERY).await;
        let open = limit.active();
        if shown != Some(open) {
            notify::status(&format!(
                "{open} connections open; listening on {listening} addresses"
            ));
            shown = Some(open);
        }
    }
}

/// A stapled OCSP response is good until its nextUpdate; past it (a `.ocsp` file nobody renewed,
/// a responder down for long), the frontend is loaded again, which checks it and drops it.
async fn drop_lapsed_staples(metrics: Arc<Metrics>, reload: UnboundedSender<String>) {
    const EVERY: Duration = Duration::from_secs(30);
    loop {
        tokio::time::sleep(EVERY).await;
        for frontend in metrics.lapsed_staples(crate::clock::unix_now()) {
            if reload.send(frontend).is_err() {
                return;
            }
        }
    }
}

/// Per worker: (frontend index, listening socket).
type PerWorker = Vec<Vec<(usize, std::net::TcpListener)>>;

/// Per worker, the listening sockets (frontend index, socket); and each address bound. Sockets an
/// old process handed over are taken first; each is also added to `handover`.
#[allow(clippy::type_complexity)] // Reason: the shapes are WorkerSpec's and Server's own.
fn bind_frontends(
    config: &Config,
    inherited: &mut Inherited,
    handover: &mut Handover,
) -> Result<(
    Vec<Vec<(usize, std::net::TcpListener)>>,
    Vec<(String, SocketAddr)>,
)> {
    let mut listeners: Vec<Vec<(usize, std::net::TcpListener)>> =
        (0..config.workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::new();
    let handover_err = |source| Error::Worker { worker: 0, source };
    for (fi, fe) in config.frontends.iter().enumerate() {
        for (li, &want) in fe.listen.iter().enumerate() {
            let bind = |addr| {
                listener::bind(addr, fe.backlog).map_err(|source| Error::Bind {
                    addr,
                    frontend: fe.name.clone(),
                    source,
                })
            };
            // Sockets an old process handed over (an upgrade) come first: they hold the
            // connections waiting to be accepted.
            let mut sockets = inherited.take(&fe.name, li, want);
            if sockets.is_empty() {
                if want.port() != 0 && listener::in_use(want) {
                    tracing::warn!(frontend = %fe.name, addr = %want, "another process already listens on this address; the kernel will split new connections between it and this shuck (expected only while taking over from an old instance)");
                }
                // The first socket fixes the port (port 0 picks a free one); the other
                // workers bind the same address with SO_REUSEPORT.
                sockets.push(bind(want)?);
            }
            let addr = sockets[0].local_addr().map_err(|source| Error::Bind {
                addr: want,
                frontend: fe.name.clone(),
                source,
            })?;
            while sockets.len() < config.workers {
                sockets.push(bind(addr)?);
            }
            for (k, socket) in sockets.into_iter().enumerate() {
                handover.add(&fe.name, li, &socket).map_err(handover_err)?;
                listeners[k % config.workers].push((fi, socket));
            }
            bound.push((fe.name.clone(), addr));
        }
    }
    Ok((listeners, bound))
}

/// The metrics endpoint's socket: handed over by an old process, or bound.
fn bind_metrics(
    metrics_listen: Option<SocketAddr>,
    inherited: &mut Inherited,
    handover: &mut Handover,
) -> Result<Option<std::net::TcpListener>> {
    let handover_err = |source| Error::Worker { worker: 0, source };
    // A plain socket, without SO_REUSEPORT: nothing else may share the metrics port.
    let metrics_listener = match metrics_listen {
        None => None,
        Some(addr) => {
            let inherited = inherited.take(METRICS, usize::MAX, addr).into_iter().next();
            let l = match inherited {
                Some(l) => l,
                None => std::net::TcpListener::bind(addr)
                    .and_then(|l| l.set_nonblocking(true).map(|()| l))
                    .map_err(|source| Error::Bind {
                        addr,
                        frontend: "metrics".into(),
                        source,
                    })?,
            };
            handover
                .add(METRICS, usize::MAX, &l)
                .map_err(handover_err)?;
            Some(l)
        }
    };
    Ok(metrics_listener)
}

/// Whether a frontend's settings outside TLS differ (what the workers' `FrontendRt` is built
/// from). Backends by name as written: a host name whose DNS answer moved is not a change.
fn runtime_settings_differ(old: &crate::config::Frontend, new: &crate::config::Frontend) -> bool {
    use crate::config::Backend;
    let backends = |b: &Backend| match b {
        Backend::Demo => Vec::new(),
        Backend::Tcp(v) => v.iter().map(|b| b.name.clone()).collect(),
    };
    backends(&old.backend) != backends(&new.backend)
        || old.backend_policy != new.backend_policy
        || (
            old.handshake_timeout,
            old.idle_timeout,
            old.connect_timeout,
            old.backend_cooldown,
        ) != (
            new.handshake_timeout,
            new.idle_timeout,
            new.connect_timeout,
            new.backend_cooldown,
        )
        || (old.proxy_protocol, &old.proxy_tlvs) != (new.proxy_protocol, &new.proxy_tlvs)
        || old.accept_proxy != new.accept_proxy
}

/// The handover name of the metrics endpoint's socket (no frontend has listen index `usize::MAX`).
const METRICS: &str = "metrics";

/// A frontend's ACME settings, if it uses ACME.
fn acme_settings(fe: &crate::config::Frontend) -> Option<&crate::config::Acme> {
    match &fe.certs {
        CertSource::Acme(a) => Some(a),
        _ => None,
    }
}

/// Global keys whose new value differs from the running one (none of them can be reloaded).
fn global_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut v = Vec::new();
    let mut check = |changed: bool, key: &'static str| {
        if changed {
            v.push(key);
        }
    };
    check(old.workers != new.workers, "workers");
    check(old.pin_cpus != new.pin_cpus, "pin_cpus");
    check(
        old.max_connections != new.max_connections,
        "max_connections",
    );
    check(old.shutdown_grace != new.shutdown_grace, "shutdown_grace");
    check(old.log_format != new.log_format, "log_format");
    check(
        old.log_connections != new.log_connections,
        "log_connections",
    );
    check(
        old.connection_log_format != new.connection_log_format,
        "connection_log_format",
    );
    check(old.metrics_listen != new.metrics_listen, "metrics_listen");
    check(old.state_dir != new.state_dir, "state_dir");
    v
}

/// The first setting outside TLS that differs, if any.
fn needs_restart(
    old: &crate::config::Frontend,
    new: &crate::config::Frontend,
) -> Option<&'static str> {
    // The sockets are bound with it; everything else of a frontend is applied on reload.
    (old.backlog != new.backlog).then_some("backlog")
}

#[cfg(test)]
mod tests {
    use super::needs_restart;
    use crate::config::{Frontend, Origin, RawConfig};

    fn frontend(extra: &str) -> Frontend {
        let text = format!("[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\n{extra}");
        let mut cfg = RawConfig::parse(&text, &Origin::CommandLine)
            .and_then(|raw| raw.validate(Origin::CommandLine, None))
            .unwrap();
        cfg.frontends.remove(0)
    }

    #[test]
    fn only_the_backlog_needs_a_restart() {
        let old = frontend("");
        for applied in [
            "backend_policy = \"least_connections\"\n",
            "idle_timeout = \"1s\"\n",
            "proxy_protocol = \"v2\"\n",
        ] {
            assert_eq!(needs_restart(&old, &frontend(applied)), None, "{applied}");
        }
        assert_eq!(
            needs_restart(&old, &frontend("backlog = 10\n")),
            Some("backlog")
        );
    }
}
