//! Reload (SIGHUP) and certificate refresh while running. A reload applies a new configuration
//! to the frontends in service, matched by name: certificates and TLS settings, backends,
//! timeouts, PROXY settings; frontends added and removed; listen addresses added (bound before
//! anything changes) and removed (no longer accepted on; their connections carry on).
//! Everything is loaded, checked and bound before anything is swapped, so a bad certificate or
//! a busy address leaves the old configuration serving. What needs a restart (or an upgrade) is
//! left as it runs, with a note saying so.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;

use crate::certs::acme::on_demand::OnDemandCerts;
use crate::config::{global, Certificates, Config, Frontend, OcspMode, OnChange, Section};
use crate::error::{Error, Result};
use crate::metrics::{self, Metrics};
use crate::server::bindings::{Bindings, FrontendSlots};
use crate::server::running;
use crate::sessions::cache::SessionCache;
use crate::sessions::tickets::Ticketer;
use crate::store::{SharedStore, StoreCounters};
use crate::sys::limits::{self, ConnectionLimit};
use crate::sys::upgrade::Inherited;
use crate::tls::{Carried, TlsContext};
use crate::worker::Engine;

/// One frontend in service and what a reload carries over for it.
#[derive(Clone)]
pub(crate) struct Live {
    /// The settings in force: what a refresh loads again.
    pub(crate) cfg: Frontend,
    /// The ticket keys in use, kept across reloads so tickets issued before a reload still
    /// resume (random keys; keys from files are read again).
    ticketer: Option<Arc<Ticketer>>,
    /// The session cache, kept so a reload does not cost every cached session a full handshake.
    sessions: Arc<SessionCache>,
    /// The remote session store (kept while its settings are unchanged) and the counters a new
    /// one counts into.
    store: Option<Arc<SharedStore>>,
    store_counters: StoreCounters,
    /// The digest of the client-certificate trust in force. Resumption does not check a client
    /// certificate again, so when this changes (a new CRL, a new CA, optional made required) the
    /// old tickets and cached sessions must go with it.
    client_trust: Option<[u8; 32]>,
    /// With `on_demand`: the certificates issued at handshakes (whose manager started with the
    /// process and feeds this table whatever a reload loads).
    on_demand: Option<Arc<OnDemandCerts>>,
    /// The settings slot and each worker's TLS slot.
    pub(crate) slots: FrontendSlots,
}

/// The slots of the frontend called `name`, for `Bindings::commit`.
pub(crate) fn slots_named(frontends: &[Live], name: &str) -> Option<FrontendSlots> {
    frontends
        .iter()
        .find(|l| l.cfg.name == name)
        .map(|l| l.slots.clone())
}

/// One line per file or directory of `ctx`'s certificates that others than the owner may write
/// (at start and at each load, which the operator or a renewal causes, never a client).
fn warn_writable(fe: &Frontend, ctx: &TlsContext) {
    let mut seen = std::collections::BTreeSet::new();
    for w in ctx.certs.iter().flat_map(|c| &c.writable_by_others) {
        if seen.insert(w) {
            tracing::warn!(frontend = %fe.name, "{w}: whoever may write it chooses what is served; make it writable by its owner only");
        }
    }
}

impl Live {
    /// A frontend put in service with `ctx`, one TLS slot per worker.
    pub(crate) fn start(
        fe: &Frontend,
        ctx: &TlsContext,
        workers: usize,
        metrics: &Metrics,
    ) -> Live {
        warn_writable(fe, ctx);
        metrics.set_certificates(&fe.name, cert_records(fe, ctx));
        Live {
            cfg: fe.clone(),
            ticketer: ctx.ticketer.clone(),
            sessions: ctx.sessions.clone(),
            store: ctx.store.clone(),
            store_counters: metrics.store_counters(&fe.name),
            client_trust: ctx.client_trust,
            on_demand: ctx.on_demand.clone(),
            slots: FrontendSlots {
                settings: Arc::new(ArcSwap::from_pointee(fe.clone())),
                tls: (0..workers)
                    .map(|w| Arc::new(ArcSwap::new(ctx.worker_config(w))))
                    .collect(),
            },
        }
    }

