//! One client connection as a pipeline of stages, each taking and returning values:
//!
//! `proxy_in::arrive → tls::handshake::hello::read_client_hello → tls::handshake::finish →
//! backend connect → backend_header::header → relay` (or the demo page after the handshake).
//!
//! Any stage may end the connection with a [`ConnError`]; its metric and its one log line are
//! written once, at the end, by `access_log::record_end`. The line names the frontend, the client, the
//! worker and (when a PROXY header was read) the load balancer as fields of its own, top-level
//! in JSON logs, as collectors expect them.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::backend::{ConnectError, Lease, TlsToBackendError, Upstream};
use crate::certs::acme;
use crate::certs::acme::challenge::Challenges;
use crate::config::backend_tls::{BackendTls, ServerName as TlsName};
use crate::config::Route;
use crate::conn::backend_header::{self, UniqueId};
use crate::conn::conn_error::ConnError;
use crate::conn::conn_error::Refusal;
use crate::conn::demo;
use crate::conn::idle::{self, Registration};
use crate::conn::proxy_in::{self, Arrival};
use crate::conn::relay::{self, Moved, RelayError};
use crate::mem::buf_pool::PooledBuf;
use crate::metrics::FrontendMetrics;
use crate::proto::hello_fields;
use crate::proto::ja4::{self, Ja4};
use crate::tls::handshake::error::Deadline;
use crate::tls::handshake::hello::{self, Hello};
use crate::tls::handshake::{self, ClientCert, Negotiated, Summary};
use crate::tls::stream::{Ktls, TlsStream};
use crate::worker::access_log::{record_end, AccessRecord};
use crate::worker::admission::Admitted;
use crate::worker::listing::{Alpn, ConnInfo};
use crate::worker::{Worker, WorkerFrontend, WorkerPool};

/// Serves one accepted connection to its end.
pub(crate) async fn handle(
    worker: Rc<Worker>,
    fe: Rc<WorkerFrontend>,
    tcp: TcpStream,
    (peer, pressured): (SocketAddr, bool),
) {
    let started = Instant::now();
    let _active = ActiveGuard::new(&fe.metrics);
    let mut trace = AccessRecord {
        client: peer,
        balancer: None,
        summary: None,
        backend: None,
        route: None,
        unique_id: UniqueId::default(),
        moved: Moved::default(),
        accepted: started,
        handshake_ms: None,
        connect_ms: None,
        admitted: None,
        ja4: None,
        pressured,
        sni_sent: None,
    };
    if pressured {
        fe.metrics.pressured.inc();
    }
    let result = pipeline(&worker, &fe, tcp, peer, &mut trace).await;
    record_end(
        &worker,
        &fe,
        &trace,
        result.err().as_ref(),
        started.elapsed(),
    );
}

/// The stages, top to bottom. Each `?` is an early end, recorded by the caller.
///
/// Each stage's state is an allocation of its own, made when the stage starts and freed when
/// it ends: a connection waiting for its ClientHello or its handshake holds only that stage's
/// state, not room for the relay's, and an established one none for the handshake's. (An async
/// fn's future is as large as its largest stage; a slowloris connection paid for all of them.)
async fn pipeline<'a>(
    worker: &Worker,
    fe: &'a Rc<WorkerFrontend>,
    tcp: TcpStream,
    peer: SocketAddr,
    trace: &mut AccessRecord<'a>,
) -> Result<(), ConnError> {
    let (read, mut arrival) = Box::pin(arrive_with_hello(fe, tcp, peer, trace)).await?;
    let admitted = trace.admitted.as_ref();
    let (ja4, sni) = (&mut trace.ja4, &mut trace.sni_sent);
    let stage = handshake_stage(worker, fe, read, (admitted, ja4, sni));
    let Some(mut hs) = Box::pin(stage).await? else {
        trace.backend = Some("acme-tls/1");
        return Ok(());
    };
    trace.handshake_ms = Some(trace.since_accept());
    let resumed = hs.conn().is_some_and(handshake::resumed);
    fe.metrics.handshake_took(resumed, trace.accepted.elapsed());
    if worker.log_connections() {
        // Now, while rustls still has the connection (the relay takes the records over).
        trace.summary = Some(Box::new(Summary::of(&hs)));
    }
    // What the handshake settled stays here, borrowed: an async fn keeps room for the values
    // it is given for as long as it runs, and again for its own copies of them (this one
    // outlives every idle connection).
    Box::pin(serve_negotiated(worker, fe, &mut hs, &mut arrival, trace)).await
}

