//! What the admin socket (`shuck ctl`) asks of a running server, answered from the engine's
//! own state: the settings in force, the metric handles' values (as the status page reads
//! them), each worker's registry of relayed connections, and the operator's backend states.
//! The binary owns the socket, the request lines and the reload and upgrade commands; this is
//! the engine's side, typed (each answer is `Serialize` for `--json`).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::Serialize;

use crate::backend::admin::MemberKey;
pub use crate::backend::admin::{AdminState, Setting};
use crate::config::{Backend, BackendAddr, Frontend};
use crate::metrics::Metrics;
use crate::server::bindings::Bindings;
use crate::sys::limits::ConnectionLimit;
pub use crate::tls::added::{Change as CertChange, Staged};
use crate::worker::accept::{Control as ToWorker, Listed};
pub use crate::worker::listing::{ConnFilter, ConnectionView};
use crate::worker::Engine;

/// The route name of a frontend's own backends.
pub const DEFAULT_ROUTE: &str = "default";

/// The engine's side of the admin socket: cheap to clone, one per server.
#[derive(Clone)]
pub struct Control {
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    bindings: Arc<Mutex<Bindings>>,
    limit: Arc<ConnectionLimit>,
    fd_limit: u64,
}

/// Why a command was refused.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("no frontend {0:?} (frontends: {1})")]
    NoFrontend(String, String),
    #[error("frontend {frontend:?} has no backend {backend:?} (its backends: {known})")]
    NoBackend {
        frontend: String,
        backend: String,
        known: String,
    },
    #[error("{0:?} is not FRONTEND/BACKEND or FRONTEND/ROUTE/BACKEND")]
    BadTarget(String),
    #[error("weight {0} is not from 1 to {max}", max = crate::config::backend::MAX_WEIGHT)]
    BadWeight(u32),
    #[error("the workers did not answer (stopping?)")]
    WorkersGone,
    #[error("frontend {0:?} gets its certificate from ACME: certificates cannot be added to it")]
    AcmeFrontend(String),
    #[error("{0}")]
    Certificate(#[from] crate::error::Error),
}

/// A frontend, as `show frontends` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct FrontendView {
    pub name: String,
    pub listen: Vec<SocketAddr>,
    pub active: i64,
    pub accepted: u64,
    pub full_handshakes: u64,
    pub resumed_handshakes: u64,
    pub handshake_failures: u64,
    pub routes: usize,
    pub certificates: usize,
}

/// A route, as `show routes` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct RouteView {
    pub frontend: String,
    pub route: String,
    pub sni: Vec<String>,
    pub alpn: Vec<String>,
    pub backends: Vec<String>,
}

/// A backend (a host name's addresses each apart), as `show backends` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct BackendView {
    pub frontend: String,
    pub route: String,
    pub backend: String,
    pub address: String,
    /// The weight in force (the operator's, else the configured one).
    pub weight: u32,
    pub state: AdminState,
    /// The active checks' verdict; `None`: not checked.
    pub up: Option<bool>,
    pub connects: u64,
}

/// A certificate served, as `show certificates` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct CertificateView {
    pub frontend: String,
    pub path: String,
    pub subject: String,
    pub names: Vec<String>,
    /// Unix seconds.
    pub not_after: i64,
    /// Renewed by shuck (ACME).
    pub managed: bool,
    /// Added through the admin socket (`cert add`), kept in `state_dir`.
    pub added: bool,
    /// The stapled response's nextUpdate (Unix seconds), if one is stapled.
    pub staple_next_update: Option<i64>,
}

/// `show limits`.
#[derive(Debug, Clone, Serialize)]
pub struct LimitsView {
    /// The process answering.
    pub pid: u32,
    pub max_connections: usize,
    pub open_connections: usize,
    pub fd_limit: u64,
    pub workers: usize,
    pub overload_threshold: f64,
    pub frontends: Vec<FrontendLimits>,
}

/// One frontend's admission settings, as the configuration in force has them.
#[derive(Debug, Clone, Serialize)]
pub struct FrontendLimits {
    pub frontend: String,
    pub admission: toml::Value,
    pub timeouts: toml::Value,
}

/// `show connections`: those picked, the first `limit` of them described.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionsView {
    pub picked: usize,
    pub shown: Vec<ConnectionView>,
}

/// What a backend command did.
#[derive(Debug, Clone, Serialize)]
pub struct BackendChanged {
    pub frontend: String,
    pub route: String,
    pub backend: String,
    pub before: Setting,
    pub now: Setting,
    /// The backend's open connections, closed after this long (`disable`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub closing_after: Option<Duration>,
}

/// A backend command's change.
#[derive(Debug, Clone, Copy)]
pub enum BackendChange {
    State(AdminState),
    Weight(u32),
}

