//! A connection's one line at its end, and what it is made of: the access record the pipeline
//! (`worker::connection`) fills in as stages complete, and the line in the format asked for:
//! named fields, HAProxy's `tcplog` (`tcplog`), or the operator's template (`templated`);
//! counted, and written within the log discipline (refusals once a minute per source, failures
//! within the per-worker rate limit).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tracing::Level;

use crate::config::{ConnectionLogFormat, Route};
use crate::conn::backend_header::UniqueId;
use crate::conn::conn_error::{ConnError, Loudness, Reason};
use crate::conn::relay::Moved;
use crate::obs::log_limit;
use crate::proto::ja4::Ja4;
use crate::tls::handshake::Summary;
use crate::worker::admission::Admitted;
use crate::worker::tcplog::TcpLog;
use crate::worker::templated::{self, Values};
use crate::worker::{Worker, WorkerFrontend};

/// What the log line at the end says about the connection, filled in as stages complete.
pub(crate) struct AccessRecord<'a> {
    /// The socket's peer until a PROXY header names the real client.
    pub(crate) client: SocketAddr,
    pub(crate) balancer: Option<SocketAddr>,
    /// Kept only when connection logs are on (it owns strings); boxed, so a connection without
    /// one does not carry its 104 bytes in its task.
    pub(crate) summary: Option<Box<Summary>>,
    pub(crate) backend: Option<&'a str>,
    /// The route taken, when one matched.
    pub(crate) route: Option<&'a Route>,
    pub(crate) unique_id: UniqueId,
    pub(crate) moved: Moved,
    /// When the connection was accepted, and how long after it the handshake was done and the
    /// backend connected (milliseconds): the access log's phases.
    pub(crate) accepted: Instant,
    pub(crate) handshake_ms: Option<u64>,
    pub(crate) connect_ms: Option<u64>,
    /// The client as `per_client` counts it (its open connection counted while this lives).
    pub(crate) admitted: Option<Admitted>,
    /// The ClientHello's JA4 fingerprint, when something uses it (`deny_ja4`, the access log,
    /// a PROXY TLV); boxed, so connections without one do not carry its 36 bytes.
    pub(crate) ja4: Option<Box<Ja4>>,
    /// Accepted with 90% of `max_connections` taken: shorter timeouts.
    pub(crate) pressured: bool,
    /// The server name the ClientHello asked for, kept only when the handshake did not finish
    /// (a finished one's is in `summary`).
    pub(crate) sni_sent: Option<Box<str>>,
}