/// A ClientHello read, and the deadline the handshake must meet.
struct HelloRead {
    hello: Box<Hello>,
    deadline: Deadline,
}

/// The PROXY header (when expected) and the ClientHello.
async fn arrive_with_hello<'a>(
    fe: &'a WorkerFrontend,
    mut tcp: TcpStream,
    peer: SocketAddr,
    trace: &mut AccessRecord<'a>,
) -> Result<(HelloRead, Arrival), ConnError> {
    let cfg = &fe.cfg;
    // No TCP_NODELAY here: Linux copies it from the listening socket (`listener::bind` sets it).
    // The header's destination: wanted when the frontend or any of its routes sends one.
    let want_local =
        cfg.proxy_protocol.send.is_some() || cfg.route.0.iter().any(|r| r.send.is_some());
    let arrival = proxy_in::arrive(
        &mut tcp,
        peer,
        cfg.proxy_protocol.accept.as_ref(),
        want_local,
    )
    .await?;
    count_arrival(&fe.metrics, &arrival);
    (trace.client, trace.balancer) = (arrival.client, arrival.balancer);
    trace.admitted = fe.gate.admit(&cfg.admission, arrival.client.ip())?;
    let deadline = Deadline::after(trace.timeouts(fe).handshake);
    let hello = hello::read_client_hello(tcp, deadline).await?;
    let read = HelloRead { hello, deadline };
    Ok((read, arrival))
}

/// The ClientHello stage (what must see the hello before rustls does: an ACME validator, a
/// remote session store looking the session up), then the handshake. `None`: the connection was
/// an ACME validator's, answered here.
async fn handshake_stage(
    worker: &Worker,
    fe: &WorkerFrontend,
    read: HelloRead,
    (admitted, ja4, sni): (
        Option<&Admitted>,
        &mut Option<Box<Ja4>>,
        &mut Option<Box<str>>,
    ),
) -> Result<Option<Negotiated>, ConnError> {
    let sent = read.hello.sent_name();
    let result = hello_to_handshake(worker, fe, read, (admitted, ja4)).await;
    if result.is_err() {
        *sni = sent.to_boxed();
    }
    result
}

/// [`handshake_stage`]'s work, from the ClientHello read to the handshake done.
async fn hello_to_handshake(
    worker: &Worker,
    fe: &WorkerFrontend,
    mut read: HelloRead,
    (admitted, ja4): (Option<&Admitted>, &mut Option<Box<Ja4>>),
) -> Result<Option<Negotiated>, ConnError> {
    let tls = fe.tls.load_full();
    // Before the ACME branch: offering `acme-tls/1` does not get a denied client past it.
    if wants_ja4(worker, fe) {
        *ja4 = ja4::of_stream(&read.hello.received).map(Box::new);
        if let Some(j) = ja4.as_deref() {
            fe.metrics.ja4.observe(j);
        }
        let denied = &fe.cfg.admission.deny_ja4;
        if ja4
            .as_deref()
            .is_some_and(|j| denied.iter().any(|d| d == j.as_str()))
        {
            return Err(Refusal::Ja4.into());
        }
    }
    if let Some(challenge) = &fe.acme_challenge {
        if acme::challenge::wants_challenge(read.hello.accepted.client_hello().alpn()) {
            fetch_fleet_challenge(&worker.engine().challenges, fe, &read).await;
            handshake::answer_acme(read.hello, challenge.clone(), read.deadline).await?;
            return Ok(None);
        }
    }
    let offers_resumption = admit_handshake(worker, fe, &read, admitted)?;
    super::on_demand::wait_for_certificate(&tls, fe, &read.hello, &mut read.deadline).await;
    let prefetched = match &tls.remote {
        Some(remote) => remote.prefetch(&read.hello.received).await,
        None => None,
    };
    let load = (&worker.load, worker.engine().overload_threshold());
    let finished = handshake::finish(
        read.hello,
        &tls,
        read.deadline,
        prefetched,
        (keeps_sni(worker, fe), load),
    )
    .await;
    if offers_resumption {
        // Made-up tickets and PSKs show here: offers that did not resume.
        let resumed = finished
            .as_ref()
            .is_ok_and(|hs| hs.conn().is_some_and(handshake::resumed));
        worker.load.offer_ended(resumed);
    }
    let hs = finished?;
    count_handshake(&fe.metrics, &hs);
    if offers_resumption && hs.conn().is_some_and(handshake::resumed) {
        fe.gate.refund_resumed(&fe.cfg.admission, admitted);
    }
    Ok(Some(hs))
}

