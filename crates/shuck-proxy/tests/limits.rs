//! Limits and timeouts of the engine, started in-process: max_connections queues new clients in
//! the kernel backlog, is one limit for all workers and changes on reload; the demo backend drops a client that
//! stalls mid-request.

use shuck_test_support::harness;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use harness::Running;
use rustls::pki_types::ServerName;
use shuck_test_support::clients::{sum, wait_metric};
use shuck_test_support::pki::{connector, toml_path, Key, Pki};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// One frontend on port 0 serving good.test, with `frontend` keys, after the `global` keys.
fn config(pki: &Pki, frontend: &str, global: &str) -> String {
    let cert = pki.leaf("good.pem", "good", &["good.test"], Key::EcdsaP256);
    let mut s = format!("{global}\n");
    let _ = write!(
        s,
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n{frontend}\n",
        toml_path(&cert)
    );
    s
}

/// A TCP backend that echoes what it receives.
async fn echo_backend() -> SocketAddr {
    let b = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = b.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = b.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

type Tls = tokio_rustls::client::TlsStream<TcpStream>;

fn name() -> ServerName<'static> {
    ServerName::try_from("good.test").expect("name")
}

/// The engine with `workers` workers and `max_connections = max`, relaying to an echo backend.
async fn limited(pki: &Pki, workers: usize, max: usize) -> Running {
    let backend = echo_backend().await;
    Running::start(&config(
        pki,
        &format!("backend = \"{backend}\""),
        &format!("workers = {workers}\nmax_connections = {max}"),
    ))
}

/// Starts a TLS handshake as a new client; it must still be waiting after 700 ms.
async fn waiting(
    conn: &TlsConnector,
    addr: SocketAddr,
    what: &str,
) -> tokio::task::JoinHandle<std::io::Result<Tls>> {
    let tcp = TcpStream::connect(addr).await.expect("backlog accepts");
    let conn = conn.clone();
    let mut queued = tokio::spawn(async move { conn.connect(name(), tcp).await });
    let waited = tokio::time::timeout(Duration::from_millis(700), &mut queued).await;
    assert!(waited.is_err(), "{what} served beyond max_connections");
    queued
}

/// The client `waiting` started, served within 10 s.
async fn served_now(queued: tokio::task::JoinHandle<std::io::Result<Tls>>, what: &str) -> Tls {
    let mut tls = tokio::time::timeout(Duration::from_secs(10), queued)
        .await
        .unwrap_or_else(|_| panic!("{what} not served within 10 s"))
        .expect("join")
        .expect("queued handshake");
    echo(&mut tls, b"late").await;
    tls
}

/// Sends `msg` and reads it back through the echo backend.
async fn echo(tls: &mut Tls, msg: &[u8; 4]) {
    tls.write_all(msg).await.expect("write");
    let mut buf = [0u8; 4];
    tls.read_exact(&mut buf).await.expect("echo");
    assert_eq!(&buf, msg);
}

/// A client that is served at once (within 10 s): handshake done and an echo back.
async fn served(conn: &TlsConnector, addr: SocketAddr, what: &str) -> Tls {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let mut tls = tokio::time::timeout(Duration::from_secs(10), conn.connect(name(), tcp))
        .await
        .unwrap_or_else(|_| panic!("{what} not served within 10 s"))
        .expect("handshake");
    echo(&mut tls, b"ping").await;
    tls
}

/// The next client gets a TCP connection (kernel backlog) but no TLS service while every slot
/// is taken; closing `holder` frees one, and the queued client is then served.
async fn queued_until_closed(
    conn: &TlsConnector,
    addr: SocketAddr,
    holder: Tls,
    what: &str,
) -> Tls {
    let queued = waiting(conn, addr, what).await;
    close(holder).await;
    served_now(queued, what).await
}