impl Control {
    pub(crate) fn new(
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
        bindings: Arc<Mutex<Bindings>>,
        (limit, fd_limit): (Arc<ConnectionLimit>, u64),
    ) -> Control {
        Control {
            engine,
            metrics,
            bindings,
            limit,
            fd_limit,
        }
    }

    pub fn frontends(&self) -> Vec<FrontendView> {
        let config = self.engine.in_force();
        let snap = self.metrics.snapshot();
        config
            .frontends
            .iter()
            .map(|fe| {
                let s = snap.frontends.get(&fe.name).cloned().unwrap_or_default();
                FrontendView {
                    name: fe.name.clone(),
                    listen: s.listeners.clone(),
                    active: s.active,
                    accepted: s.accepted,
                    full_handshakes: s.handshakes[0].iter().sum(),
                    resumed_handshakes: s.handshakes[1].iter().sum(),
                    handshake_failures: s.handshake_failures(),
                    routes: fe.route.0.len(),
                    certificates: s.certificates.len(),
                }
            })
            .collect()
    }

    pub fn routes(&self, frontend: Option<&str>) -> Result<Vec<RouteView>, ControlError> {
        let config = self.engine.in_force();
        let mut out = Vec::new();
        for fe in Self::picked(&config.frontends, frontend)? {
            if let Backend::Servers(list) = &fe.backend.target {
                out.push(RouteView {
                    frontend: fe.name.clone(),
                    route: DEFAULT_ROUTE.into(),
                    sni: Vec::new(),
                    alpn: Vec::new(),
                    backends: list.iter().map(|b| b.name.clone()).collect(),
                });
            }
            for r in &fe.route.0 {
                let backends = match &r.backend.target {
                    Backend::Servers(list) => list.iter().map(|b| b.name.clone()).collect(),
                    Backend::Demo => Vec::new(),
                };
                out.push(RouteView {
                    frontend: fe.name.clone(),
                    route: r.name.clone(),
                    sni: r.sni.clone(),
                    alpn: r.alpn.clone(),
                    backends,
                });
            }
        }
        Ok(out)
    }

    pub fn backends(&self, frontend: Option<&str>) -> Result<Vec<BackendView>, ControlError> {
        let config = self.engine.in_force();
        let snap = self.metrics.snapshot();
        let mut out = Vec::new();
        for fe in Self::picked(&config.frontends, frontend)? {
            let seen = snap.frontends.get(&fe.name);
            for (route, members) in self.members_of(fe) {
                let applied = self
                    .engine
                    .backend_states
                    .applied(&fe.name, &route, &members);
                for (m, a) in members.iter().zip(applied) {
                    let counted = seen
                        .and_then(|s| s.backends.get(&(route.clone(), m.name.clone())))
                        .cloned()
                        .unwrap_or_default();
                    out.push(BackendView {
                        frontend: fe.name.clone(),
                        route: route.clone(),
                        backend: m.name.clone(),
                        address: m.addr.to_string(),
                        weight: a.weight,
                        state: a.state,
                        up: counted.up,
                        connects: counted.connects,
                    });
                }
            }
        }
        Ok(out)
    }

    pub fn certificates(
        &self,
        frontend: Option<&str>,
    ) -> Result<Vec<CertificateView>, ControlError> {
        let config = self.engine.in_force();
        let served = self.metrics.served_certificates();
        let mut out = Vec::new();
        for fe in Self::picked(&config.frontends, frontend)? {
            for c in served.get(&fe.name).into_iter().flatten() {
                out.push(CertificateView {
                    frontend: fe.name.clone(),
                    path: c.path.clone(),
                    subject: c.subject.clone(),
                    names: c.names.clone(),
                    not_after: c.not_after,
                    managed: c.managed,
                    added: crate::tls::added::is_added(&fe.state_dir, &c.path),
                    staple_next_update: c.staple.map(|(_, next)| next),
                });
            }
        }
        Ok(out)
    }

    pub fn limits(&self) -> LimitsView {
        let config = self.engine.in_force();
        let section = |v: Result<toml::Value, toml::ser::Error>| {
            v.unwrap_or_else(|e| toml::Value::String(e.to_string()))
        };
        LimitsView {
            pid: std::process::id(),
            max_connections: self.limit.max(),
            open_connections: self.limit.active(),
            fd_limit: self.fd_limit,
            workers: config.workers,
            overload_threshold: config.overload_threshold,
            frontends: config
                .frontends
                .iter()
                .map(|fe| FrontendLimits {
                    frontend: fe.name.clone(),
                    admission: section(toml::Value::try_from(&fe.admission)),
                    timeouts: section(toml::Value::try_from(fe.timeouts)),
                })
                .collect(),
        }
    }