/// The checks a ClientHello passes before its handshake: a worker shedding load lets only some
/// new full handshakes in (the heaviest sources' fewest), and `per_client.handshakes` charges
/// the client. Whether the hello offers to resume (looked at only when either asks).
fn admit_handshake(
    worker: &Worker,
    fe: &WorkerFrontend,
    read: &HelloRead,
    admitted: Option<&Admitted>,
) -> Result<bool, ConnError> {
    let a = &fe.cfg.admission;
    let rated = admitted.is_some() && fe.gate.limits_handshakes(a);
    if !rated && !worker.load.shedding() {
        return Ok(false);
    }
    let offers = hello_fields::offers_resumption(&read.hello.received);
    if worker.load.shedding() {
        // Windows close on handshakes; while most are shed, on hellos too.
        worker
            .load
            .tick(Instant::now(), worker.engine().overload_threshold());
        let let_in = if offers {
            worker.load.admits_offer()
        } else {
            worker.load.admits_full(fe.gate.is_heavy(a, admitted))
        };
        if !let_in {
            return Err(Refusal::Overload.into());
        }
    }
    if rated {
        fe.gate.handshake(a, admitted, offers)?;
    }
    Ok(offers)
}

/// Whether anything uses the ClientHello's JA4 fingerprint: `deny_ja4`, the access log, a
/// PROXY TLV (the frontend's or a route's).
fn wants_ja4(worker: &Worker, fe: &WorkerFrontend) -> bool {
    let cfg = &fe.cfg;
    !cfg.admission.deny_ja4.is_empty()
        || worker.log_connections()
        || (cfg.proxy_protocol.send.is_some() && cfg.proxy_protocol.tlvs.ja4)
        || cfg.route.0.iter().any(|r| r.send.is_some() && r.tlvs.ja4)
}

/// A validator asking for a name this process has no order for: another host of the fleet
/// may have, and published its challenge to the store (fetched within the store's timeout).
/// Only for the frontend's own `acme.names` (any name with `on_demand`): any other SNI asks
/// nothing of the store.
async fn fetch_fleet_challenge(challenges: &Challenges, fe: &WorkerFrontend, read: &HelloRead) {
    let Some(store) = &fe.acme_store else {
        return;
    };
    let Some(name) = read
        .hello
        .accepted
        .client_hello()
        .server_name()
        .map(str::to_string)
    else {
        return;
    };
    // On demand, any name may be on order somewhere in the fleet: a validator's connection
    // costs one store lookup, as for the configured names.
    let ordered = fe
        .cfg
        .acme()
        .is_some_and(|a| a.on_demand.is_some() || acme::challenge::is_ordered(&a.names, &name));
    if !ordered || challenges.is_pending(&name) {
        return;
    }
    let Some(_slot) = challenges.store_lookups.try_slot() else {
        fe.challenge_lookups_busy.inc();
        return;
    };
    let key = acme::fleet::challenge_key(&name);
    // Half the handshake's time left at most: the challenge's handshake needs the rest.
    let now = tokio::time::Instant::now();
    let until = now + read.deadline.at().saturating_duration_since(now) / 2;
    let material = store.get_by(&key, until).await;
    let provider = crate::tls::provider_for(&fe.cfg);
    challenges.adopt(&name, material.as_deref(), &provider);
}