async fn close(mut tls: Tls) {
    tls.shutdown().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_queues_new_clients_in_the_backlog() {
    let pki = Pki::new();
    let shuck = limited(&pki, 1, 1).await;
    let conn = connector(&pki);
    let first = served(&conn, shuck.addr(), "the first connection").await;
    let mut second = queued_until_closed(&conn, shuck.addr(), first, "a second connection").await;
    echo(&mut second, b"pong").await;
}

/// max_connections is one limit for the process, not a share per worker: SO_REUSEPORT spreads
/// connections by a hash of their addresses, so with per-worker shares a client could wait at a
/// full worker while another had room (8 connections split 4/4 only 27% of the time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_is_one_limit_shared_by_all_workers() {
    let pki = Pki::new();
    let shuck = limited(&pki, 2, 8).await;
    let conn = connector(&pki);
    let mut held = Vec::new();
    for i in 0..8 {
        held.push(served(&conn, shuck.addr(), &format!("connection {i} of 8")).await);
    }
    // The ninth waits, whichever worker the kernel hands it to.
    let first = held.remove(0);
    queued_until_closed(&conn, shuck.addr(), first, "a ninth connection").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_backend_drops_a_client_that_stalls_mid_request() {
    let pki = Pki::new();
    // No backend: the built-in demo page answers.
    let shuck = Running::start(&config(&pki, "idle_timeout = \"1s\"", ""));
    let tcp = TcpStream::connect(shuck.addr()).await.expect("connect");
    let mut tls = connector(&pki)
        .connect(ServerName::try_from("good.test").expect("name"), tcp)
        .await
        .expect("handshake");
    // Announces a large body, then goes silent.
    tls.write_all(b"POST / HTTP/1.1\r\nHost: good.test\r\nContent-Length: 999999\r\n\r\nabc")
        .await
        .expect("write");
    let started = Instant::now();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(15), tls.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the stalled client was never dropped");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
}

/// Connections to the metrics endpoint that never send a request must not keep Prometheus out:
/// with every scrape slot taken by one, a real scrape is still answered in about a second, not
/// after the ten seconds an answer may take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_starve_the_metrics_endpoint() {
    let pki = Pki::new();
    let server = Running::start(&config(&pki, "", "metrics_listen = \"127.0.0.1:0\""));
    let metrics = server.metrics.expect("metrics address");
    let mut idle = Vec::new();
    for _ in 0..16 {
        idle.push(TcpStream::connect(metrics).await.expect("connect"));
    }
    let started = Instant::now();
    let mut s = TcpStream::connect(metrics).await.expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut answer))
        .await
        .expect("answered within 20 s")
        .expect("read");
    let waited = started.elapsed();
    assert!(
        answer.starts_with(b"HTTP/1.1 200 OK"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    assert!(
        waited < Duration::from_secs(5),
        "the scrape waited {waited:?} behind idle connections"
    );
    drop(idle);
}

/// A reload changes max_connections in place: a raised limit serves the client waiting in the
/// backlog at once; a lowered one closes no connection and queues new clients until enough of
/// those open have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_max_connections_and_closes_no_connection() {
    let pki = Pki::new();
    let backend = echo_backend().await;
    let text = |max: usize| {
        config(
            &pki,
            &format!("backend = \"{backend}\""),
            &format!("workers = 1\nmax_connections = {max}"),
        )
    };
    let (shuck, mut reloader) = Running::start_reloadable(&text(1));
    let mut reload = |max: usize| {
        let notes = tokio::task::block_in_place(|| reloader.reload(&harness::config(&text(max))))
            .expect("reload");
        assert!(notes.is_empty(), "nothing left for a restart: {notes:?}");
    };
    let conn = connector(&pki);
    let mut first = served(&conn, shuck.addr(), "the first connection").await;
    let queued = waiting(&conn, shuck.addr(), "a second connection at max 1").await;
    reload(2);
    let mut second = served_now(queued, "the waiting connection after max 2").await;
    echo(&mut first, b"held").await;

    reload(1);
    echo(&mut first, b"kept").await;
    echo(&mut second, b"kept").await;
    let queued = waiting(
        &conn,
        shuck.addr(),
        "a third connection at max 1 with two open",
    )
    .await;
    close(first).await;
    let queued = {
        // One still open: the limit of one is still reached.
        let mut queued = queued;
        let waited = tokio::time::timeout(Duration::from_millis(700), &mut queued).await;
        assert!(
            waited.is_err(),
            "a connection served beyond the lowered max 1"
        );
        queued
    };
    close(second).await;
    served_now(queued, "the waiting connection once the two closed").await;
}

/// An echo backend that counts the connections it accepted.
async fn counting_backend() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let b = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = b.local_addr().expect("addr");
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = b.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, count)
}

