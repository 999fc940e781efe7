//! Active health checks (`health_check`): one task per checked set of backends per process (not
//! one per worker), on the main thread's runtime. A backend goes down after `fall` failed checks
//! in a row and comes back after `rise` good ones; the verdicts go to `backend::health`, which
//! the workers' pools read.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::backend::connect_to;
use crate::backend::health::{Health, SetKey};
use crate::config::{Backend, BackendAddr, Backends, Frontend, HealthCheck, Target};
use crate::metrics::Metrics;
use crate::proto::proxy_protocol::Version;
use crate::worker::Engine;

/// The checker tasks running, by key; `sync` makes them match a configuration. Shared by the
/// server (which gives it its runtime when it starts), the reloader and the DNS followers.
#[derive(Default)]
pub(crate) struct Checkers {
    running: HashMap<SetKey, Running>,
    /// Where checkers run, what they count into and where their verdicts go: set once the
    /// server runs.
    on: Option<(tokio::runtime::Handle, Arc<Metrics>, Arc<Engine>)>,
    /// The frontends of the last `sync`, for `resync` when DNS changes a set's members.
    frontends: Vec<Frontend>,
}

/// A checker task and the gauges it owns.
struct Running {
    task: tokio::task::JoinHandle<()>,
    frontend: String,
    route: String,
    backends: Vec<String>,
}

/// A set to check: frontend, route, members, how, the backend section and the PROXY version.
type Wanted = (
    String,
    String,
    Vec<BackendAddr>,
    HealthCheck,
    Backends,
    Option<Version>,
);

impl Checkers {
    /// From now on, checkers run on `rt`, count into `metrics` and write their verdicts into
    /// `engine`.
    pub(crate) fn start(
        &mut self,
        rt: tokio::runtime::Handle,
        metrics: Arc<Metrics>,
        engine: Arc<Engine>,
    ) {
        self.on = Some((rt, metrics, engine));
    }

    /// `sync` again with the frontends of the last one: DNS changed what a name stands for.
    pub(crate) fn resync(&mut self) {
        let frontends = std::mem::take(&mut self.frontends);
        self.sync(&frontends.iter().collect::<Vec<_>>());
    }

    /// Starts a checker for each checked set of `frontends` not yet checked and stops those of
    /// sets no longer configured (their verdicts go too; a set that stays keeps its verdicts,
    /// and a member that stays in a changed set keeps its own).
    pub(crate) fn sync(&mut self, frontends: &[&Frontend]) {
        self.frontends = frontends.iter().map(|f| (*f).clone()).collect();
        let Some((rt, metrics, engine)) = self.on.clone() else {
            return;
        };
        let wanted = wanted_sets(&engine, frontends);
        // New sets first: they take the verdicts of the sets they replace.
        for (k, (frontend, route, addrs, check, backends, send)) in &wanted {
            if self.running.contains_key(k) {
                continue;
            }
            let Some(health) = engine.health.shared(frontend, route, backends, addrs) else {
                continue;
            };
            let set = Set {
                tls: backends
                    .tls
                    .as_ref()
                    .map(|t| super::health_tls::TlsSource::new(frontend, t, check)),
                frontend: frontend.clone(),
                route: route.clone(),
                addrs: addrs.clone(),
                check: check.clone(),
                send: *send,
                health,
                metrics: metrics.clone(),
            };
            let running = Running {
                task: rt.spawn(set.run()),
                frontend: frontend.clone(),
                route: route.clone(),
                backends: addrs.iter().map(|b| b.name.clone()).collect(),
            };
            self.running.insert(k.clone(), running);
        }
        let gauged: std::collections::HashSet<(&str, &str, &str)> = wanted
            .values()
            .flat_map(|(f, r, addrs, ..)| {
                addrs
                    .iter()
                    .map(move |b| (f.as_str(), r.as_str(), b.name.as_str()))
            })
            .collect();
        self.running.retain(|k, r| {
            let keep = wanted.contains_key(k);
            if !keep {
                r.task.abort();
                for b in &r.backends {
                    if !gauged.contains(&(r.frontend.as_str(), r.route.as_str(), b.as_str())) {
                        metrics.forget_backend_up(&r.frontend, &r.route, b);
                    }
                }
            }
            keep
        });
        engine.keep_health_sets(&|k| wanted.contains_key(k));
    }
}