/// Whether anything will show the client's server name: the demo page, a route's match, a
/// connection log line, the admin socket's listing, the name asked of a TLS backend, a PROXY
/// header's authority.
fn keeps_sni(worker: &Worker, fe: &WorkerFrontend) -> bool {
    let cfg = &fe.cfg;
    // With routes the name is kept anyway: only the frontend's own backends remain to ask.
    let asked_of_backend = |b: &crate::config::Backends| {
        b.tls
            .as_ref()
            .is_some_and(|t| t.server_name == TlsName::Client)
    };
    fe.backends.is_none()
        || !cfg.route.0.is_empty()
        || worker.log_connections()
        || worker.engine().lists_connections()
        || asked_of_backend(&cfg.backend)
        || (cfg.proxy_protocol.send.is_some() && cfg.proxy_protocol.tlvs.authority)
}

/// The stages after the handshake: the backend (or the demo page), the PROXY header, the relay.
/// This future lives as long as the connection, so what it holds across the relay is memory per
/// idle connection: the connect is boxed apart (its future is as large as the relay's), and
/// what only the header needs is dropped before the relay.
async fn serve_negotiated<'a>(
    worker: &Worker,
    fe: &'a Rc<WorkerFrontend>,
    hs: &mut Negotiated,
    arrival: &mut Arrival,
    trace: &mut AccessRecord<'a>,
) -> Result<(), ConnError> {
    let cfg = &fe.cfg;
    let (route, pool) = match destination(fe, hs) {
        Destination::Demo => {
            trace.backend = Some("demo");
            return serve_demo(worker, fe, hs, (arrival.client, trace.timeouts(fe).idle)).await;
        }
        Destination::Unmatched => {
            // An orderly close, bounded, as when no backend answers.
            let _ = tokio::time::timeout(cfg.timeouts.handshake, hs.stream.shutdown()).await;
            return Err(ConnError::NoRoute);
        }
        Destination::Backends { route, pool } => (route, pool),
    };
    // The route must carry the TLS policy the handshake was made under: a route without a
    // policy of its own (the frontend's) or with another one must not receive a connection
    // whose handshake a later route's policy let through (or the other way round).
    let routes = &cfg.route.0;
    let taken = route
        .and_then(|r| routes.iter().position(|x| std::ptr::eq(x, r)))
        .filter(|&i| routes[i].policy.is_some());
    if taken != hs.policy {
        let _ = tokio::time::timeout(cfg.timeouts.handshake, hs.stream.shutdown()).await;
        return Err(ConnError::PolicyMismatch);
    }
    trace.route = route;
    let connect = connect_backend(pool, &mut hs.stream, cfg.timeouts.handshake);
    let (upstream, lease) = Box::pin(connect).await?;
    if let Some(s) = trace.summary.as_mut() {
        s.backend_source = upstream.tcp().and_then(|t| t.local_addr().ok());
    }
    // Now, while rustls still has the connection (the relay takes the records over).
    let mut listed = listing_of(fe, hs, (route, pool), &lease, arrival.client);
    let prefix =
        before_relay(worker, fe, (route, pool), &lease, hs, arrival, trace).inspect_err(|e| {
            if let (ConnError::BackendHeader(_), Some(c)) = (e, pool.errors.get(lease.index())) {
                c.proxy_header.inc();
            }
        })?;
    // In TLS to the backend (`backend_tls`): the PROXY header first, in the clear.
    let backends = route.map_or(&cfg.backend, |r| &r.backend);
    let (upstream, prefix) = match &backends.tls {
        None => (upstream, prefix),
        Some(settings) => {
            let route_name = route.map_or("default", |r| r.name.as_str());
            let to = (route_name, settings, lease.name(), backends.connect_timeout);
            let wrapped = Box::pin(backend_tls(fe, to, upstream, prefix, hs.sni.as_deref())).await;
            let state = pool.tls_states.get(lease.index());
            match wrapped {
                Ok(up) => {
                    state.inspect(|s| s.worked());
                    (up, None)
                }
                Err(e) => {
                    if let Some(c) = pool.errors.get(lease.index()) {
                        c.tls.inc();
                    }
                    // Against the backend only when it is its own fault: not this side's, and
                    // not a name a client chose (which any client could make fail).
                    let backends_fault = matches!(e, TlsToBackendError::Handshake(_))
                        && settings.server_name != TlsName::Client;
                    if backends_fault {
                        lease.seen(crate::backend::health::Seen::Failed);
                        state.inspect(|s| s.failed(&e));
                    }
                    let _ =
                        tokio::time::timeout(cfg.timeouts.handshake, hs.stream.shutdown()).await;
                    return Err(ConnError::BackendTls(e));
                }
            }
        }
    };
    listed.sni = hs.sni.take();
    let idle = trace.timeouts(fe).idle;
    let source = idle::source_of(arrival.client.ip(), cfg.admission.client_prefixes());
    let registration = worker.idle.register(source, listed);
    let (moved, res) = relay_to(fe, &mut hs.stream, (upstream, idle, &registration), prefix).await;
    let broke = matches!(
        res,
        Err(RelayError::Backend(_) | RelayError::BackendAborted(_))
    );
    if let (true, Some(c)) = (broke, pool.errors.get(lease.index())) {
        c.relay.inc();
    }
    lease.seen(relay::backend_seen(moved, &res));
    count_ktls(&fe.metrics, &hs.stream);
    trace.moved = moved;
    drop(lease);
    Ok(res?)
}