/// A reload that changes something other than the backends keeps each worker's backend pool,
/// its connection counts (and health) with it: with least_connections, the next client goes to
/// the backend without one. A reload that changes the backends starts a pool afresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_backend_pool_unless_the_backends_change() {
    let pki = Pki::new();
    let (a, at_a) = counting_backend().await;
    let (b, at_b) = counting_backend().await;
    let (c, _) = counting_backend().await;
    let text = |backends: &str, idle: &str| {
        config(
            &pki,
            &format!("backend = [{backends}]\nbackend_policy = \"least_connections\"\nidle_timeout = \"{idle}\""),
            "workers = 1",
        )
    };
    let (shuck, mut reloader) =
        Running::start_reloadable(&text(&format!("\"{a}\", \"{b}\""), "60s"));
    let mut reload = |text: String| {
        let notes = tokio::task::block_in_place(|| reloader.reload(&harness::config(&text)))
            .expect("reload");
        assert!(notes.is_empty(), "{notes:?}");
    };
    let conn = connector(&pki);
    let count = |n: &std::sync::Arc<std::sync::atomic::AtomicUsize>| {
        n.load(std::sync::atomic::Ordering::SeqCst)
    };
    let first = served(&conn, shuck.addr(), "the first client").await;
    assert_eq!(
        (count(&at_a), count(&at_b)),
        (1, 0),
        "the first client goes to the first backend"
    );
    reload(text(&format!("\"{a}\", \"{b}\""), "30s"));
    let second = served(&conn, shuck.addr(), "a client after an idle_timeout reload").await;
    assert_eq!(
        (count(&at_a), count(&at_b)),
        (1, 1),
        "the pool kept its count of the first client's connection"
    );
    reload(text(&format!("\"{a}\", \"{b}\", \"{c}\""), "30s"));
    let third = served(&conn, shuck.addr(), "a client after the backends changed").await;
    assert_eq!(
        (count(&at_a), count(&at_b)),
        (2, 1),
        "a new pool counts from zero: the first backend again"
    );
    for tls in [first, second, third] {
        close(tls).await;
    }
}

/// A TLS client from the loopback address `from`, served at once: handshake and an echo back.
async fn served_from(conn: &TlsConnector, from: &str, addr: SocketAddr) -> Tls {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    let ip: std::net::IpAddr = from.parse().expect("ip");
    socket
        .bind(SocketAddr::new(ip, 0))
        .expect("bind the source");
    let tcp = socket.connect(addr).await.expect("connect");
    let mut tls = tokio::time::timeout(Duration::from_secs(10), conn.connect(name(), tcp))
        .await
        .expect("served within 10 s")
        .expect("handshake");
    echo(&mut tls, b"ping").await;
    tls
}

/// Whether shuck closed `tls` in order (close_notify, then EOF) within `within`.
async fn closed_in_order(tls: &mut Tls, within: Duration) -> bool {
    let mut buf = [0u8; 16];
    matches!(
        tokio::time::timeout(within, tls.read(&mut buf)).await,
        Ok(Ok(0))
    )
}

/// Near `max_connections`, relayed connections idle for 5 s are closed to free slots, the
/// source holding the most losing its oldest first: with 10 slots, one connection from a light
/// source and nine from a heavy one, the heavy source's oldest three close in order (the count
/// back below 80%), its newest and the light one carry on, a client waiting in the backlog is
/// served, and each close is counted. (That a heavy source goes before an older idle
/// connection of a lighter one: `conn::idle`'s unit tests, on a paused clock; here the light
/// connection moves a byte last, so no tick can find it idle before the heavy ones.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn near_the_limit_the_heaviest_sources_oldest_idle_connections_close_first() {
    let pki = Pki::new();
    let backend = echo_backend().await;
    let shuck = Running::start(&config(
        &pki,
        &format!("backend = \"{backend}\""),
        "workers = 1\nmax_connections = 10\nmetrics_listen = \"127.0.0.1:0\"",
    ));
    let conn = connector(&pki);
    let mut light = served_from(&conn, "127.0.0.61", shuck.addr()).await;
    let mut heavy = Vec::new();
    for _ in 0..9 {
        heavy.push(served_from(&conn, "127.0.0.62", shuck.addr()).await);
    }
    echo(&mut light, b"late").await;
    let queued = waiting(&conn, shuck.addr(), "an eleventh client").await;
    for (i, tls) in heavy.iter_mut().take(3).enumerate() {
        assert!(
            closed_in_order(tls, Duration::from_secs(15)).await,
            "the heavy source's connection {i} was not closed"
        );
    }
    served_now(queued, "the client in the backlog").await;
    echo(&mut light, b"lite").await;
    for tls in heavy.iter_mut().skip(6) {
        echo(tls, b"kept").await;
    }
    let metrics = shuck.metrics.expect("metrics");
    let label = "reason=\"evicted_idle\"";
    let text = tokio::task::spawn_blocking(move || {
        wait_metric(metrics, "shuck_refused_total", &[label], 3)
    })
    .await
    .expect("scrape");
    let evicted = sum(&text, "shuck_refused_total", &["reason=\"evicted_idle\""]);
    assert!((3..=5).contains(&evicted), "{evicted} counted\n{text}");
}