/// The checked sets of `frontends`, by key, with their members as DNS gives them now.
fn wanted_sets(engine: &Engine, frontends: &[&Frontend]) -> HashMap<SetKey, Wanted> {
    let mut wanted = HashMap::new();
    for fe in frontends {
        let sets = std::iter::once(("default", &fe.backend, fe.proxy_protocol.send)).chain(
            fe.route
                .0
                .iter()
                .map(|r| (r.name.as_str(), &r.backend, r.send)),
        );
        for (route, backends, send) in sets {
            if let (Some(check), Backend::Servers(addrs)) =
                (&backends.health_check, &backends.target)
            {
                let members = engine.dns.members(addrs);
                wanted.insert(
                    SetKey::new(&fe.name, route, backends, &members),
                    (
                        fe.name.clone(),
                        route.to_string(),
                        members,
                        check.clone(),
                        backends.clone(),
                        send,
                    ),
                );
            }
        }
    }
    wanted
}

/// One checked set and what its checker writes.
struct Set {
    frontend: String,
    route: String,
    addrs: Vec<BackendAddr>,
    check: HealthCheck,
    /// The PROXY header the set's backends expect, if any: a check opens with a LOCAL (v2) or
    /// UNKNOWN (v1) one, as HAProxy's `check-send-proxy` does, so such a backend is not taken
    /// for dead.
    send: Option<Version>,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    /// With `backend_tls`: checks go in TLS, as the connections do.
    tls: Option<super::health_tls::TlsSource>,
}

impl Set {
    /// Checks every backend each interval, all at once, and moves each verdict by `rise` and
    /// `fall`: one log line and a gauge change per change of state. With `observe`, traffic may
    /// also take a backend out between checks (`Health::seen`): that is said here too, at once,
    /// and `rise` is counted from the next check.
    async fn run(mut self) {
        let gauges: Vec<_> = self
            .addrs
            .iter()
            .map(|b| {
                self.metrics
                    .backend_up(&self.frontend, &self.route, &b.name)
            })
            .collect();
        // A member carried over from the set this one replaced keeps its verdict.
        let mut was_up: Vec<bool> = (0..self.addrs.len())
            .map(|i| self.health.is_up(i))
            .collect();
        for (g, up) in gauges.iter().zip(&was_up) {
            g.set(i64::from(*up));
        }
        // Good (positive) or failed (negative) checks in a row.
        let mut streak = vec![0i64; self.addrs.len()];
        let mut tick = tokio::time::interval(self.check.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut short_of_descriptors = false;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = self.health.taken_out() => {
                    self.note_taken_out(&mut was_up, &mut streak, &gauges);
                    continue;
                }
            }
            let results = self.probe_all().await;
            self.note_short_of_descriptors(&results, &mut short_of_descriptors);
            // Taken out while these checks ran: they do not count towards `rise`.
            let fresh = self.note_taken_out(&mut was_up, &mut streak, &gauges);
            for (i, result) in results.into_iter().enumerate() {
                // A check this host could not make says nothing of the backend.
                if fresh.contains(&i)
                    || matches!(result, Err(Failure::Local(_) | Failure::Unloaded(_)))
                {
                    continue;
                }
                let up = self.health.is_up(i);
                if was_up[i] && !up {
                    // Taken out by traffic since `note_taken_out` looked: the next look says
                    // so and starts its streak afresh; this check must not bring it back.
                    continue;
                }
                streak[i] = match (&result, streak[i]) {
                    (Ok(()), s) if s > 0 => s + 1,
                    (Ok(()), _) => 1,
                    (Err(_), s) if s < 0 => s - 1,
                    (Err(_), _) => -1,
                };
                let b = &self.addrs[i].name;
                if up && -streak[i] >= i64::from(self.check.fall) {
                    self.health.set_up(i, false);
                    was_up[i] = false;
                    gauges[i].set(0);
                    let why = result.err().map(|f| f.to_string()).unwrap_or_default();
                    tracing::warn!(frontend = %self.frontend, route = %self.route, backend = %b, error = %why, "backend down: health check failed {} times in a row", self.check.fall);
                } else if !up && streak[i] >= i64::from(self.check.rise) {
                    self.health.set_up(i, true);
                    was_up[i] = true;
                    gauges[i].set(1);
                    tracing::info!(frontend = %self.frontend, route = %self.route, backend = %b, "backend up: health check passed {} times in a row", self.check.rise);
                }
            }
        }
    }

    /// The members traffic took out since this checker last wrote their verdicts: one line
    /// each, the gauge at 0, and their streak of good checks started afresh. Returns them.
    fn note_taken_out(
        &self,
        was_up: &mut [bool],
        streak: &mut [i64],
        gauges: &[prometheus_client::metrics::gauge::Gauge],
    ) -> Vec<usize> {
        let limit = self.health.error_limit().unwrap_or_default();
        let mut out = Vec::new();
        for (i, was) in was_up.iter_mut().enumerate() {
            if !*was || self.health.is_up(i) {
                continue;
            }
            *was = false;
            streak[i] = 0;
            gauges[i].set(0);
            let b = &self.addrs[i].name;
            tracing::warn!(frontend = %self.frontend, route = %self.route, backend = %b, "backend down: {limit} consecutive failures on real traffic");
            out.push(i);
        }
        out
    }
}