impl AccessRecord<'_> {
    /// The timeouts this connection runs with.
    pub(crate) fn timeouts(&self, fe: &WorkerFrontend) -> crate::config::Timeouts {
        if self.pressured {
            fe.cfg.timeouts.under_pressure()
        } else {
            fe.cfg.timeouts
        }
    }

    pub(crate) fn since_accept(&self) -> u64 {
        u64::try_from(self.accepted.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Counts how the connection ended and writes its one line. With `log_connections` every
/// connection gets a line with all that is known (a warning when it failed); without, failures
/// worth a warning get a short one within the per-worker rate limit, routine ends a debug line.
pub(crate) fn record_end(
    worker: &Worker,
    fe: &WorkerFrontend,
    trace: &AccessRecord<'_>,
    error: Option<&ConnError>,
    took: Duration,
) {
    let reason = error.map(ConnError::reason);
    if let Some(r) = reason {
        fe.metrics.ended(r);
    }
    let loudness = reason.map_or(Loudness::Info, Reason::loudness);
    let line = Line {
        frontend: &fe.cfg.name,
        worker: worker.id,
        connections: (worker.open_connections(), fe.gate.limit.active()),
        trace,
        reason,
        error,
        ms: took.as_millis() as u64,
    };
    if loudness == Loudness::PerSource {
        // A refusal: once a minute per source, access log or not (a flood of refused
        // connections must not become a flood of lines).
        if fe.gate.log_refusal_of(trace.client.ip()) && log_limit::allow() {
            if worker.log_connections() {
                line.full(Level::WARN, &worker.log_format());
            } else {
                line.short(Level::WARN);
            }
        }
        return;
    }
    match loudness {
        Loudness::Quiet if tracing::enabled!(Level::DEBUG) && log_limit::allow() => {
            line.short(Level::DEBUG);
        }
        Loudness::Quiet => {}
        _ if worker.log_connections() => line.full(
            if loudness == Loudness::Warn {
                Level::WARN
            } else {
                Level::INFO
            },
            &worker.log_format(),
        ),
        Loudness::Warn if log_limit::allow() => line.short(Level::WARN),
        Loudness::Warn | Loudness::Info | Loudness::PerSource => {}
    }
}

/// The one line about a connection's end.
struct Line<'a> {
    frontend: &'a str,
    worker: usize,
    /// The process's and the frontend's open connections (HAProxy's actconn and feconn).
    connections: (usize, usize),
    trace: &'a AccessRecord<'a>,
    reason: Option<Reason>,
    error: Option<&'a ConnError>,
    ms: u64,
}

/// `tracing`'s macros want a level known at compile time.
macro_rules! event_at {
    ($level:expr, $($rest:tt)+) => {
        if $level == Level::WARN {
            tracing::warn!($($rest)+)
        } else if $level == Level::INFO {
            tracing::info!($($rest)+)
        } else {
            tracing::debug!($($rest)+)
        }
    };
}

impl Line<'_> {
    /// The server name: the one negotiated, or the one a failed handshake's client asked for.
    fn sni(&self) -> Option<&str> {
        let t = self.trace;
        let negotiated = t.summary.as_ref().and_then(|s| s.sni.as_deref());
        negotiated.or(t.sni_sent.as_deref())
    }

    fn message(&self) -> &'static str {
        self.reason.map_or("connection closed", Reason::message)
    }

    /// What a template may name (`connection_log_format = "<template>"`).
    fn values(&self) -> Values<'_> {
        let t = self.trace;
        let s = t.summary.as_deref();
        Values {
            accepted: std::time::SystemTime::now()
                .checked_sub(t.accepted.elapsed())
                .unwrap_or(std::time::UNIX_EPOCH),
            frontend: self.frontend,
            client: t.client,
            worker: self.worker,
            balancer: t.balancer,
            reason: self.reason.map(Reason::as_str),
            error: self.error.map(ToString::to_string),
            protocol: s.map(|s| s.protocol),
            cipher: s.map(|s| s.cipher),
            group: s.and_then(|s| s.group),
            resumed: s.is_some_and(|s| s.resumed),
            sni: self.sni(),
            alpn: s.and_then(|s| s.alpn.as_deref()),
            listen: s.and_then(|s| s.listen),
            client_cert: s.and_then(|s| s.client_subject.as_deref()),
            client_verify: s.map(|s| s.client_cert.verdict().into_owned()),
            backend_source: s.and_then(|s| s.backend_source),
            route: t.route.map(|r| r.name.as_str()),
            backend: t.backend,
            id: t.unique_id.as_str(),
            ja4: t.ja4.as_deref().map(Ja4::as_str),
            up: t.moved.up,
            down: t.moved.down,
            handshake_ms: t.handshake_ms,
            connect_ms: t.connect_ms,
            ms: self.ms,
        }
    }

    /// The line as HAProxy's `tcplog` writes it (`connection_log_format = "haproxy"`).
    fn tcplog(&self) -> TcpLog<'_> {
        let t = self.trace;
        let s = t.summary.as_deref();
        TcpLog {
            client: t.client,
            accepted: std::time::SystemTime::now()
                .checked_sub(t.accepted.elapsed())
                .unwrap_or(std::time::UNIX_EPOCH),
            frontend: self.frontend,
            route: t.route.map_or("default", |r| r.name.as_str()),
            server: t.backend,
            handshake_ms: t.handshake_ms,
            connect_ms: t.connect_ms,
            total_ms: self.ms,
            bytes_down: t.moved.down,
            reason: self.reason,
            connections: self.connections,
            tls: s.map(|s| (s.protocol, s.cipher)),
            sni: self.sni(),
        }
    }

    /// Who, why, and how far it got.
    fn short(&self, level: Level) {
        let t = self.trace;
        event_at!(level,
            frontend = %self.frontend, client = %t.client, worker = self.worker,
            balancer = %Dash(t.balancer), reason = self.reason.map_or("-", Reason::as_str),
            error = %Dash(self.error), sni = %Dash(self.sni()),
            route = %t.route.map_or("-", |r| r.name.as_str()), backend = %t.backend.unwrap_or("-"),
            up = t.moved.up, down = t.moved.down, ms = self.ms, "{}", self.message());
    }

    /// All of it, with what was negotiated and when: a `log_connections` line (an access log).
    fn full(&self, level: Level, format: &ConnectionLogFormat) {
        match format {
            ConnectionLogFormat::Haproxy => {
                event_at!(level, "{}", self.tcplog());
                return;
            }
            ConnectionLogFormat::Template(t) => {
                event_at!(level, "{}", templated::render(t, &self.values()));
                return;
            }
            ConnectionLogFormat::Fields => {}
        }
        let t = self.trace;
        let s = t.summary.as_ref();
        event_at!(level,
            frontend = %self.frontend, client = %t.client, worker = self.worker,
            balancer = %Dash(t.balancer), reason = self.reason.map_or("-", Reason::as_str),
            error = %Dash(self.error), protocol = s.map_or("-", |s| s.protocol),
            cipher = s.map_or("-", |s| s.cipher), group = %Dash(s.and_then(|s| s.group)),
            resumed = s.is_some_and(|s| s.resumed), sni = %Dash(self.sni()),
            alpn = %Dash(s.and_then(|s| s.alpn.as_deref())), listen = %Dash(s.and_then(|s| s.listen)),
            client_cert = %Dash(s.and_then(|s| s.client_subject.as_deref())),
            client_verify = %Dash(s.map(|s| s.client_cert.verdict())),
            backend_source = %Dash(s.and_then(|s| s.backend_source)),
            route = %t.route.map_or("-", |r| r.name.as_str()),
            backend = %t.backend.unwrap_or("-"),
            id = t.unique_id.as_str(), ja4 = %Dash(t.ja4.as_deref()),
            up = t.moved.up, down = t.moved.down,
            handshake_ms = t.handshake_ms, connect_ms = t.connect_ms, ms = self.ms,
            "{}", self.message());
    }
}

/// Shows a missing value as "-".
struct Dash<T>(Option<T>);

impl<T: std::fmt::Display> std::fmt::Display for Dash<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}
