//! Prometheus metrics (and the HTTP endpoint serving them, the status page). Each worker takes
//! its own counter handles at start (one set per frontend),
//! so counting on the connection path is an uncontended atomic add on memory no other worker
//! writes: no lock, no label lookup.

use std::time::Duration;

use prometheus_client::encoding::text::{encode_eof, encode_registry};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

mod acme;
mod certificates;
mod families;
mod frontend;
mod http;
pub(crate) mod ja4_top;
mod merge;
mod pending;
mod pkcs11;
mod process;
mod snapshot;
mod status;
mod text004;

pub(crate) use certificates::CertRecord;
use certificates::CertificateGauges;
pub(crate) use frontend::{BackendErrorCounts, FrontendMetrics};
pub(crate) use http::{serve, Phase};
pub(crate) use snapshot::ConnectTime;

use crate::sessions::cache::SessionCounters;
use crate::store::{latency_histogram, StoreCounters};
use prometheus_client::metrics::histogram::Histogram;

type Labels = Vec<(&'static str, String)>;
type DurationFamily = Family<Labels, Histogram, fn() -> Histogram>;

/// Buckets for the latencies operators ask of a terminator first (a handshake, a backend
/// connect): 0.5 ms doubling to 8.2 s.
fn duration_histogram() -> Histogram {
    Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
        0.000_5, 2.0, 15,
    ))
}

