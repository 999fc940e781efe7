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
/// Verdicts remembered (refusals, and names allowed but not yet ordered).
const MAX_VERDICTS: usize = 10_000;
/// The longest name asked about: its file name (`<name>.pem`) must fit in 255 bytes.
const MAX_NAME: usize = 240;
/// The longest a name whose orders keep failing is refused.
const MAX_BACK_OFF: Duration = Duration::from_secs(3600);
/// How far apart the jobs of the names stored by an earlier run start, the certificates that
/// end first first: each asks the CA for its renewal window (ARI) and, in a fleet, reads the
/// store as it starts, and a frontend may have thousands of such names (10 a second: a thousand
/// names' last job starts 100 s after the first; every stored certificate is served from the
/// start meanwhile).
const STORED_JOBS_APART: Duration = Duration::from_millis(100);
/// ... closer together when there are so many that the last would start later than this.
const STORED_JOBS_WITHIN: Duration = Duration::from_secs(600);

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
    /// A new name refused without asking: [`MAX_ASKING`] questions out, or a name too long.
    pub busy: Counter,
    /// A name some frontend's `acme.names` lists, refused without asking.
    pub reserved: Counter,
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
    /// The names frontends order by their `acme.names` (lower case, no final dot): never
    /// ordered on demand, where the two orders' challenges for one name would replace each
    /// other (the process answers a validator by name) and two certificates be kept.
    pub reserved: Arc<std::collections::HashSet<String>>,
}

/// A name being asked about or ordered.
enum Name {
    /// The endpoint is being asked; these handshakes wait.
    Asking(Vec<oneshot::Sender<()>>),
    /// Its renewal job runs; the handshakes waiting for its first certificate.
    Running(Vec<oneshot::Sender<()>>),
}

/// What was decided about a name, for a while.
#[derive(Clone, Copy)]
enum Verdict {
    /// Allowed until then, not yet ordered (a limit was in the way).
    Allowed(Instant),
    /// Refused until then; with the orders of it that failed in a row.
    Refused(Instant, u32),
}

/// What the manager hears from the tasks it started.
enum Event {
    Asked(String, Result<bool, String>),
    /// A name's job stored (or loaded from the fleet) a new certificate.
    Renewed(String),
    /// A name's job ended, and why.
    Ended(String, renewal::End),
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
        asking: 0,
        verdicts: quick_cache::unsync::Cache::new(MAX_VERDICTS),
        started: VecDeque::new(),
        events,
        ask: AskEndpoint::new(&settings.ask),
        settings,
    };
    // The files are read off the main runtime (there may be thousands).
    let loader = m.clone();
    let stored = tokio::task::spawn_blocking(move || load_stored(&loader))
        .await
        .unwrap_or_default();
    let count = u32::try_from(stored.len()).unwrap_or(u32::MAX).max(1);
    let apart = STORED_JOBS_APART.min(STORED_JOBS_WITHIN / count);
    for (i, name) in stored.iter().enumerate() {
        let after = apart.saturating_mul(u32::try_from(i).unwrap_or(u32::MAX));
        state.start_job(&m, name, after);
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
    /// The names asked about now, and those whose job runs (at most `max_certificates`).
    names: HashMap<String, Name>,
    /// How many of `names` are being asked about.
    asking: usize,
    /// Recent verdicts, the least used forgotten first past [`MAX_VERDICTS`]: a client sending
    /// a new name with every hello pushes out other verdicts (a refusal forgotten costs one
    /// question again; a failed name's back-off, one order again at most once per minute's
    /// `max_per_minute`).
    verdicts: quick_cache::unsync::Cache<String, Verdict>,
    /// When the orders of the last minute started.
    started: VecDeque<Instant>,
    events: mpsc::UnboundedSender<Event>,
    ask: AskEndpoint,
    settings: OnDemand,
}