    /// Loads `fe` keeping what this frontend carries (ticket keys, session cache, store) unless
    /// the client-certificate trust changed or `fresh` is asked: then a new ticket key and an
    /// empty session cache, since sessions resumed under the old trust would skip the new
    /// checks (a revoked certificate would keep working until its ticket expired). The old cache
    /// stays with the old configuration, whose handshakes still running may fill it. Also says
    /// whether the carried state was dropped.
    fn load(&self, fe: &Frontend, fresh: bool) -> Result<(TlsContext, bool)> {
        let carried = |ticketer, sessions| Carried {
            ticketer,
            sessions: Some(sessions),
            store: self.store.clone(),
            store_counters: self.store_counters.clone(),
            on_demand: self.on_demand.clone(),
        };
        if !fresh {
            let keep = self.ticketer.clone().filter(|_| fe.resumption.tickets);
            let ctx = TlsContext::load_keeping(fe, carried(keep, self.sessions.clone()))?;
            if ctx.client_trust == self.client_trust {
                return Ok((ctx, false));
            }
        }
        let ctx = TlsContext::load_keeping(fe, carried(None, self.sessions.fresh()))?;
        Ok((ctx, true))
    }

    /// Puts a loaded configuration into every worker's slot and keeps what the next load carries.
    fn install(
        &mut self,
        fe: &Frontend,
        ctx: &TlsContext,
        metrics: &Metrics,
        warn_within: Duration,
    ) {
        let now = crate::sys::clock::unix_now();
        if fe.acme().is_none() {
            for w in ctx.certs.iter().flat_map(|c| c.warnings(now, warn_within)) {
                tracing::warn!("{w}");
            }
        }
        warn_writable(fe, ctx);
        metrics.set_certificates(&fe.name, cert_records(fe, ctx));
        ctx.sessions
            .reconfigure(fe.resumption.cache_size, fe.resumption.ticket_lifetime);
        self.sessions.clone_from(&ctx.sessions);
        for (w, slot) in self.slots.tls.iter().enumerate() {
            slot.store(ctx.worker_config(w));
        }
        self.store.clone_from(&ctx.store);
        self.client_trust = ctx.client_trust;
        self.on_demand.clone_from(&ctx.on_demand);
        if let Some(t) = ctx.ticketer.as_ref().filter(|t| !t.is_from_files()) {
            t.set_lifetime(fe.resumption.ticket_lifetime.as_secs());
        }
        self.ticketer.clone_from(&ctx.ticketer);
        // Every setting reaches new connections from now on: the workers read this slot when
        // they accept. They keep their backend pools unless the frontend's `backend` section
        // changed.
        self.slots.settings.store(Arc::new(fe.clone()));
        self.cfg = fe.clone();
    }
}

/// A frontend's TLS before anything carries over: a new ticket key, an empty session cache.
pub(crate) fn load_new(fe: &Frontend, metrics: &Metrics) -> Result<TlsContext> {
    let sessions = SessionCache::new(
        fe.resumption.cache_size,
        fe.resumption.ticket_lifetime,
        metrics.session_counters(&fe.name),
    );
    TlsContext::load_keeping(
        fe,
        Carried {
            ticketer: None,
            sessions: Some(sessions),
            store: None,
            store_counters: metrics.store_counters(&fe.name),
            on_demand: fe
                .acme()
                .and_then(|a| a.on_demand.as_ref())
                .map(|_| OnDemandCerts::new(metrics.on_demand_events(&fe.name))),
        },
    )
}

/// Decides, once per reload, whether it applies what it loaded or is abandoned: a reload past
/// its `reload_timeout`, or one a stop overtook, must not change what serves when its files or
/// names finally come. Loading may take long; applying takes no I/O and is not interrupted.
#[derive(Debug, Clone, Default)]
pub struct ApplyGate(Arc<std::sync::atomic::AtomicU8>);

const LOADING: u8 = 0;
const APPLYING: u8 = 1;
const ABANDONED: u8 = 2;

impl ApplyGate {
    /// Abandons the reload unless it is already applying; true when it was abandoned.
    pub fn abandon(&self) -> bool {
        use std::sync::atomic::Ordering;
        matches!(
            self.0
                .compare_exchange(LOADING, ABANDONED, Ordering::AcqRel, Ordering::Acquire),
            Ok(_) | Err(ABANDONED)
        )
    }