    /// Checks `pem` (chain, leaf first, and key) as a configured certificate is checked and
    /// keeps it among `frontend`'s added certificates as `name` (else the leaf's first DNS name):
    /// the next load of the frontend (the caller's refresh) serves it. Undo it with
    /// [`Staged::undo`] if that load fails.
    pub fn stage_certificate(
        &self,
        frontend: &str,
        name: Option<&str>,
        pem: &[u8],
        change: CertChange,
    ) -> Result<(Staged, CertificateView), ControlError> {
        let fe = self.certificate_frontend(frontend)?;
        let (staged, loaded) = if change == CertChange::Remove {
            let name = name.unwrap_or_default();
            (crate::tls::added::unstage(&fe, name)?, None)
        } else {
            let (s, l) = crate::tls::added::stage(&fe, name, pem, change)?;
            (s, Some(l))
        };
        let view = CertificateView {
            frontend: fe.name.clone(),
            path: staged.path.display().to_string(),
            subject: loaded
                .as_ref()
                .map(|l| l.subject.clone())
                .unwrap_or_default(),
            names: loaded.as_ref().map(|l| l.names.clone()).unwrap_or_default(),
            not_after: loaded.as_ref().map_or(0, |l| l.not_after),
            managed: false,
            added: true,
            staple_next_update: None,
        };
        Ok((staged, view))
    }

    /// With `ocsp = "fetch"`, has `frontend`'s staple tasks ask their responders now (each
    /// logs what it got, and a new response is loaded as usual); whether it has any.
    pub fn fetch_staples_now(&self, frontend: &str) -> Result<bool, ControlError> {
        let config = self.engine.in_force();
        Self::picked(&config.frontends, Some(frontend))?;
        Ok(self.engine.fetch_staples_now(frontend))
    }

    /// The frontend in force named `name`, if its certificates may be added to.
    fn certificate_frontend(&self, name: &str) -> Result<Frontend, ControlError> {
        let config = self.engine.in_force();
        let fe = Self::picked(&config.frontends, Some(name))?
            .into_iter()
            .next()
            .cloned()
            .ok_or_else(|| ControlError::NoFrontend(name.into(), String::new()))?;
        if fe.acme().is_some() {
            return Err(ControlError::AcmeFrontend(fe.name));
        }
        Ok(fe)
    }

    /// The relayed connections `filter` picks, the first `limit` described; closed too with
    /// `close` (close_notify, or an abort when bytes wait for a peer that does not read).
    pub async fn connections(
        &self,
        filter: &ConnFilter,
        limit: usize,
        close: bool,
    ) -> Result<(ConnectionsView, usize), ControlError> {
        let answers = self.ask_workers(filter, limit, close);
        let mut view = ConnectionsView {
            picked: 0,
            shown: Vec::new(),
        };
        let mut closed = 0;
        for a in answers {
            let listed = a.await.map_err(|_| ControlError::WorkersGone)?;
            view.picked += listed.picked;
            closed += listed.closed;
            view.shown.extend(listed.views);
        }
        // Each worker sent its `limit` oldest: the oldest of them all.
        view.shown.sort_by_key(|c| std::cmp::Reverse(c.age_ms));
        view.shown.truncate(limit);
        Ok((view, closed))
    }

    fn ask_workers(
        &self,
        filter: &ConnFilter,
        limit: usize,
        close: bool,
    ) -> Vec<tokio::sync::oneshot::Receiver<Listed>> {
        let bindings = self.bindings.lock().unwrap_or_else(PoisonError::into_inner);
        bindings.tell_workers(|| {
            let (reply, answer) = tokio::sync::oneshot::channel();
            let ask = ToWorker::Connections {
                filter: filter.clone(),
                close,
                limit,
                reply,
            };
            (ask, answer)
        })
    }

    /// Sets a backend's state or weight; `target` is `FRONTEND/BACKEND` or
    /// `FRONTEND/ROUTE/BACKEND`. The workers rebuild their pools with it at once; a disabled
    /// backend's open connections are closed after `shutdown_grace` (unless it is enabled or
    /// drained again by then).
    pub fn set_backend(
        &self,
        target: &str,
        change: BackendChange,
    ) -> Result<BackendChanged, ControlError> {
        let key = self.member_key(target)?;
        let (state, weight) = match change {
            BackendChange::State(s) => (Some(s), None),
            BackendChange::Weight(w) if (1..=crate::config::backend::MAX_WEIGHT).contains(&w) => {
                (None, Some(w))
            }
            BackendChange::Weight(w) => return Err(ControlError::BadWeight(w)),
        };
        let (before, now) = self.engine.backend_states.set(key.clone(), state, weight);
        if state.is_some() {
            self.metrics.set_backend_admin_state(
                &key.frontend,
                &key.route,
                &key.backend,
                now.state().gauge(),
            );
        }
        // Every worker rebuilds its pools before its next connection.
        self.engine.dns.touch();
        let closing_after = (now.state() == AdminState::Disabled
            && before.state() != AdminState::Disabled)
            .then(|| self.engine.shutdown_grace());
        if let Some(grace) = closing_after {
            tokio::spawn(self.clone().close_disabled(key.clone(), now.change, grace));
        }
        Ok(BackendChanged {
            frontend: key.frontend,
            route: key.route,
            backend: key.backend,
            before,
            now,
            closing_after,
        })
    }