impl State {
    fn want(&mut self, m: &Manager, w: Wanted) {
        if m.certs.get(&w.name).is_some() {
            let _ = w.reply.send(());
            return;
        }
        if m.reserved.contains(&w.name) {
            m.certs.events.reserved.inc();
            return;
        }
        if let Some(Name::Asking(waiters) | Name::Running(waiters)) = self.names.get_mut(&w.name) {
            waiters.retain(|s| !s.is_closed());
            waiters.push(w.reply);
            return;
        }
        let now = Instant::now();
        match self.verdicts.get(&w.name).copied() {
            Some(Verdict::Refused(until, _)) if until > now => {}
            Some(Verdict::Allowed(until)) if until > now => {
                let name = w.name.clone();
                self.names
                    .insert(name.clone(), Name::Running(vec![w.reply]));
                self.order(m, &name);
            }
            _ if self.asking >= MAX_ASKING || w.name.len() > MAX_NAME => {
                m.certs.events.busy.inc();
                // The reply dropped: the handshake goes on, refused.
            }
            _ => {
                let (ask, name, events) = (self.ask.clone(), w.name.clone(), self.events.clone());
                self.names.insert(w.name, Name::Asking(vec![w.reply]));
                self.asking += 1;
                tokio::spawn(async move {
                    let verdict = ask.allows(&name).await;
                    let _ = events.send(Event::Asked(name, verdict));
                });
            }
        }
    }

    fn heard(&mut self, m: &Manager, e: Event) {
        match e {
            Event::Asked(name, verdict) => self.asked(m, &name, verdict),
            Event::Renewed(name) => self.serve(m, &name, true),
            Event::Ended(name, end) => self.ended(m, &name, end),
        }
    }

    /// A name's job ended: the endpoint no longer allows it (not served, its file removed so
    /// the next start does not serve it either); its first order failed here (refused for a
    /// while, doubling with each failure in a row from a minute to an hour); or another host's
    /// did (refused a minute, as the fleet backs off).
    fn ended(&mut self, m: &Manager, name: &str, end: renewal::End) {
        self.names.remove(name);
        let had = m.certs.get(name).is_some();
        m.certs.remove(name);
        let now = Instant::now();
        let failures = match self.verdicts.get(name) {
            Some(Verdict::Refused(_, n)) => *n,
            _ => 0,
        };
        let (wait, failures) = match end {
            renewal::End::ServerGone => return,
            renewal::End::NotAllowed => {
                if had {
                    let bundle = m.acme.for_name(&m.frontend, name).bundle;
                    if let Err(e) = std::fs::remove_file(&bundle) {
                        tracing::warn!(frontend = %m.frontend, path = %bundle.display(), error = %e, "cannot remove an on-demand certificate no longer allowed");
                    }
                }
                (REFUSED_FOR, 0)
            }
            renewal::End::FleetBacksOff => (REFUSED_FOR, failures),
            renewal::End::OrderFailed => {
                m.certs.events.order_failed.inc();
                let failures = failures.saturating_add(1);
                let doubled = REFUSED_FOR.saturating_mul(1 << failures.min(7).saturating_sub(1));
                (doubled.min(MAX_BACK_OFF), failures)
            }
        };
        self.verdicts
            .insert(name.to_string(), Verdict::Refused(now + wait, failures));
    }

