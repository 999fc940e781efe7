//! On-demand certificates (a frontend's `on_demand`): a handshake for a name no certificate
//! covers asks, through [`OnDemandCerts::wanted`], the frontend's manager task on the main
//! runtime; the manager asks the operator's endpoint whether the name may have one (the answer
//! cached, a refusal for a minute), holds the name to `max_per_minute` and
//! `max_certificates`, and starts the name's own renewal job (`renewal::run`: alone, or with
//! the fleet's lease, so a fleet makes one order per name and every host loads the result). The
//! handshake waits for the certificate up to `hold`; the certificates issued are in a table the
//! resolver reads without a lock. Certificates stored by an earlier run are served again at
//! start; a renewal asks the endpoint first and a name no longer allowed is dropped.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::metrics::counter::Counter;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::ask::AskEndpoint;
use super::challenge::Challenges;
use super::fleet::{Fleet, FleetEvents};
use super::renewal::{self, Job};
use super::state::Stored;
use crate::config::{Acme, OnDemand};

/// How long an allowed name stays allowed without asking again (while it waits for its turn
/// under `max_per_minute`).
const ALLOWED_FOR: Duration = Duration::from_secs(300);
/// How long a refused name stays refused without asking again.
const REFUSED_FOR: Duration = Duration::from_secs(60);
/// How long the endpoint's silence or error refuses a name.
const ASK_FAILED_FOR: Duration = Duration::from_secs(10);
/// Handshakes waiting for the manager at once, per frontend; more fail at once.
const QUEUE: usize = 1024;
/// Questions to the endpoint at once; a new name beyond is refused without asking.
const MAX_ASKING: usize = 16;
/// Names remembered (asked, refused, allowed, ordered); past it, the ones whose verdict has
/// lapsed are forgotten, and while none has, a new name is refused without asking: a client
/// sending a new name with every hello cannot grow this table without bound.
const MAX_NAMES: usize = 10_000;

/// What a frontend's on-demand issuance counts (`shuck_on_demand_events_total`).
#[derive(Debug, Clone, Default)]
pub(crate) struct OnDemandEvents {
    pub allowed: Counter,
    pub refused: Counter,
    pub ask_failed: Counter,
    pub ordered: Counter,
    pub issued: Counter,
    pub order_failed: Counter,
    pub held_too_long: Counter,
    pub rate_limited: Counter,
    pub full: Counter,
    /// A new name refused without asking: [`MAX_ASKING`] questions out, or [`MAX_NAMES`]
    /// names remembered.
    pub busy: Counter,
}

/// A handshake's request for a name's certificate; `reply` is sent once it is served, dropped
/// when it will not be.
#[derive(Debug)]
pub(crate) struct Wanted {
    name: String,
    reply: oneshot::Sender<()>,
}

/// One frontend's on-demand certificates, by name, and the way to its manager.
#[derive(Debug)]
pub(crate) struct OnDemandCerts {
    table: ArcSwap<HashMap<String, Arc<CertifiedKey>>>,
    requests: mpsc::Sender<Wanted>,
    /// The manager's end, taken once when it starts.
    receiver: Mutex<Option<mpsc::Receiver<Wanted>>>,
    pub(crate) events: OnDemandEvents,
}

impl OnDemandCerts {
    pub(crate) fn new(events: OnDemandEvents) -> Arc<OnDemandCerts> {
        let (requests, receiver) = mpsc::channel(QUEUE);
        Arc::new(OnDemandCerts {
            table: ArcSwap::default(),
            requests,
            receiver: Mutex::new(Some(receiver)),
            events,
        })
    }

    /// The certificate issued for `name` (lower case), if any.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        self.table.load().get(name).cloned()
    }

    /// Asks for `name`'s certificate; true once it is served, false when it will not be (the
    /// endpoint refused, a limit was reached, the manager is gone or too busy).
    pub(crate) async fn wanted(&self, name: &str) -> bool {
        let (reply, served) = oneshot::channel();
        let want = Wanted {
            name: name.to_ascii_lowercase(),
            reply,
        };
        if self.requests.try_send(want).is_err() {
            return false;
        }
        served.await.is_ok()
    }

    fn insert(&self, name: &str, key: &Arc<CertifiedKey>) {
        self.table.rcu(|t| {
            let mut t = HashMap::clone(t);
            t.insert(name.to_string(), key.clone());
            t
        });
    }

    fn remove(&self, name: &str) {
        self.table.rcu(|t| {
            let mut t = HashMap::clone(t);
            t.remove(name);
            t
        });
    }

    fn len(&self) -> usize {
        self.table.load().len()
    }
}

/// What a frontend's manager works with.
#[derive(Debug, Clone)]
pub(crate) struct Manager {
    pub frontend: String,
    /// The frontend's ACME settings (its `on_demand` among them).
    pub acme: Acme,
    pub certs: Arc<OnDemandCerts>,
    pub fleet: Option<Fleet>,
    pub challenges: Arc<Challenges>,
    pub fleet_events: FleetEvents,
}