/// All metric families of the process.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    /// The process metrics, named without shuck's prefix as every exporter names them.
    process: Registry,
    /// Where the process is, for `/readyz` (a `Phase` as a number).
    phase: std::sync::atomic::AtomicU8,
    accepted: Family<Labels, Counter>,
    active: Family<Labels, Gauge>,
    handshakes: Family<Labels, Counter>,
    handshake_failures: Family<Labels, Counter>,
    resumptions: Family<Labels, Counter>,
    backend_errors: Family<Labels, Counter>,
    client_errors: Family<Labels, Counter>,
    idle_timeouts: Family<Labels, Counter>,
    bytes: Family<Labels, Counter>,
    accept_errors: Family<Labels, Counter>,
    pressured: Family<Labels, Counter>,
    proxy_headers: Family<Labels, Counter>,
    proxy_header_errors: Family<Labels, Counter>,
    client_certs_unverified: Family<Labels, Counter>,
    ktls: Family<Labels, Counter>,
    resource_errors: Family<Labels, Counter>,
    refused: Family<Labels, Counter>,
    session_cache: Family<Labels, Counter>,
    session_cache_evictions: Family<Labels, Counter>,
    store_lookups: Family<Labels, Counter>,
    store_writes: Family<Labels, Counter>,
    store_latency: Family<Labels, Histogram, fn() -> Histogram>,
    store_breaker_open: Family<Labels, Gauge>,
    handshake_duration: DurationFamily,
    backend_connect_duration: DurationFamily,
    /// `shuck_listener_info{frontend,address}`: the addresses listened on now.
    listeners: Family<Labels, Gauge>,
    /// `shuck_backend_up{frontend,route,backend}`: the active checks' verdicts.
    backend_up: Family<Labels, Gauge>,
    /// `shuck_backend_admin_state{frontend,route,backend}`: what an operator set (0 enabled,
    /// 1 drain, 2 disabled), for the backends an operator named.
    backend_admin_state: Family<Labels, Gauge>,
    dns: DnsFamilies,
    /// The last minutes the status page charts.
    history: std::sync::Mutex<status::History>,
    /// The certificates served now: expiry and OCSP staples.
    certificates: CertificateGauges,
    /// The handles made so far, which the status page reads.
    index: snapshot::Index,
    /// Connections to this endpoint closed before their request, for newer ones.
    endpoint_evicted: Counter,
    /// `shuck_acme_fleet_events_total{frontend,event}`.
    acme_fleet: Family<Labels, Counter>,
    /// `shuck_redirect_requests_total{listener,outcome}`.
    redirect_requests: Family<Labels, Counter>,
    /// `shuck_on_demand_events_total{frontend,event}`.
    on_demand: Family<Labels, Counter>,

    /// Each worker's most frequent JA4 fingerprints per frontend.
    ja4_top: std::sync::Arc<ja4_top::Ja4Top>,
    /// `metrics_per_worker`.
    per_worker: std::sync::atomic::AtomicBool,
    /// `shuck_connections_limit`.
    connection_limit: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut registry = Registry::with_prefix("shuck");
        let m = Metrics {
            accepted: Family::default(),
            active: Family::default(),
            handshakes: Family::default(),
            handshake_failures: Family::default(),
            resumptions: Family::default(),
            backend_errors: Family::default(),
            client_errors: Family::default(),
            idle_timeouts: Family::default(),
            bytes: Family::default(),
            accept_errors: Family::default(),
            pressured: Family::default(),
            proxy_headers: Family::default(),
            proxy_header_errors: Family::default(),
            client_certs_unverified: Family::default(),
            ktls: Family::default(),
            resource_errors: Family::default(),
            refused: Family::default(),
            session_cache: Family::default(),
            session_cache_evictions: Family::default(),
            store_lookups: Family::default(),
            store_writes: Family::default(),
            store_latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
            store_breaker_open: Family::default(),
            handshake_duration: Family::new_with_constructor(duration_histogram),
            backend_connect_duration: Family::new_with_constructor(duration_histogram),
            listeners: Family::default(),
            backend_up: Family::default(),
            backend_admin_state: Family::default(),
            dns: DnsFamilies::default(),
            history: std::sync::Mutex::default(),
            certificates: CertificateGauges::default(),
            index: snapshot::Index::default(),
            endpoint_evicted: Counter::default(),
            acme_fleet: Family::default(),
            redirect_requests: Family::default(),
            on_demand: Family::default(),

            ja4_top: std::sync::Arc::default(),
            per_worker: std::sync::atomic::AtomicBool::new(false),
            connection_limit: Gauge::default(),
            registry: Registry::default(),
            process: Registry::default(),
            phase: std::sync::atomic::AtomicU8::new(0),
        };
        families::register_connection_families(&mut registry, &m);
        register_process_wide(&mut registry);
        registry.register(
            "metrics_connections_evicted",
            "Connections to this endpoint closed before they sent a request, for a newer one: their client had 8 such connections, or all clients 32",
            m.endpoint_evicted.clone(),
        );
        registry.register(
            "acme_fleet_events",
            "What a fleet's ACME waited for or refused, by event: lease_wait (a wait for the host holding the lease, or the fleet's back-off, began), lease_taken_over (a lease no host of the fleet wrote, or one past its time), ordered_alone, notification_dropped (beyond one a second), value_refused (a store value not sealed by the fleet, or past its expiry), challenge_lookup_busy (a TLS-ALPN-01 validator's handshake answered without the store: 16 lookups of another host's challenge were running in the process)",
            m.acme_fleet.clone(),
        );
        registry.register(
            "redirect_requests",
            "Requests on the plain-HTTP listeners, by listener and outcome: redirected, unknown_host (421, or sent to unknown_host), challenge (an ACME HTTP-01 answer), challenge_unknown (404: no such challenge pending here or in the fleet's store), bad_request, busy (503: too many store lookups at once), timeout (no whole request within 10 s), too_many (closed at once: 1024 connections open, or 16 from the client's address)",
            m.redirect_requests.clone(),
        );
        registry.register(
            "on_demand_events",
            "On-demand certificates, by frontend and event: allowed and refused (the ask endpoint's answers; a refusal is kept a minute), ask_failed (no answer, or 5xx), ordered, issued (loaded to serve, also from the fleet), order_failed, held_too_long (a handshake that waited its hold), rate_limited (past max_per_minute), full (max_certificates reached), busy (a new name refused without asking: 16 questions out, or a name too long), reserved (a name some frontend's acme.names lists, refused without asking)",
            m.on_demand.clone(),
        );
        registry.register_collector(Box::new(ja4_top::Ja4TopCollector(m.ja4_top.clone())));
        registry.register_collector(Box::new(pkcs11::Pkcs11Collector));
        registry.register(
            "connections_limit",
            "max_connections in force: connections the process serves at once (after the open-files limit's clamp), beside shuck_connections_active",
            m.connection_limit.clone(),
        );
        families::register_session_families(&mut registry, &m);
        families::register_latencies_and_listeners(&mut registry, &m);
        m.certificates.register(&mut registry);
        let mut process = Registry::default();
        process.register_collector(Box::new(process::ProcessCollector));
        Metrics {
            registry,
            process,
            ..m
        }
    }

    /// The counters of one frontend's remote session store.
    pub(crate) fn store_counters(&self, frontend: &str) -> StoreCounters {
        let with = |k: &'static str, v: &str| -> Labels {
            vec![("frontend", frontend.to_string()), (k, v.to_string())]
        };
        let lookups = |r| get(&self.store_lookups, &with("result", r));
        let writes = |r| get(&self.store_writes, &with("result", r));
        StoreCounters {
            hits: lookups("hit"),
            misses: lookups("miss"),
            timeouts: lookups("timeout"),
            errors: lookups("error"),
            garbage: lookups("garbage"),
            oversized: lookups("oversized"),
            skipped: lookups("skipped"),
            writes: writes("written"),
            writes_dropped: writes("dropped"),
            write_errors: writes("error"),
            latency: self.store_latency.clone(),
            breaker_open: self.store_breaker_open.clone(),
        }
    }

    /// The counters of one frontend's session cache (shared by its workers).
    pub(crate) fn session_counters(&self, frontend: &str) -> SessionCounters {
        let labels = |result: Option<&str>| -> Labels {
            let mut l = vec![("frontend", frontend.to_string())];
            l.extend(result.map(|r| ("result", r.to_string())));
            l
        };
        SessionCounters {
            hits: get(&self.session_cache, &labels(Some("hit"))),
            misses: get(&self.session_cache, &labels(Some("miss"))),
            evictions: get(&self.session_cache_evictions, &labels(None)),
        }
    }

    /// The addresses listened on now, by frontend (at start and after every reload).
    pub(crate) fn set_listeners(&self, addrs: &[(String, std::net::SocketAddr)]) {
        self.listeners.clear();
        for (frontend, addr) in addrs {
            let l: Labels = vec![
                ("frontend", frontend.clone()),
                ("address", addr.to_string()),
            ];
            self.listeners.get_or_create(&l).set(1);
        }
        self.index.listeners(addrs);
    }

    /// The gauge of one checked backend's verdict.
    pub(crate) fn backend_up(&self, frontend: &str, route: &str, backend: &str) -> Gauge {
        let gauge = get(&self.backend_up, &backend_labels(frontend, route, backend));
        self.index.up(backend_key(frontend, route, backend), &gauge);
        gauge
    }

    /// Sets what an operator set for `backend` (as named: an address, or a host name standing
    /// for its addresses): 0 enabled, 1 drain, 2 disabled.
    pub(crate) fn set_backend_admin_state(
        &self,
        frontend: &str,
        route: &str,
        backend: &str,
        state: i64,
    ) {
        let gauge = get(
            &self.backend_admin_state,
            &backend_labels(frontend, route, backend),
        );
        gauge.set(state);
        self.index
            .admin(backend_key(frontend, route, backend), &gauge);
    }

    /// Forgets what an operator set for a backend no longer configured.
    pub(crate) fn forget_backend_admin_state(&self, frontend: &str, route: &str, backend: &str) {
        self.backend_admin_state
            .remove(&backend_labels(frontend, route, backend));
        self.index
            .forget_admin(&backend_key(frontend, route, backend));
    }

    /// Counts a lookup of host-name backend `name` (`ok`, `failed` or `empty`).
    pub(crate) fn dns_lookup(&self, name: &str, result: &'static str) {
        get(
            &self.dns.lookups,
            &vec![("name", name.to_string()), ("result", result.to_string())],
        )
        .inc();
    }

    /// How many addresses host-name backend `name` stands for now.
    pub(crate) fn dns_addresses(&self, name: &str, count: usize) {
        get(&self.dns.addresses, &vec![("name", name.to_string())])
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Whether a certificate some frontend serves now names `host` (exactly, or by a
    /// one-label wildcard).
    pub(crate) fn serves_name(&self, host: &str) -> bool {
        self.certificates.serves(host)
    }

    /// Counts changed certificate files of `frontend` that were not loaded.
    pub(crate) fn certificate_watch_error(&self, frontend: &str) {
        self.certificates
            .watch_errors
            .get_or_create(&vec![("frontend", frontend.to_string())])
            .inc();
    }

    /// Whether what `watch_certificates` sees of `frontend` on disk loads.
    pub(crate) fn certificate_watch_healthy(&self, frontend: &str, healthy: bool) {
        self.certificates
            .watch_healthy
            .get_or_create(&vec![("frontend", frontend.to_string())])
            .set(i64::from(healthy));
    }

    /// Drops the watch gauge of a frontend no longer watched.
    pub(crate) fn forget_certificate_watch(&self, frontend: &str) {
        self.certificates
            .watch_healthy
            .remove(&vec![("frontend", frontend.to_string())]);
    }

    /// Counts addresses an answer for `name` named and that were refused.
    pub(crate) fn dns_refused(&self, name: &str, count: usize) {
        let c = get(&self.dns.refused, &vec![("name", name.to_string())]);
        c.inc_by(u64::try_from(count).unwrap_or(u64::MAX));
    }

    /// Drops the series of a host-name backend no longer followed.
    pub(crate) fn forget_dns(&self, name: &str) {
        self.dns.addresses.remove(&vec![("name", name.to_string())]);
        self.dns.refused.remove(&vec![("name", name.to_string())]);
        for result in ["ok", "failed", "empty", "refused"] {
            self.dns.lookups.remove(&vec![
                ("name", name.to_string()),
                ("result", result.to_string()),
            ]);
        }
    }

    /// Drops the gauge of a backend no longer checked (a reload removed its set).
    pub(crate) fn forget_backend_up(&self, frontend: &str, route: &str, backend: &str) {
        self.backend_up
            .remove(&backend_labels(frontend, route, backend));
        self.index.forget_up(&backend_key(frontend, route, backend));
    }

    /// What the handles say now, with what /proc and the certificates say.
    #[allow(
        clippy::cast_precision_loss,
        reason = "Unix seconds fit an f64's 52-bit mantissa"
    )]
    pub(crate) fn snapshot(&self) -> snapshot::Snapshot {
        let now = crate::sys::clock::unix_now();
        let r = process::read();
        let process = snapshot::Process {
            version: env!("CARGO_PKG_VERSION"),
            commit: BUILD.get().map(|b| b.commit.clone()).unwrap_or_default(),
            started: r.start_time_seconds,
            resident_bytes: r.resident_bytes,
            open_fds: r.open_fds,
            max_fds: r.max_fds,
        };
        self.index
            .snapshot(process, self.certificates.served(), now as f64)
    }

    /// Adds a point to the status page's history.
    pub(crate) fn sample_history(&self) {
        let now = self.snapshot();
        self.history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .record(&now);
    }

    /// The status page: the handles' values now, and the history.
    pub(crate) fn status_page(&self) -> String {
        let now = self.snapshot();
        let history = self
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        status::page(&now, &history)
    }

    /// What one frontend serves now (at start, reload, renewal): its certificates' gauges.
    pub(crate) fn set_certificates(&self, frontend: &str, records: Vec<CertRecord>) {
        self.certificates.set(frontend, records);
    }

    /// What each frontend serves now, by frontend.
    pub(crate) fn served_certificates(
        &self,
    ) -> std::collections::BTreeMap<String, Vec<CertRecord>> {
        self.certificates.served()
    }

    /// Frontends stapling a response whose nextUpdate has passed (to be loaded again without it).
    pub(crate) fn lapsed_staples(&self, now: i64) -> Vec<String> {
        self.certificates.lapsed(now)
    }

    /// Warnings for certificates not renewed by shuck that expire within `within`.
    pub(crate) fn expiry_warnings(&self, now: i64, within: Duration) -> Vec<String> {
        self.certificates.warnings(now, within)
    }

    /// Where the process is now, for `/readyz`.
    pub(crate) fn phase(&self) -> Phase {
        match self.phase.load(std::sync::atomic::Ordering::Relaxed) {
            1 => Phase::Serving,
            2 => Phase::Draining,
            _ => Phase::Starting,
        }
    }

    pub(crate) fn set_phase(&self, phase: Phase) {
        let n = match phase {
            Phase::Starting => 0,
            Phase::Serving => 1,
            Phase::Draining => 2,
        };
        self.phase.store(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// The OpenMetrics text exposition: one series per frontend (the workers summed) unless
    /// `metrics_per_worker`.
    pub(crate) fn encode(&self) -> String {
        self.certificates.update_ages(crate::sys::clock::unix_now());
        let mut s = String::with_capacity(8192);
        // Writing to a String cannot fail.
        let _ = encode_registry(&mut s, &self.process);
        let _ = encode_registry(&mut s, &self.registry);
        let _ = encode_eof(&mut s);
        if self.per_worker.load(std::sync::atomic::Ordering::Relaxed) {
            s
        } else {
            merge::without_workers(&s)
        }
    }

    /// The exposition in the Prometheus text format 0.0.4, for scrapers that do not ask for
    /// OpenMetrics.
    pub(crate) fn encode_text_004(&self) -> String {
        text004::from_openmetrics(&self.encode())
    }

    /// `metrics_per_worker`: whether series keep their `worker` label (at start and reload).
    pub(crate) fn set_per_worker(&self, yes: bool) {
        self.per_worker
            .store(yes, std::sync::atomic::Ordering::Relaxed);
    }

    /// `shuck_connections_limit`: `max_connections` in force (after the open-files clamp).
    pub(crate) fn set_connection_limit(&self, max: usize) {
        self.connection_limit
            .set(i64::try_from(max).unwrap_or(i64::MAX));
    }
}

/// What belongs to the process rather than to a frontend: the build, the log's dropped lines.
fn register_process_wide(registry: &mut Registry) {
    registry.register(
        "log_lines_dropped",
        "Log lines lost: the log writer's queue was full (the reader of standard error lagged; a summary line follows once it catches up), or standard error could not be written (its reader closed the pipe)",
        crate::obs::logging::LINES_DROPPED.clone(),
    );
    registry.register(
        "build",
        "The build: shuck's version and commit, rustls' version, the binary's features",
        prometheus_client::metrics::info::Info::new(build_labels()),
    );
}

/// What `shuck_build_info` says beyond the version: the commit, the rustls version and the
/// features, which the binary knows (its build script and its features). Set once, before the
/// first `Metrics` is made.
#[derive(Debug, Clone, Default)]
pub struct BuildInfo {
    pub commit: String,
    pub rustls: String,
    pub features: String,
}

static BUILD: std::sync::OnceLock<BuildInfo> = std::sync::OnceLock::new();

/// Tells `shuck_build_info` what the binary knows of its build.
pub fn set_build_info(info: BuildInfo) {
    let _ = BUILD.set(info);
}

fn build_labels() -> Vec<(&'static str, String)> {
    let b = BUILD.get().cloned().unwrap_or_default();
    vec![
        ("version", env!("CARGO_PKG_VERSION").to_string()),
        ("commit", b.commit),
        ("rustls", b.rustls),
        ("features", b.features),
    ]
}

/// `shuck_dns_lookups_total{name,result}` and `shuck_dns_addresses{name}`.
#[derive(Debug, Default)]
struct DnsFamilies {
    lookups: Family<Labels, Counter>,
    addresses: Family<Labels, Gauge>,
    refused: Family<Labels, Counter>,
}

fn backend_key(frontend: &str, route: &str, backend: &str) -> (String, String, String) {
    (frontend.to_string(), route.to_string(), backend.to_string())
}

fn backend_labels(frontend: &str, route: &str, backend: &str) -> Labels {
    vec![
        ("frontend", frontend.to_string()),
        ("route", route.to_string()),
        ("backend", backend.to_string()),
    ]
}

/// A label value as the text format writes it: prometheus-client writes values as given, and a
/// path or a certificate subject (RFC 4514 escapes with backslashes) may hold `\`, `"` or a
/// line break.
fn escaped(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A handle out of a family. The family's read guard must be dropped before the next lookup, which
/// may need the write lock; a function boundary makes sure of that (a guard living to the end of a
/// struct literal would deadlock).
fn get<M: Clone + Default>(f: &Family<Labels, M>, l: &Labels) -> M {
    f.get_or_create(l).clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::conn_error::Reason;

    /// A backend that left the pool keeps its series until the last worker drops it: the sum
    /// over workers never falls (Prometheus would read a counter reset).
    #[test]
    fn a_backend_leaves_the_exposition_when_every_worker_dropped_it() {
        let m = Metrics::new();
        let (w0, w1) = (m.for_frontend("web", 0), m.for_frontend("web", 1));
        // As a worker's pool takes them: connect times and error counters per backend.
        for w in [&w0, &w1] {
            let _ = w
                .backend_connects()
                .for_backends("default", ["10.0.0.9:80"].into_iter());
        }
        let e0 = w0
            .backend_connects()
            .errors_for("default", ["10.0.0.9:80"].into_iter());
        let e1 = w1
            .backend_connects()
            .errors_for("default", ["10.0.0.9:80"].into_iter());
        e0[0].relay.inc();
        e1[0].relay.inc_by(2);
        let series = "shuck_backend_errors_total{frontend=\"web\",route=\"default\",backend=\"10.0.0.9:80\",kind=\"relay\"}";
        assert!(
            m.encode().contains(&format!("{series} 3")),
            "{}",
            m.encode()
        );
        w0.backend_connects().forget("default", "10.0.0.9:80");
        assert!(
            m.encode().contains(&format!("{series} 3")),
            "{}",
            m.encode()
        );
        w1.backend_connects().forget("default", "10.0.0.9:80");
        assert!(!m.encode().contains("10.0.0.9:80"), "{}", m.encode());
    }

    #[test]
    fn per_worker_handles_feed_one_family() {
        let m = Metrics::new();
        let w0 = m.for_frontend("web", 0);
        let w1 = m.for_frontend("web", 1);
        w0.accepted.inc();
        w1.accepted.inc_by(2);
        w1.ended(Reason::HandshakeTimeout);
        // By default the workers are summed (`metrics_per_worker = false`).
        let text = m.encode();
        assert!(
            text.contains("shuck_connections_accepted_total{frontend=\"web\"} 3"),
            "{text}"
        );
        assert!(!text.contains("worker="), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
        m.set_per_worker(true);
        let text = m.encode();
        assert!(
            text.contains("shuck_connections_accepted_total{frontend=\"web\",worker=\"0\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("shuck_connections_accepted_total{frontend=\"web\",worker=\"1\"} 2"),
            "{text}"
        );
        assert!(text.contains("shuck_handshake_failures_total{frontend=\"web\",worker=\"1\",reason=\"timeout\"} 1"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