    /// Whether the reload may apply (then it can no longer be abandoned).
    fn enter_apply(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.0
            .compare_exchange(LOADING, APPLYING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// The limits on the signal loop's own work, which a reload changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessTimeouts {
    /// `reload_timeout`: a reload still loading after this long is abandoned.
    pub reload: Duration,
    /// `upgrade_confirm`: how long after an upgrade's handover the old process can take back.
    pub upgrade_confirm: Duration,
    /// `upgrade_timeout`: how long the new process of an upgrade may take to listen.
    pub upgrade: Duration,
}

impl ProcessTimeouts {
    pub fn of(c: &Config) -> ProcessTimeouts {
        ProcessTimeouts {
            reload: c.reload_timeout,
            upgrade_confirm: c.upgrade_confirm,
            upgrade: c.upgrade_timeout,
        }
    }
}

/// What a reload does with one frontend of the new configuration.
enum Next {
    /// Left as it runs (what changed needs a restart).
    Keep(usize),
    /// The running frontend `.0`, loaded with new settings.
    Reload(usize, Box<Frontend>, Box<TlsContext>),
    /// A frontend not running before.
    Add(Box<Frontend>, Box<TlsContext>),
}

/// `max_connections` as it applies now, and the open-files limit that caps it.
pub(crate) struct Capacity {
    pub(crate) limit: Arc<ConnectionLimit>,
    pub(crate) fd_limit: u64,
}

/// A handle to apply a new configuration while running (SIGHUP) or load one frontend's
/// certificates again (a renewal).
pub struct Reloader {
    /// The configuration shuck started with, with the global keys a reload applies as last
    /// applied: what the global keys compare to.
    started: Config,
    frontends: Vec<Live>,
    workers: usize,
    bindings: Arc<Mutex<Bindings>>,
    metrics: Arc<Metrics>,
    capacity: Capacity,
    /// What the workers share: the access log's settings, `shutdown_grace` and the expiry
    /// lead time a reload changes in place.
    engine: Arc<Engine>,
    /// Rewritten when the listening addresses change (`--ready-file`), with the metrics address.
    ready_file: Option<(PathBuf, Option<SocketAddr>)>,
    /// Whether the reload under way may still apply.
    gate: ApplyGate,
    /// The DNS followers and health checks: started and stopped to match what a reload
    /// installs.
    watch: crate::server::backend_watch::BackendWatch,
    /// The certificate files watched: told of what each reload installs.
    cert_watch: Option<crate::server::cert_watch::CertWatch>,
}

impl Reloader {
    pub(crate) fn new(
        started: Config,
        frontends: Vec<Live>,
        bindings: Arc<Mutex<Bindings>>,
        metrics: Arc<Metrics>,
        capacity: Capacity,
        engine: Arc<Engine>,
        watch: crate::server::backend_watch::BackendWatch,
    ) -> Reloader {
        Reloader {
            watch,
            cert_watch: None,
            capacity,
            engine,
            workers: started.workers,
            started,
            frontends,
            bindings,
            metrics,
            ready_file: None,
            gate: ApplyGate::default(),
        }
    }

    /// Passes the gate of the reload under way (abandoned: an error), and leaves a fresh one
    /// for the next.
    fn may_apply(&mut self) -> Result<()> {
        let open = std::mem::take(&mut self.gate).enter_apply();
        if open {
            Ok(())
        } else {
            Err(Error::ReloadAbandoned)
        }
    }

    /// A new gate for the next reload or refresh: whoever holds it can abandon that one.
    pub fn arm(&mut self) -> ApplyGate {
        self.gate = ApplyGate::default();
        self.gate.clone()
    }

    /// Tells `w` what each reload installs.
    #[must_use]
    pub(crate) fn with_cert_watch(mut self, w: crate::server::cert_watch::CertWatch) -> Reloader {
        self.cert_watch = Some(w);
        self
    }

    /// Rewrites `path` (one address per line, then `metrics`) after a reload that changes the
    /// listening addresses, as the start wrote it.
    #[must_use]
    pub fn with_ready_file(mut self, path: PathBuf, metrics: Option<SocketAddr>) -> Reloader {
        self.ready_file = Some((path, metrics));
        self
    }

    /// Applies `new`; returns notes about changes that were not applied.
    pub fn reload(&mut self, new: &Config) -> Result<Vec<String>> {
        let mut notes: Vec<String> = global::needing_a_restart(&self.started, new)
            .into_iter()
            .map(|key| format!("{key} changed; restart to apply it"))
            .collect();
        let mut next = Vec::new();
        for fe in &new.frontends {
            match self.frontends.iter().position(|l| l.cfg.name == fe.name) {
                Some(i) => next.push(self.plan_reload(i, fe, &mut notes)?),
                None if fe.runs_tasks() => notes.push(format!(
                    "frontend {:?} is new and uses ACME or OCSP fetching: restart (or upgrade) to add it",
                    fe.name
                )),
                None => next.push(Next::Add(
                    Box::new(fe.clone()),
                    Box::new(load_new(fe, &self.metrics)?),
                )),
            }
        }
        for (i, live) in self.frontends.iter().enumerate() {
            let kept = next
                .iter()
                .any(|n| matches!(n, Next::Keep(k) | Next::Reload(k, ..) if *k == i));
            if !kept && live.cfg.runs_tasks() {
                notes.push(format!("frontend {:?} is no longer configured but uses ACME or OCSP fetching: restart (or upgrade) to remove it", live.cfg.name));
                next.push(Next::Keep(i));
            }
        }
        let max_connections = self.max_connections_for(new, new.max_connections, &next)?;
        let before = self.addresses();
        let prepared = {
            let listed: Vec<&Frontend> = next.iter().map(|n| self.frontend_of(n)).collect();
            self.bindings()
                .prepare(&listed, &mut Inherited::default())?
        };
        {
            // Before the workers see the new frontends, and while the reload may still be
            // abandoned: new host names get their first addresses (names the configuration in
            // force has are kept until it is replaced).
            let listed: Vec<&Frontend> = next.iter().map(|n| self.frontend_of(n)).collect();
            self.watch
                .follow_names(&listed, &self.started.dns_lookups(), false);
        }
        if let Err(e) = self.may_apply() {
            // Given up: the names only the unapplied configuration had are followed no more.
            let installed: Vec<&Frontend> = self.frontends.iter().map(|l| &l.cfg).collect();
            self.watch
                .follow_names(&installed, &self.started.dns_lookups(), true);
            return Err(e);
        }
        // Before `apply`: reloaded certificates are warned about with the new lead time.
        self.started.certificate_expiry_warning = new.certificate_expiry_warning;
        self.apply(next);
        let listed: Vec<&Frontend> = self.frontends.iter().map(|l| &l.cfg).collect();
        self.bindings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .commit(prepared, &listed, |name| slots_named(&self.frontends, name));
        if self.addresses() != before {
            self.rewrite_ready_file();
        }
        self.metrics.set_listeners(&self.addresses());
        self.apply_globals(new, max_connections);
        {
            let installed: Vec<&Frontend> = self.frontends.iter().map(|l| &l.cfg).collect();
            // No wait here: every name has been looked up (unless `resolvers` changed).
            self.watch
                .follow_names(&installed, &new.dns_lookups(), true);
            self.watch.check(&installed);
            if let Some(w) = &self.cert_watch {
                w.update(new, installed.iter().copied());
            }
        }
        let mut now = self.started.clone();
        now.log_level.clone_from(&new.log_level);
        now.frontends = self.frontends.iter().map(|l| l.cfg.clone()).collect();
        running::record(&now);
        for k in self.engine.publish(&now) {
            self.metrics
                .forget_backend_admin_state(&k.frontend, &k.route, &k.backend);
        }
        Ok(notes)
    }

    /// The global keys a reload applies: `max_connections` (`limit`, as the descriptors serve
    /// it) and those the workers read from the `Engine`; `started` then says what runs, for `shuck
    /// check` and the next reload.
    fn apply_globals(&mut self, new: &Config, max_connections: usize) {
        let was = self.capacity.limit.set_max(max_connections);
        if was != max_connections {
            tracing::info!(was, now = max_connections, "max_connections changed");
        }
        self.engine.apply(new);
        self.metrics.set_per_worker(new.metrics_per_worker);
        self.metrics.set_connection_limit(max_connections);
        let s = &mut self.started;
        s.max_connections = new.max_connections;
        s.log_connections = new.log_connections;
        s.connection_log_format
            .clone_from(&new.connection_log_format);
        s.shutdown_grace = new.shutdown_grace;
        s.reload_timeout = new.reload_timeout;
        s.upgrade_confirm = new.upgrade_confirm;
        s.upgrade_timeout = new.upgrade_timeout;
        s.resolvers.clone_from(&new.resolvers);
        s.dns_allow_special_addresses = new.dns_allow_special_addresses;
        s.overload_threshold = new.overload_threshold;
        s.watch_certificates = new.watch_certificates;
        s.metrics_per_worker = new.metrics_per_worker;
        // Each frontend's certificates carry a copy, loaded with them.
        s.pkcs11.clone_from(&new.pkcs11);
    }

    /// The settings in force as new connections get them, rendered as `running.toml` renders
    /// them: the global keys as applied, and each frontend as its workers read it when they
    /// accept (the settings slot), not as the record of the last reload says. Also
    /// `log_connections`, which `running.toml` leaves out (a flag may set it) but a reload
    /// applies.
    pub fn in_force(&self) -> std::collections::BTreeMap<String, toml::Value> {
        let mut config = self.started.clone();
        config.frontends = self
            .frontends
            .iter()
            .map(|l| Frontend::clone(&l.slots.settings.load()))
            .collect();
        let mut settings = running::settings(&config);
        settings.insert(
            "log_connections".into(),
            toml::Value::String(self.started.log_connections.to_string()),
        );
        settings
    }

    /// `reload_timeout` and `upgrade_confirm` as last applied: the signal loop reads them
    /// between reloads.
    pub fn process_timeouts(&self) -> ProcessTimeouts {
        ProcessTimeouts::of(&self.started)
    }

    /// `configured` as the descriptors serve it with the addresses listened on after the reload
    /// (each keeps descriptors back); an error, before anything is bound, if they leave no room.
    fn max_connections_for(&self, new: &Config, configured: usize, next: &[Next]) -> Result<usize> {
        let addresses = next
            .iter()
            .map(|n| self.frontend_of(n).listen.addrs.len())
            .sum();
        let others = crate::server::fd_budget::other_sockets(new);
        let reserved = limits::reserved_fds(self.workers, addresses, others);
        limits::effective_max_connections(configured, self.capacity.fd_limit, reserved)
    }

    /// What becomes of running frontend `i` given its new settings `fe`.
    fn plan_reload(&self, i: usize, fe: &Frontend, notes: &mut Vec<String>) -> Result<Next> {
        let old = &self.frontends[i].cfg;
        // Unnamed frontends are named by position: with other addresses this may be another
        // frontend, which must not resume the sessions of the one that stood there; and when
        // either has tasks of its own, keeping one as it runs would serve one site's settings in
        // the other's place.
        let other = !fe.named && old.listen.addrs != fe.listen.addrs;
        if other && (old.runs_tasks() || fe.runs_tasks()) {
            return Err(Error::Reload(format!(
                "the unnamed frontend {:?} changed its addresses and uses ACME or OCSP fetching (before or now): give the frontends names so a reload can tell them apart",
                fe.name
            )));
        }
        let changes = old.changes(fe);
        let kept_whole = changes.iter().find_map(|c| match c.on_change {
            OnChange::RestartFrontend(why) => Some((c.key, why)),
            _ => None,
        });
        if let Some((key, why)) = kept_whole {
            notes.push(format!(
                "frontend {:?}: {key} changed; not reloaded, restart to apply it ({why})",
                fe.name
            ));
            return Ok(Next::Keep(i));
        }
        for c in &changes {
            if let OnChange::Restart(why) = c.on_change {
                notes.push(format!(
                    "frontend {:?}: {} changed; restart to apply it ({why})",
                    fe.name, c.key
                ));
            }
        }
        // The OCSP fetch tasks were started for the files shuck started with.
        let certs_changed = changes.iter().any(|c| c.key == Certificates::KEY);
        if old.ocsp == OcspMode::Fetch && certs_changed {
            notes.push(format!(
                "frontend {:?}: certificates changed; staples for files added are fetched from the next restart (the fetch tasks follow the files shuck started with)",
                fe.name
            ));
        }
        let fe = old.keeping_what_needs_a_restart(fe.clone());
        let (ctx, dropped) = self.frontends[i].load(&fe, other)?;
        if dropped && !other {
            notes.push(format!(
                "frontend {:?}: client certificate trust changed; sessions and tickets issued before were invalidated",
                fe.name
            ));
        }
        Ok(Next::Reload(i, Box::new(fe), Box::new(ctx)))
    }

    /// Puts the planned frontends in service, in the new configuration's order; the others
    /// are gone (their certificate gauges with them).
    fn apply(&mut self, next: Vec<Next>) {
        let mut old: Vec<Option<Live>> = std::mem::take(&mut self.frontends)
            .into_iter()
            .map(Some)
            .collect();
        for n in next {
            let live = match n {
                Next::Keep(i) => old[i].take(),
                Next::Reload(i, fe, ctx) => old[i].take().map(|mut l| {
                    l.install(
                        &fe,
                        &ctx,
                        &self.metrics,
                        self.started.certificate_expiry_warning,
                    );
                    l
                }),
                Next::Add(fe, ctx) => {
                    tracing::info!(frontend = %fe.name, "frontend added");
                    Some(Live::start(&fe, &ctx, self.workers, &self.metrics))
                }
            };
            self.frontends.extend(live);
        }
        for gone in old.into_iter().flatten() {
            tracing::info!(frontend = %gone.cfg.name, "frontend removed; its connections carry on");
            self.metrics.set_certificates(&gone.cfg.name, Vec::new());
        }
        let names: Vec<&str> = self.frontends.iter().map(|l| l.cfg.name.as_str()).collect();
        self.engine.gates.keep_only(&names);
    }

    fn frontend_of<'a>(&'a self, n: &'a Next) -> &'a Frontend {
        match n {
            Next::Keep(i) => &self.frontends[*i].cfg,
            Next::Reload(_, fe, _) | Next::Add(fe, _) => fe,
        }
    }

    fn bindings(&self) -> std::sync::MutexGuard<'_, Bindings> {
        self.bindings.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn addresses(&self) -> Vec<(String, SocketAddr)> {
        self.bindings().addresses()
    }

    fn rewrite_ready_file(&self) {
        let Some((path, metrics)) = &self.ready_file else {
            return;
        };
        let mut lines: Vec<SocketAddr> = self.addresses().into_iter().map(|(_, a)| a).collect();
        lines.extend(metrics);
        if let Err(e) = crate::server::bindings::write_ready_file(path, &lines) {
            tracing::warn!(error = %e, "cannot rewrite the ready file");
        }
    }

    /// Loads frontend `name`'s certificates again with the settings in force, for that frontend
    /// alone: an ACME renewal stored a new certificate. The same checks and swap as a reload.
    pub fn refresh(&mut self, name: &str) -> Result<()> {
        let Some(i) = self.frontends.iter().position(|l| l.cfg.name == name) else {
            return Ok(());
        };
        let fe = self.frontends[i].cfg.clone();
        let (ctx, trust_changed) = self.frontends[i].load(&fe, false)?;
        self.may_apply()?;
        let live = &mut self.frontends[i];
        if trust_changed {
            tracing::warn!(frontend = %fe.name, "client certificate trust changed on disk; sessions and tickets issued before were invalidated");
        }
        live.install(
            &fe,
            &ctx,
            &self.metrics,
            self.started.certificate_expiry_warning,
        );
        Ok(())
    }
}

/// The certificate gauges' view of what a frontend serves.
pub(crate) fn cert_records(fe: &Frontend, tls: &TlsContext) -> Vec<metrics::CertRecord> {
    tls.certs
        .iter()
        .map(|c| metrics::CertRecord {
            path: c.path.display().to_string(),
            subject: c.subject.clone(),
            not_after: c.not_after,
            managed: fe.acme().is_some(),
            staple: c.staple.map(|v| (v.this_update, v.next_update)),
            names: c.names.clone(),
        })
        .collect()
}