/// Where one name stands.
enum Name {
    /// The endpoint is being asked; these handshakes wait.
    Asking(Vec<oneshot::Sender<()>>),
    /// Allowed until then, not yet ordered (a limit was in the way).
    Allowed(Instant),
    /// Refused until then.
    Refused(Instant),
    /// Its renewal job runs; the handshakes waiting for its first certificate.
    Running(Vec<oneshot::Sender<()>>),
}

/// What the manager hears from the tasks it started.
enum Event {
    Asked(String, Result<bool, String>),
    /// A name's job stored (or loaded from the fleet) a new certificate.
    Renewed(String),
    /// A name's job ended: its order failed, or its renewal was no longer allowed.
    Ended(String),
}

/// Runs `m`'s frontend's on-demand issuance until the process ends.
pub(crate) async fn run(m: Manager) {
    let taken = m
        .certs
        .receiver
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    let Some(mut wants) = taken else {
        return;
    };
    let Some(settings) = m.acme.on_demand.clone() else {
        return;
    };
    let (events, mut heard) = mpsc::unbounded_channel();
    let mut state = State {
        names: HashMap::new(),
        started: VecDeque::new(),
        events,
        settings,
    };
    for name in load_stored(&m) {
        state.start_job(&m, &name);
    }
    loop {
        tokio::select! {
            Some(w) = wants.recv() => state.want(&m, w),
            Some(e) = heard.recv() => state.heard(&m, e),
            else => return,
        }
    }
}

struct State {
    names: HashMap<String, Name>,
    /// When the orders of the last minute started.
    started: VecDeque<Instant>,
    events: mpsc::UnboundedSender<Event>,
    settings: OnDemand,
}

impl State {
    fn want(&mut self, m: &Manager, w: Wanted) {
        if m.certs.get(&w.name).is_some() {
            let _ = w.reply.send(());
            return;
        }
        let now = Instant::now();
        match self.names.get_mut(&w.name) {
            Some(Name::Asking(waiters) | Name::Running(waiters)) => {
                waiters.retain(|s| !s.is_closed());
                waiters.push(w.reply);
            }
            Some(Name::Refused(until)) if *until > now => {}
            Some(Name::Allowed(until)) if *until > now => {
                let name = w.name.clone();
                self.names
                    .insert(name.clone(), Name::Running(vec![w.reply]));
                self.order(m, &name);
            }
            _ => {
                if !self.room_to_ask(now) {
                    m.certs.events.busy.inc();
                    return; // the reply dropped: the handshake goes on, refused
                }
                let ask = self.settings.ask.clone();
                let (name, events) = (w.name.clone(), self.events.clone());
                self.names.insert(w.name, Name::Asking(vec![w.reply]));
                tokio::spawn(async move {
                    let verdict = AskEndpoint(ask).allows(&name).await;
                    let _ = events.send(Event::Asked(name, verdict));
                });
            }
        }
    }

    /// Whether a new name may be asked about now: fewer than [`MAX_ASKING`] questions out and
    /// room among the names remembered (made by forgetting lapsed verdicts when full).
    fn room_to_ask(&mut self, now: Instant) -> bool {
        let asking = self
            .names
            .values()
            .filter(|n| matches!(n, Name::Asking(_)))
            .count();
        if asking >= MAX_ASKING {
            return false;
        }
        if self.names.len() >= MAX_NAMES {
            self.names.retain(|_, n| match n {
                Name::Refused(until) | Name::Allowed(until) => *until > now,
                Name::Asking(_) | Name::Running(_) => true,
            });
        }
        self.names.len() < MAX_NAMES
    }

    fn heard(&mut self, m: &Manager, e: Event) {
        match e {
            Event::Asked(name, verdict) => self.asked(m, &name, verdict),
            Event::Renewed(name) => self.renewed(m, &name),
            Event::Ended(name) => {
                // Served no more: its order failed (tried again after a minute), or the
                // endpoint no longer allows it.
                let had = m.certs.get(&name).is_some();
                m.certs.remove(&name);
                if had {
                    // Not loaded again at the next start either.
                    let bundle = m.acme.for_name(&m.frontend, &name).bundle;
                    if let Err(e) = std::fs::remove_file(&bundle) {
                        tracing::warn!(frontend = %m.frontend, path = %bundle.display(), error = %e, "cannot remove an on-demand certificate no longer allowed");
                    }
                } else {
                    m.certs.events.order_failed.inc();
                }
                self.names
                    .insert(name, Name::Refused(Instant::now() + REFUSED_FOR));
            }
        }
    }

    fn asked(&mut self, m: &Manager, name: &str, verdict: Result<bool, String>) {
        let now = Instant::now();
        let Some(Name::Asking(waiters)) = self.names.remove(name) else {
            return;
        };
        match verdict {
            Ok(true) => {
                m.certs.events.allowed.inc();
                self.names.insert(name.to_string(), Name::Running(waiters));
                self.order(m, name);
            }
            Ok(false) => {
                m.certs.events.refused.inc();
                self.names
                    .insert(name.to_string(), Name::Refused(now + REFUSED_FOR));
            }
            Err(e) => {
                m.certs.events.ask_failed.inc();
                if crate::obs::log_limit::allow() {
                    tracing::warn!(frontend = %m.frontend, name, error = %e, "on-demand ask endpoint did not answer; the name is refused for now");
                }
                self.names
                    .insert(name.to_string(), Name::Refused(now + ASK_FAILED_FOR));
            }
        }
    }