/// The backend connection `upstream` in TLS as `settings` say (`route`'s client
/// configuration, this worker's), the PROXY header `prefix` sent before the handshake.
async fn backend_tls(
    fe: &WorkerFrontend,
    (route, settings, backend, within): (&str, &BackendTls, &str, Duration),
    upstream: Upstream,
    prefix: Option<(PooledBuf, usize)>,
    client_sni: Option<&str>,
) -> Result<Upstream, TlsToBackendError> {
    let config = fe.tls.load().backend_client(route).ok_or_else(|| {
        TlsToBackendError::Local(
            "no TLS client configuration for these backends (reload pending)".into(),
        )
    })?;
    let name =
        crate::tls::backend_tls::server_name(settings, client_sni, backend).ok_or_else(|| {
            TlsToBackendError::Local(format!(
                "no server name to ask {backend} for: set backend_tls.server_name"
            ))
        })?;
    let first = prefix.as_ref().map(|(buf, len)| &buf.bytes()[..*len]);
    upstream.into_tls(first, (config, name), within).await
}

/// What the admin socket shows of the connection while it relays (`worker::listing`); the
/// server name moves there once the PROXY header is made (nothing after it reads the name).
fn listing_of(
    fe: &Rc<WorkerFrontend>,
    hs: &mut Negotiated,
    (route, pool): (Option<&Route>, &WorkerPool),
    lease: &Lease<'_>,
    client: SocketAddr,
) -> ConnInfo {
    let conn = hs.conn();
    let route = route.and_then(|r| fe.cfg.route.0.iter().position(|x| std::ptr::eq(x, r)));
    ConnInfo {
        fe: fe.clone(),
        client,
        sni: None,
        alpn: Alpn::of(conn.and_then(rustls::CommonState::alpn_protocol)),
        version: conn
            .and_then(rustls::CommonState::protocol_version)
            .map_or(0, u16::from),
        route: route.and_then(|i| u16::try_from(i).ok()),
        pool: pool.pool.clone(),
        backend: u16::try_from(lease.index()).unwrap_or(u16::MAX),
    }
}