    /// After `grace`, closes the open connections of `key`'s backend unless a later change
    /// came first (`change`: the disable's).
    async fn close_disabled(self, key: MemberKey, change: u64, grace: Duration) {
        tokio::time::sleep(grace).await;
        if self.engine.backend_states.get(&key).change != change {
            return;
        }
        let filter = ConnFilter {
            frontend: Some(key.frontend.clone()),
            route: Some(key.route.clone()),
            backend: Some(key.backend.clone()),
            ..ConnFilter::default()
        };
        match self.connections(&filter, 0, true).await {
            Ok((_, closed)) => {
                tracing::info!(frontend = %key.frontend, route = %key.route, backend = %key.backend, closed, "disabled backend: closed its open connections after shutdown_grace");
            }
            Err(e) => {
                tracing::warn!(backend = %key.backend, error = %e, "disabled backend: its open connections were not closed");
            }
        }
    }

    /// `target` as a configured backend of the configuration in force.
    fn member_key(&self, target: &str) -> Result<MemberKey, ControlError> {
        let config = self.engine.in_force();
        let bad = || ControlError::BadTarget(target.to_string());
        let (frontend, rest) = target.split_once('/').ok_or_else(bad)?;
        let fe = Self::picked(&config.frontends, Some(frontend))?
            .into_iter()
            .next()
            .ok_or_else(bad)?;
        // A route's name first, since a backend (a Unix socket's path) may hold a slash too.
        let (route, backend) = match rest.split_once('/') {
            Some((r, b)) if fe.route.0.iter().any(|x| x.name == r) || r == DEFAULT_ROUTE => (r, b),
            _ => (DEFAULT_ROUTE, rest),
        };
        let pools = self.members_of(fe);
        let known: Vec<&str> = pools
            .iter()
            .filter(|(r, _)| r == route)
            .flat_map(|(_, m)| m.iter().map(|b| b.name.as_str()))
            .collect();
        // As written, so a host name without an answer yet can be drained ahead.
        let configured: Vec<String> = Self::configured_of(fe)
            .into_iter()
            .filter(|(r, _)| r == route)
            .flat_map(|(_, names)| names)
            .collect();
        if !known.contains(&backend) && !configured.iter().any(|c| c == backend) {
            return Err(ControlError::NoBackend {
                frontend: fe.name.clone(),
                backend: format!("{route}/{backend}"),
                known: pools
                    .iter()
                    .flat_map(|(r, m)| m.iter().map(move |b| format!("{r}/{}", b.name)))
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        Ok(MemberKey {
            frontend: fe.name.clone(),
            route: route.to_string(),
            backend: backend.to_string(),
        })
    }

    /// Each route's backends of `fe` as written, by route name.
    fn configured_of(fe: &Frontend) -> Vec<(String, Vec<String>)> {
        let names = |b: &crate::config::Backends| match &b.target {
            Backend::Servers(list) => list.iter().map(|a| a.name.clone()).collect(),
            Backend::Demo => Vec::new(),
        };
        let mut out = vec![(DEFAULT_ROUTE.to_string(), names(&fe.backend))];
        out.extend(
            fe.route
                .0
                .iter()
                .map(|r| (r.name.clone(), names(&r.backend))),
        );
        out
    }

    /// Each pool of `fe` by route name, its host names standing for their addresses now.
    fn members_of(&self, fe: &Frontend) -> Vec<(String, Vec<BackendAddr>)> {
        let mut out = Vec::new();
        if let Backend::Servers(list) = &fe.backend.target {
            out.push((DEFAULT_ROUTE.to_string(), self.engine.dns.members(list)));
        }
        for r in &fe.route.0 {
            if let Backend::Servers(list) = &r.backend.target {
                out.push((r.name.clone(), self.engine.dns.members(list)));
            }
        }
        out
    }

    /// The frontend named `name`, or all of them.
    fn picked<'c>(
        frontends: &'c [Frontend],
        name: Option<&str>,
    ) -> Result<Vec<&'c Frontend>, ControlError> {
        let Some(name) = name else {
            return Ok(frontends.iter().collect());
        };
        match frontends.iter().find(|f| f.name == name) {
            Some(f) => Ok(vec![f]),
            None => Err(ControlError::NoFrontend(
                name.to_string(),
                frontends
                    .iter()
                    .map(|f| f.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            )),
        }
    }
}