    fn asked(&mut self, m: &Manager, name: &str, verdict: Result<bool, String>) {
        let now = Instant::now();
        let Some(Name::Asking(waiters)) = self.names.remove(name) else {
            return;
        };
        self.asking = self.asking.saturating_sub(1);
        match verdict {
            Ok(true) => {
                m.certs.events.allowed.inc();
                self.names.insert(name.to_string(), Name::Running(waiters));
                self.order(m, name);
            }
            Ok(false) => {
                m.certs.events.refused.inc();
                self.verdicts
                    .insert(name.to_string(), Verdict::Refused(now + REFUSED_FOR, 0));
            }
            Err(e) => {
                m.certs.events.ask_failed.inc();
                if crate::obs::log_limit::allow() {
                    tracing::warn!(frontend = %m.frontend, name, error = %e, "on-demand ask endpoint did not answer; the name is refused for now");
                }
                self.verdicts
                    .insert(name.to_string(), Verdict::Refused(now + ASK_FAILED_FOR, 0));
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
        let running = self.names.len() - self.asking;
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
            self.names.remove(name);
            self.verdicts
                .insert(name.to_string(), Verdict::Allowed(now + ALLOWED_FOR));
            return;
        }
        self.started.push_back(now);
        m.certs.events.ordered.inc();
        self.start_job(m, name, Duration::ZERO);
    }

    /// Starts `name`'s renewal job `after` from now (ordering it when there is no certificate
    /// yet); a valid certificate already in the state directory is served at once.
    fn start_job(&mut self, m: &Manager, name: &str, after: Duration) {
        if !self.names.contains_key(name) {
            self.names
                .insert(name.to_string(), Name::Running(Vec::new()));
        }
        let acme = m.acme.for_name(&m.frontend, name);
        if m.certs.get(name).is_none() && usable(&acme.bundle, name) {
            self.serve(m, name, false);
        }
        let job = Job {
            frontend: m.frontend.clone(),
            acme,
            fleet: m.fleet.clone(),
            challenges: m.challenges.clone(),
            events: m.fleet_events.clone(),
            ask: Some(self.ask.clone()),
        };
        let (renewed, mut said) = mpsc::unbounded_channel();
        let (events, name) = (self.events.clone(), name.to_string());
        tokio::spawn(async move {
            if !after.is_zero() {
                tokio::time::sleep(after).await;
            }
            let forward = {
                let (events, name) = (events.clone(), name.clone());
                async move {
                    while said.recv().await.is_some() {
                        let _ = events.send(Event::Renewed(name.clone()));
                    }
                }
            };
            let end = tokio::select! {
                end = renewal::run(job, renewed) => end,
                () = forward => renewal::End::ServerGone,
            };
            let _ = events.send(Event::Ended(name, end));
        });
    }

    /// Loads `name`'s certificate and serves it (counted as `issued` when `new`: not one an
    /// earlier run stored); its waiting handshakes go on.
    fn serve(&mut self, m: &Manager, name: &str, new: bool) {
        let bundle = m.acme.for_name(&m.frontend, name).bundle;
        match certified(&bundle) {
            Ok(key) => {
                m.certs.insert(name, &key);
                if new {
                    m.certs.events.issued.inc();
                }
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

/// Whether `bundle` holds a certificate for `name` that has not expired.
fn usable(bundle: &Path, name: &str) -> bool {
    Stored::read(bundle).is_some_and(|s| {
        s.covers(&[name.to_string()]) && s.not_after > crate::sys::clock::unix_now()
    })
}

/// The names whose certificates an earlier run stored and that have not expired (at most
/// `max_certificates`), loaded into the table, the one that ends first first; not those of names
/// `acme.names` lists now.
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
        if stored.not_after <= crate::sys::clock::unix_now() {
            continue; // expired: ordered again when asked for
        }
        let Some(name) = stored.names.first().cloned() else {
            continue;
        };
        if m.acme.for_name(&m.frontend, &name).bundle != path {
            continue; // not one of ours (renamed by hand)
        }
        if m.reserved.contains(&name) {
            // Listed in `acme.names` since it was ordered: that frontend's now (the file kept).
            tracing::warn!(frontend = %m.frontend, name, "a stored on-demand certificate is for a name some frontend lists in acme.names; not served or renewed on demand");
            continue;
        }
        match certified(&path) {
            Ok(key) => {
                m.certs.insert(&name, &key);
                names.push((stored.not_after, name));
            }
            Err(e) => {
                tracing::warn!(frontend = %m.frontend, path = %path.display(), error = %e, "stored on-demand certificate unusable; ordered again when asked for");
            }
        }
    }
    if !names.is_empty() {
        tracing::info!(frontend = %m.frontend, certificates = names.len(), "serving the on-demand certificates stored before");
    }
    names.sort_unstable();
    names.into_iter().map(|(_, name)| name).collect()
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