/// Between the connect and the relay: the access record and counters, the PROXY header to send
/// first, and the TLS records taken over from rustls (nothing asks it about the handshake from
/// here on).
fn before_relay<'a>(
    worker: &Worker,
    fe: &'a WorkerFrontend,
    (route, pool): (Option<&'a Route>, &'a WorkerPool),
    lease: &Lease<'a>,
    hs: &mut Negotiated,
    arrival: &mut Arrival,
    trace: &mut AccessRecord<'a>,
) -> Result<Option<(PooledBuf, usize)>, ConnError> {
    let cfg = &fe.cfg;
    trace.backend = Some(lease.name());
    trace.connect_ms = Some(trace.since_accept());
    if let Some(h) = pool.connect_times.get(lease.index()) {
        h.observe(lease.connected_in().as_secs_f64());
    }
    if matches!(hs.client_cert, ClientCert::Unverified(_)) {
        // Counted as passed on: only now is there a backend to pass it to.
        fe.metrics.client_certs_unverified.inc();
    }
    let proxy = route.map_or((cfg.proxy_protocol.send, &cfg.proxy_protocol.tlvs), |r| {
        (r.send, &r.tlvs)
    });
    if backend_header::makes_unique_id(*proxy.1, arrival.passthrough.as_deref()) {
        trace.unique_id = UniqueId::new(worker.id, worker.next_connection());
    }
    let ja4 = trace.ja4.as_deref().map(|j| j.as_str().as_bytes());
    let prefix = backend_header::header(proxy, hs, arrival, (trace.unique_id.as_bytes(), ja4))?;
    arrival.passthrough = None;
    hs.stream
        .take_over_records(cfg.record_layer.ktls)
        .map_err(|e| ConnError::Relay(RelayError::ClientAborted(e)))?;
    Ok(prefix)
}

/// Where a connection goes once its handshake is done.
enum Destination<'a> {
    /// The built-in demo page: a frontend with neither backends nor routes.
    Demo,
    /// A route's backends, or the frontend's own (`route` None).
    Backends {
        route: Option<&'a Route>,
        pool: &'a WorkerPool,
    },
    /// No route matched, and the frontend has no backends of its own.
    Unmatched,
}

/// The first route that matches the server name and ALPN the handshake settled, else the
/// frontend's own backends.
fn destination<'a>(fe: &'a WorkerFrontend, hs: &Negotiated) -> Destination<'a> {
    let routes = &fe.cfg.route.0;
    if !routes.is_empty() {
        let alpn = hs.conn().and_then(rustls::CommonState::alpn_protocol);
        let found = routes
            .iter()
            .zip(&fe.routes)
            .find(|(r, _)| r.matches(hs.sni.as_deref(), alpn));
        if let Some((route, pool)) = found {
            return Destination::Backends {
                route: Some(route),
                pool,
            };
        }
    }
    match &fe.backends {
        Some(pool) => Destination::Backends { route: None, pool },
        None if routes.is_empty() => Destination::Demo,
        None => Destination::Unmatched,
    }
}

/// Connects to a backend; without one, the client gets close_notify (an orderly close, not a
/// truncation), bounded, since a client that stopped reading could otherwise hold the task.
async fn connect_backend<'p>(
    pool: &'p WorkerPool,
    tls: &mut TlsStream,
    bound: Duration,
) -> Result<(Upstream, Lease<'p>), ConnError> {
    match pool.pool.connect().await {
        Ok(x) => Ok(x),
        Err(e) => {
            // Each backend the connection tried failed it: each counts one.
            if let ConnectError::Unreachable { attempts } = &e {
                for (name, _) in attempts {
                    if let Some(c) = pool.errors_of(name) {
                        c.connect.inc();
                    }
                }
            }
            let _ = tokio::time::timeout(bound, tls.shutdown()).await;
            Err(e.into())
        }
    }
}