impl Set {
    /// Says once when checks start to find no descriptor, and once when they run again.
    fn note_short_of_descriptors(&self, results: &[Result<(), Failure>], short: &mut bool) {
        let local = results.iter().any(|r| matches!(r, Err(Failure::Local(_))));
        if local == *short {
            return;
        }
        if local {
            tracing::warn!(frontend = %self.frontend, route = %self.route, "health checks cannot run: this process is out of descriptors; the backends keep their verdicts");
        } else {
            tracing::info!(frontend = %self.frontend, route = %self.route, "health checks run again");
        }
        *short = local;
    }

    /// One check of every backend, at once (a task each, ended with the checker's task), in
    /// the backends' order.
    async fn probe_all(&mut self) -> Vec<Result<(), Failure>> {
        let tls = match &mut self.tls {
            None => None,
            Some(source) => match source.current(&self.route).await {
                Ok(t) => Some(t),
                // Said by `current`; the backends keep their verdicts.
                Err(why) => return vec![Err(Failure::Unloaded(why)); self.addrs.len()],
            },
        };
        let mut checks = tokio::task::JoinSet::new();
        for (i, b) in self.addrs.iter().enumerate() {
            let (b, check, send, tls) = (b.clone(), self.check.clone(), self.send, tls.clone());
            checks.spawn(async move { (i, probe(&b, &check, send, tls).await) });
        }
        // A check that did not finish (its task failed) counts as failed.
        let mut out: Vec<Result<(), Failure>> =
            vec![Err(Failure::Backend("the check did not finish".into())); self.addrs.len()];
        while let Some(done) = checks.join_next().await {
            if let Ok((i, result)) = done {
                out[i] = result;
            }
        }
        out
    }
}