    /// Starts `name`'s order when the limits let it (its waiters fail otherwise, and it stays
    /// allowed for a while).
    fn order(&mut self, m: &Manager, name: &str) {
        let now = Instant::now();
        while self
            .started
            .front()
            .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(60))
        {
            self.started.pop_front();
        }
        let running = self
            .names
            .values()
            .filter(|n| matches!(n, Name::Running(_)))
            .count();
        let refused = if self.started.len() >= self.settings.max_per_minute as usize {
            m.certs.events.rate_limited.inc();
            Some("max_per_minute")
        } else if running.max(m.certs.len()) > self.settings.max_certificates {
            m.certs.events.full.inc();
            Some("max_certificates")
        } else {
            None
        };
        if let Some(limit) = refused {
            if crate::obs::log_limit::allow() {
                tracing::warn!(frontend = %m.frontend, name, limit, "on-demand certificate not ordered: the frontend's limit is reached");
            }
            self.names
                .insert(name.to_string(), Name::Allowed(now + ALLOWED_FOR));
            return;
        }
        self.started.push_back(now);
        m.certs.events.ordered.inc();
        self.start_job(m, name);
    }

    /// Starts `name`'s renewal job (ordering it when there is no certificate yet).
    fn start_job(&mut self, m: &Manager, name: &str) {
        if !self.names.contains_key(name) {
            self.names
                .insert(name.to_string(), Name::Running(Vec::new()));
        }
        let job = Job {
            frontend: m.frontend.clone(),
            acme: m.acme.for_name(&m.frontend, name),
            fleet: m.fleet.clone(),
            challenges: m.challenges.clone(),
            events: m.fleet_events.clone(),
            ask: Some(AskEndpoint(self.settings.ask.clone())),
        };
        let (renewed, mut said) = mpsc::unbounded_channel();
        let (events, name) = (self.events.clone(), name.to_string());
        tokio::spawn(async move {
            let forward = {
                let (events, name) = (events.clone(), name.clone());
                async move {
                    while said.recv().await.is_some() {
                        let _ = events.send(Event::Renewed(name.clone()));
                    }
                }
            };
            tokio::select! {
                () = renewal::run(job, renewed) => {}
                () = forward => {}
            }
            let _ = events.send(Event::Ended(name));
        });
    }

    /// Loads `name`'s new certificate and serves it; its waiting handshakes go on.
    fn renewed(&mut self, m: &Manager, name: &str) {
        let bundle = m.acme.for_name(&m.frontend, name).bundle;
        match certified(&bundle) {
            Ok(key) => {
                m.certs.insert(name, &key);
                m.certs.events.issued.inc();
                tracing::info!(frontend = %m.frontend, name, "on-demand certificate served");
            }
            Err(e) => {
                tracing::warn!(frontend = %m.frontend, name, error = %e, "on-demand certificate stored but unusable");
                return;
            }
        }
        if let Some(Name::Running(waiters)) = self.names.get_mut(name) {
            for w in waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }
}

/// The names whose certificates an earlier run stored (at most `max_certificates`), loaded
/// into the table.
fn load_stored(m: &Manager) -> Vec<String> {
    let dir = m
        .acme
        .for_name(&m.frontend, "x")
        .bundle
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let max = m.acme.on_demand.as_ref().map_or(0, |o| o.max_certificates);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        if names.len() >= max || path.extension().is_none_or(|x| x != "pem") {
            continue;
        }
        let Some(stored) = Stored::read(&path) else {
            continue;
        };
        let Some(name) = stored.names.first().cloned() else {
            continue;
        };
        if m.acme.for_name(&m.frontend, &name).bundle != path {
            continue; // not one of ours (renamed by hand)
        }
        match certified(&path) {
            Ok(key) => {
                m.certs.insert(&name, &key);
                names.push(name);
            }
            Err(e) => {
                tracing::warn!(frontend = %m.frontend, path = %path.display(), error = %e, "stored on-demand certificate unusable; ordered again when asked for");
            }
        }
    }
    if !names.is_empty() {
        tracing::info!(frontend = %m.frontend, certificates = names.len(), "serving the on-demand certificates stored before");
    }
    names
}

/// A bundle (chain, then key) as rustls serves it.
fn certified(bundle: &Path) -> Result<Arc<CertifiedKey>, String> {
    let pem = crate::sys::files::read(bundle).map_err(|e| format!("{}: {e}", bundle.display()))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", bundle.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| format!("{}: no key: {e}", bundle.display()))?;
    let signing = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| format!("{}: {e}", bundle.display()))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}
