//! One client connection as a pipeline of stages, each taking and returning values:
//!
//! `proxy_in::arrive → tls::handshake::read_client_hello → tls::handshake::finish →
//! backend connect → proxy_out::header → relay` (or the demo page after the handshake).
//!
//! Any stage may end the connection with a [`ConnError`]; its metric and its one log line are
//! written once, at the end, by [`record_end`], inside a span naming the frontend, the client,
//! the worker and (when a PROXY header was read) the load balancer.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use crate::backend::{BackendPool, Lease};
use crate::buf_pool::PooledBuf;
use crate::conn_error::{ConnError, Loudness, Reason};
use crate::metrics::FrontendMetrics;
use crate::proxy_in::{self, Arrival};
use crate::proxy_out::{self, UniqueId};
use crate::relay::{self, Moved, RelayError};
use crate::tls::handshake::{self, ClientCert, Deadline, Negotiated, Summary};
use crate::worker::{FrontendRt, Worker};
use crate::{demo, log_limit};

/// What the log line at the end says about the connection, filled in as stages complete.
struct Trace<'a> {
    /// The socket's peer until a PROXY header names the real client.
    client: SocketAddr,
    balancer: Option<SocketAddr>,
    /// Kept only when connection logs are on (it owns strings).
    summary: Option<Summary>,
    backend: Option<&'a str>,
    unique_id: UniqueId,
    moved: Moved,
}

/// Serves one accepted connection to its end.
pub(crate) async fn handle(
    worker: Rc<Worker>,
    fe: Rc<FrontendRt>,
    tcp: TcpStream,
    peer: SocketAddr,
) {
    let started = Instant::now();
    let _active = ActiveGuard::new(&fe.metrics);
    let mut trace = Trace {
        client: peer,
        balancer: None,
        summary: None,
        backend: None,
        unique_id: UniqueId::default(),
        moved: Moved::default(),
    };
    let result = pipeline(&worker, &fe, tcp, peer, &mut trace).await;
    record_end(&worker, &fe, &trace, result.err(), started.elapsed());
}

/// The stages, top to bottom. Each `?` is an early end, recorded by the caller.
async fn pipeline<'a>(
    worker: &Worker,
    fe: &'a FrontendRt,
    mut tcp: TcpStream,
    peer: SocketAddr,
    trace: &mut Trace<'a>,
) -> Result<(), ConnError> {
    let cfg = &fe.cfg;
    let _ = tcp.set_nodelay(true);
    let arrival = proxy_in::arrive(&mut tcp, peer, cfg.accept_proxy.as_ref()).await?;
    count_arrival(&fe.metrics, &arrival);
    (trace.client, trace.balancer) = (arrival.client, arrival.balancer);
    let deadline = Deadline::after(cfg.handshake_timeout);
    let hello = handshake::read_client_hello(tcp, deadline).await?;
    // The ClientHello stage: what must see the hello before rustls does (a remote session
    // store looking up the session ID, ACME's acme-tls/1) goes here.
    let tls = fe.tls.load_full();
    let mut hs = handshake::finish(hello, &tls, deadline).await?;
    drop(tls);
    count_handshake(&fe.metrics, &hs);
    if worker.log_connections {
        trace.summary = Some(Summary::of(hs.conn()));
    }
    let Some(pool) = &fe.backends else {
        trace.backend = Some("demo");
        return serve_demo(worker, fe, hs.stream, arrival.client).await;
    };
    let (upstream, lease) = connect_backend(pool, &mut hs.stream, cfg.handshake_timeout).await?;
    trace.backend = Some(lease.name());
    if proxy_out::makes_unique_id(cfg, arrival.passthrough.as_deref()) {
        trace.unique_id = UniqueId::new(worker.id, worker.next_connection());
    }
    let prefix = proxy_out::header(cfg, &hs, &arrival, trace.unique_id.as_bytes())?;
    drop(arrival);
    let (moved, res) = relay_to(fe, hs.stream, upstream, prefix).await;
    trace.moved = moved;
    drop(lease);
    Ok(res?)
}

/// Connects to a backend; without one, the client gets close_notify (an orderly close, not a
/// truncation), bounded, since a client that stopped reading could otherwise hold the task.
async fn connect_backend<'p>(
    pool: &'p BackendPool,
    tls: &mut TlsStream<TcpStream>,
    bound: Duration,
) -> Result<(TcpStream, Lease<'p>), ConnError> {
    match pool.connect().await {
        Ok(x) => Ok(x),
        Err(e) => {
            let _ = tokio::time::timeout(bound, tls.shutdown()).await;
            Err(e.into())
        }
    }
}

/// Relays until both sides are done. An abort on one side is passed on as an abort (RST, no
/// close_notify) to the other, as HAProxy does: an orderly close would let the peer take a cut
/// stream for a complete one. An idle timeout cuts both where they stand.
async fn relay_to(
    fe: &FrontendRt,
    mut tls: TlsStream<TcpStream>,
    mut upstream: TcpStream,
    prefix: Option<(PooledBuf, usize)>,
) -> (Moved, Result<(), RelayError>) {
    let m = &fe.metrics;
    let count = |d: Moved| {
        m.bytes_up.inc_by(d.up);
        m.bytes_down.inc_by(d.down);
    };
    let idle = fe.cfg.idle_timeout;
    // The header goes out with the client's first bytes when they have arrived, in one segment.
    let (moved, res) = relay::relay_with_prefix(&mut tls, &mut upstream, idle, prefix, count).await;
    match &res {
        Err(RelayError::BackendAborted(_)) => abort(tls.get_ref().0),
        Err(RelayError::ClientAborted(_)) => abort(&upstream),
        Err(RelayError::Idle(_)) => {
            abort(tls.get_ref().0);
            abort(&upstream);
        }
        _ => {}
    }
    (moved, res)
}