/// How long an evicted connection's close_notify may take to leave.
const EVICTED_CLOSE: Duration = Duration::from_secs(1);

/// Relays until both sides are done. An abort on one side is passed on as an abort (RST, no
/// close_notify) to the other, as HAProxy does: an orderly close would let the peer take a cut
/// stream for a complete one. An idle timeout cuts both where they stand.
async fn relay_to(
    fe: &WorkerFrontend,
    tls: &mut TlsStream,
    (mut upstream, idle, registration): (Upstream, Duration, &Registration<'_, ConnInfo>),
    prefix: Option<(PooledBuf, usize)>,
) -> (Moved, Result<(), RelayError>) {
    let m = &fe.metrics;
    let count = |d: Moved| {
        m.bytes_up.inc_by(d.up);
        m.bytes_down.inc_by(d.down);
    };
    // The header goes out with the client's first bytes when they have arrived, in one segment.
    let watched = (idle, registration);
    let (moved, res) = relay::relay_with_prefix(tls, &mut upstream, watched, prefix, count).await;
    match &res {
        Err(RelayError::BackendAborted(_)) => abort(tls.tcp()),
        // A Unix socket has no abortive close: the backend sees the socket closed (and its
        // next write fails), the nearest it gets to a reset.
        Err(RelayError::ClientAborted(_)) => upstream.tcp().into_iter().for_each(abort),
        Err(
            RelayError::Idle(_)
            | RelayError::Evicted { in_flight: true }
            | RelayError::ClosedByOperator { in_flight: true },
        ) => {
            abort(tls.tcp());
            upstream.tcp().into_iter().for_each(abort);
        }
        // Closed to free a slot with nothing of ours in flight: close_notify, bounded short
        // (the slot is what this is for); the backend's socket is closed with the relay.
        Err(
            RelayError::Evicted { in_flight: false }
            | RelayError::ClosedByOperator { in_flight: false },
        ) => {
            let _ = tokio::time::timeout(EVICTED_CLOSE, tls.shutdown()).await;
        }
        _ => {}
    }
    (moved, res)
}

/// The built-in page describing the connection, in place of a backend.
async fn serve_demo(
    worker: &Worker,
    fe: &WorkerFrontend,
    hs: &mut Negotiated,
    (client, idle): (SocketAddr, Duration),
) -> Result<(), ConnError> {
    let who = demo::Visitor {
        client,
        frontend: &fe.cfg.name,
        worker: worker.id,
    };
    let summary = Summary::of(hs);
    hs.stream
        .take_over_records(fe.cfg.record_layer.ktls)
        .map_err(|e| ConnError::Relay(RelayError::ClientAborted(e)))?;
    let body = demo::page(&summary, who, hs.stream.records_by());
    // Boxed: the demo's state would otherwise enlarge every connection's future, relay ones too.
    let served = Box::pin(demo::serve(&mut *hs.stream, &body, idle)).await;
    count_ktls(&fe.metrics, &hs.stream);
    served.map_err(|e| match e.kind() {
        std::io::ErrorKind::TimedOut => ConnError::Relay(RelayError::Idle(idle)),
        _ => ConnError::Relay(RelayError::ClientAborted(e)),
    })
}

/// Where a connection that asked for kTLS had its records protected: one that never came to a
/// point where the kernel could take them stayed in user space.
fn count_ktls(m: &FrontendMetrics, stream: &TlsStream) {
    let counter = match stream.ktls() {
        Ktls::Kernel => &m.ktls_kernel,
        Ktls::UserSpace | Ktls::Asked => &m.ktls_user_space,
        Ktls::NotAsked => return,
    };
    counter.inc();
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
    let conn = hs.conn();
    let tls13 = conn.and_then(rustls::CommonState::protocol_version)
        == Some(rustls::ProtocolVersion::TLSv1_3);
    m.handshake(hs.resumed_by, conn.is_some_and(handshake::resumed), tls13);
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