/// Why a check failed.
#[derive(Debug, Clone)]
enum Failure {
    /// The backend's: refused, reset, wrong answer, too slow.
    Backend(String),
    /// This process's: no descriptor for the check's socket. Not the backend's fault.
    Local(String),
    /// This process's: its `backend_tls` files cannot be loaded. Not the backend's fault.
    Unloaded(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Backend(why) | Failure::Local(why) | Failure::Unloaded(why) => {
                f.write_str(why)
            }
        }
    }
}

/// One check of one backend: a connect, in `tls` its handshake, and with `http` a request whose
/// status line must carry `expect_status`, all within `timeout`.
async fn probe(
    b: &BackendAddr,
    check: &HealthCheck,
    send: Option<Version>,
    tls: Option<super::health_tls::TlsCheck>,
) -> Result<(), Failure> {
    let deadline = tokio::time::Instant::now() + check.timeout;
    let stream = match tokio::time::timeout_at(deadline, connect_to(&b.addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) if crate::backend::out_of_descriptors(&e) => {
            return Err(Failure::Local(format!("connect: {e}")))
        }
        Ok(Err(e)) => return Err(Failure::Backend(format!("connect: {e}"))),
        Err(_) => {
            return Err(Failure::Backend(format!(
                "no answer within {:?}",
                check.timeout
            )))
        }
    };
    let (stream, send) = match tls {
        None => (stream, send),
        Some(tls) => {
            let name = tls
                .server_name(&b.name)
                .ok_or_else(|| Failure::Local(format!("no server name to ask {} for", b.name)))?;
            let first = send.map(local_header);
            let within = deadline.saturating_duration_since(tokio::time::Instant::now());
            let stream = stream
                .into_tls(first, (tls.config, name), within)
                .await
                .map_err(|e| Failure::Backend(format!("TLS: {e}")))?;
            // The PROXY header went before the handshake.
            (stream, None)
        }
    };
    converse(stream, b, check, send, deadline)
        .await
        .map_err(Failure::Backend)
}

/// The rest of a check on a connected `stream`, by `deadline` (what is left of `timeout`).
async fn converse(
    mut stream: crate::backend::Upstream,
    b: &BackendAddr,
    check: &HealthCheck,
    send: Option<Version>,
    deadline: tokio::time::Instant,
) -> Result<(), String> {
    let attempt = async {
        if let Some(version) = send {
            stream
                .write_all(local_header(version))
                .await
                .map_err(|e| format!("PROXY header: {e}"))?;
        }
        let Some((method, path)) = &check.http else {
            return Ok(());
        };
        // A Unix socket's name is no host name: "localhost" then.
        let default_host = match b.addr {
            Target::Tcp(_) | Target::Name(_) => host_of(&b.name),
            Target::Unix(_) => "localhost",
        };
        let host = check.host.as_deref().unwrap_or(default_host);
        let request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: shuck-health-check\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("request: {e}"))?;
        let mut head = [0u8; 12];
        stream
            .read_exact(&mut head)
            .await
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => "closed without an answer".to_string(),
                _ => format!("answer: {e}"),
            })?;
        // "HTTP/1.1 200 …": the status is bytes 9..12.
        let status = std::str::from_utf8(&head[9..12])
            .ok()
            .and_then(|s| s.parse::<u16>().ok());
        match status {
            Some(s) if s == check.expect_status => Ok(()),
            Some(s) => Err(format!("status {s}, expected {}", check.expect_status)),
            None => Err("not an HTTP answer".into()),
        }
    };
    match tokio::time::timeout_at(deadline, attempt).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {:?}", check.timeout)),
    }
}

/// The Host header for a backend named `name`: `host:port`, without the address a host name's
/// member adds (`host:port@ip`).
fn host_of(name: &str) -> &str {
    name.split_once('@').map_or(name, |(host, _)| host)
}

/// A PROXY header that names no client: v2's LOCAL command, v1's UNKNOWN.
fn local_header(version: Version) -> &'static [u8] {
    match version {
        Version::V1 => b"PROXY UNKNOWN\r\n",
        Version::V2 => b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00",
    }
}