/// The built-in page describing the connection, in place of a backend.
async fn serve_demo(
    worker: &Worker,
    fe: &FrontendRt,
    mut tls: TlsStream<TcpStream>,
    client: SocketAddr,
) -> Result<(), ConnError> {
    let who = demo::Visitor {
        client,
        frontend: &fe.cfg.name,
        worker: worker.id,
    };
    let body = demo::page(&Summary::of(tls.get_ref().1), who);
    // Boxed: the demo's state would otherwise enlarge every connection's future, relay ones too.
    Box::pin(demo::serve(&mut tls, &body, fe.cfg.idle_timeout))
        .await
        .map_err(|e| ConnError::Relay(RelayError::ClientAborted(e)))
}

fn count_arrival(m: &FrontendMetrics, arrival: &Arrival) {
    match (arrival.balancer, arrival.health_check) {
        (None, _) => {}
        (Some(_), true) => {
            m.proxy_headers_local.inc();
        }
        (Some(_), false) => {
            m.proxy_headers_proxy.inc();
        }
    }
}

fn count_handshake(m: &FrontendMetrics, hs: &Negotiated) {
    if handshake::resumed(hs.conn()) {
        m.handshakes_resumed.inc();
    } else {
        m.handshakes_full.inc();
    }
    if matches!(hs.client_cert, ClientCert::Unverified(_)) {
        m.client_certs_unverified.inc();
    }
}

/// Counts how the connection ended and writes its one line: failures by their loudness (warnings
/// within the per-worker rate limit), the normal end only when connection logs are on.
fn record_end(
    worker: &Worker,
    fe: &FrontendRt,
    trace: &Trace<'_>,
    error: Option<ConnError>,
    took: Duration,
) {
    let reason = error.as_ref().map(ConnError::reason);
    if let Some(r) = reason {
        fe.metrics.ended(r);
    }
    let write = match reason.map_or(Loudness::Info, Reason::loudness) {
        Loudness::Quiet => tracing::enabled!(tracing::Level::DEBUG) && log_limit::allow(),
        Loudness::Warn => log_limit::allow(),
        Loudness::Info => worker.log_connections,
    };
    if !write {
        return;
    }
    // An error-level span is enabled whatever the log level, so its fields reach every line.
    let span = tracing::error_span!(
        "conn",
        frontend = %fe.cfg.name,
        client = %trace.client,
        worker = worker.id,
        balancer = tracing::field::Empty,
    );
    if let Some(b) = trace.balancer {
        span.record("balancer", tracing::field::display(b));
    }
    let _entered = span.enter();
    let ms = took.as_millis() as u64;
    match (error, reason) {
        (Some(e), Some(r)) => write_failure(&e, r, trace, ms),
        _ => write_closed(trace, ms),
    }
}

fn write_failure(e: &ConnError, r: Reason, trace: &Trace<'_>, ms: u64) {
    let (backend, up, down) = (
        trace.backend.unwrap_or("-"),
        trace.moved.up,
        trace.moved.down,
    );
    match r.loudness() {
        Loudness::Quiet => {
            tracing::debug!(reason = r.as_str(), error = %e, "{}", r.message());
        }
        Loudness::Warn => {
            tracing::warn!(reason = r.as_str(), error = %e, backend = %backend, up, down, ms, "{}", r.message());
        }
        Loudness::Info => {
            let s = trace.summary.as_ref();
            tracing::info!(reason = r.as_str(), error = %e, backend = %backend, up, down, ms,
                protocol = s.map_or("-", |s| s.protocol), sni = %Dash(s.and_then(|s| s.sni.as_deref())),
                id = trace.unique_id.as_str(), "{}", r.message());
        }
    }
}

fn write_closed(trace: &Trace<'_>, ms: u64) {
    let s = trace.summary.as_ref();
    tracing::info!(
        protocol = s.map_or("-", |s| s.protocol),
        cipher = s.map_or("-", |s| s.cipher),
        group = %Dash(s.and_then(|s| s.group)),
        resumed = s.is_some_and(|s| s.resumed),
        sni = %Dash(s.and_then(|s| s.sni.as_deref())),
        alpn = %Dash(s.and_then(|s| s.alpn.as_deref())),
        backend = %trace.backend.unwrap_or("-"),
        id = trace.unique_id.as_str(),
        up = trace.moved.up,
        down = trace.moved.down,
        ms,
        "connection closed"
    );
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

/// Keeps the active-connections gauge right on every exit path.
struct ActiveGuard<'a>(&'a FrontendMetrics);

impl<'a> ActiveGuard<'a> {
    fn new(m: &'a FrontendMetrics) -> Self {
        m.active.inc();
        ActiveGuard(m)
    }
}

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.active.dec();
    }
}

/// Makes the coming close of `tcp` a reset: SO_LINGER 0 sends RST and drops unsent bytes.
fn abort(tcp: &TcpStream) {
    if let Err(e) = tcp.set_zero_linger() {
        tracing::debug!(error = %e, "could not arm an abortive close");
    }
}
