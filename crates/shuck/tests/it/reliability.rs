//! The reliability suite (docs/reliability.md): hostile and broken peers against the real binary,
//! each bounded in time and on loopback. What each asserts is what an operator relies on: a good
//! client is still served, the bad ones are closed when their timeout says, memory comes back,
//! and nothing the client sent is lost. The figures the tests print (`--nocapture`) are the ones
//! quoted in docs/reliability.md.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use shuck_test_support::clients::{sum, wait_metric};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{rss_kib, HttpBackend, Shuck};

/// Raises this test process's open-files soft limit to its hard limit (the clients need one per
/// connection).
fn raise_fd_limit() -> u64 {
    let (_, hard) = rlimit::Resource::NOFILE.get().expect("getrlimit");
    rlimit::Resource::NOFILE.set(hard, hard).expect("setrlimit");
    hard
}

fn one_frontend(pki: &Pki, backend: SocketAddr, extra: &str) -> String {
    let cert = pki.leaf("rel.pem", "rel", &["rel.test"], Key::EcdsaP256);
    format!(
        "workers = 2\nmax_connections = 16000\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = {}\n{extra}\n",
        toml_path(&cert)
    )
}

/// A blocking rustls client over `tcp`, for rel.test (handshake on first use).
fn blocking_client(
    pki: &Pki,
    tcp: TcpStream,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let config = shuck_test_support::pki::connector(pki).config().clone();
    let name = rustls::pki_types::ServerName::try_from("rel.test").expect("name");
    let conn = rustls::ClientConnection::new(config, name).expect("client");
    rustls::StreamOwned::new(conn, tcp)
}

/// One request with a rustls client, timed from connect to the end of the answer.
fn timed_request(pki: &Pki, addr: SocketAddr) -> Duration {
    let t = Instant::now();
    let tcp = TcpStream::connect(addr).expect("connect");
    let mut tls = blocking_client(pki, tcp);
    tls.write_all(b"GET /good HTTP/1.0\r\n\r\n")
        .expect("request");
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    assert!(
        answer.starts_with(b"HTTP/1."),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    t.elapsed()
}

/// Slowloris: 3,000 connections that send the first bytes of a ClientHello and stall. A good
/// client is served meanwhile; every stalled one is closed at handshake_timeout (and counted);
/// the memory they took goes back (with jemalloc, the default allocator: glibc keeps it).
#[test]
#[cfg_attr(
    not(feature = "jemalloc"),
    ignore = "memory comes back with the jemalloc allocator only"
)]
fn slowloris_connections_are_closed_at_the_handshake_timeout_and_a_good_client_is_served() {
    const N: usize = 3000;
    const N_I64: i64 = 3000;
    // This process's clients and shuck's connections (two descriptors each, with backends).
    assert!(
        raise_fd_limit() >= 2 * N_I64.unsigned_abs() + 500,
        "fd limit too low for {N} clients"
    );
    let pki = Pki::new();
    let backend = HttpBackend::start();
    let shuck = Shuck::start(&one_frontend(
        &pki,
        backend.addr,
        "handshake_timeout = \"4s\"",
    ));
    let metrics = shuck.addrs[1];
    let before = rss_kib(shuck.pid());
    let started = Instant::now();
    let mut stalled = Vec::with_capacity(N);
    for _ in 0..N {
        let mut s = TcpStream::connect(shuck.addr()).expect("connect");
        // A handshake record header and the start of a ClientHello, then nothing.
        s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00])
            .expect("write");
        stalled.push(s);
    }
    let active = wait_metric(metrics, "shuck_connections_active", &[], N_I64);
    assert_eq!(
        sum(&active, "shuck_connections_active", &[]),
        N_I64,
        "{active}"
    );
    let peak = rss_kib(shuck.pid());
    let good = timed_request(&pki, shuck.addr());
    // Every stalled connection is closed by shuck at its deadline: a read sees EOF or a reset
    // well before this test's own deadline.
    let deadline = started + Duration::from_secs(15);
    for s in &mut stalled {
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .expect("timeout");
        let mut b = [0u8; 64];
        loop {
            match s.read(&mut b) {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    panic!(
                        "a stalled connection still open after {:?}",
                        started.elapsed()
                    )
                }
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }
    let all_closed_s = started.elapsed().as_secs_f64();
    drop(stalled);
    let text = wait_metric(
        metrics,
        "shuck_handshake_failures_total",
        &["reason=\"timeout\""],
        N_I64,
    );
    let timeouts = sum(
        &text,
        "shuck_handshake_failures_total",
        &["reason=\"timeout\""],
    );
    assert_eq!(timeouts, N_I64, "{text}");
    // Memory goes back (jemalloc's background purge: seconds).
    let grown = peak.saturating_sub(before);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut after = rss_kib(shuck.pid());
    while after > before + grown / 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        after = rss_kib(shuck.pid());
    }
    println!(
        "slowloris {N}: good request {} ms; all closed {all_closed_s:.1} s after the first opened (timeout 4 s); RSS {before} -> {peak} -> {after} KiB",
        good.as_millis()
    );
    assert!(
        grown > 10 * 1024,
        "the stalled connections took memory: {before} -> {peak} KiB"
    );
    assert!(
        after <= before + grown / 4,
        "memory not given back: {before} -> {peak} -> {after} KiB"
    );
}

/// A backend that answers without end and a client that never reads: shuck stops reading the
/// backend once the client's socket is full, so its memory stays bounded.
#[test]
fn a_client_that_never_reads_holds_no_more_than_the_buffers() {
    let pki = Pki::new();
    let firehose = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = firehose.local_addr().expect("addr");
    let fed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = fed.clone();
    std::thread::spawn(move || {
        let (mut s, _) = firehose.accept().expect("accept");
        let chunk = vec![b'x'; 64 * 1024];
        while s.write_all(&chunk).is_ok() {
            counter.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
        }
    });
    let shuck = Shuck::start(&one_frontend(&pki, backend, "idle_timeout = \"3s\""));
    let before = rss_kib(shuck.pid());
    let tcp = TcpStream::connect(shuck.addr()).expect("connect");
    let mut tls = blocking_client(&pki, tcp);
    tls.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("request");
    // Never read. Give the firehose time to fill every buffer on the way (full buffers are the
    // absence of progress: no event marks them).
    std::thread::sleep(Duration::from_secs(2));
    let held = rss_kib(shuck.pid());
    let pushed = fed.load(std::sync::atomic::Ordering::Relaxed);
    println!("never-reading client: backend pushed {pushed} B before stalling; shuck RSS {before} -> {held} KiB");
    assert!(
        pushed < 64 << 20,
        "shuck kept reading the backend: {pushed} B"
    );
    assert!(
        held < before + 8 * 1024,
        "RSS grew by {} KiB",
        held - before
    );
}

/// A backend that accepts and never reads while the client uploads without end: shuck stops
/// reading the client once the backend's socket is full, so its memory stays bounded.
#[test]
fn a_backend_that_never_reads_holds_no_more_than_the_buffers() {
    let pki = Pki::new();
    let deaf = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = deaf.local_addr().expect("addr");
    let held = std::thread::spawn(move || deaf.accept().map(|(s, _)| s));
    let shuck = Shuck::start(&one_frontend(&pki, backend, ""));
    let before = rss_kib(shuck.pid());
    let tcp = TcpStream::connect(shuck.addr()).expect("connect");
    // rustls' blocking stream also reads while it writes: both bounded.
    tcp.set_write_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    tcp.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("timeout");
    let mut tls = blocking_client(&pki, tcp);
    let chunk = vec![b'u'; 64 * 1024];
    let mut sent = 0usize;
    // Writes block once every buffer on the way is full (the socket may still take a trickle
    // as the kernel grows its buffers, so the loop has its own deadline too).
    let until = Instant::now() + Duration::from_secs(4);
    while sent < 64 << 20 && Instant::now() < until && tls.write_all(&chunk).is_ok() {
        sent += chunk.len();
    }
    let grown = rss_kib(shuck.pid()).saturating_sub(before);
    println!("never-reading backend: client sent {sent} B before stalling; shuck RSS +{grown} KiB");
    assert!(
        sent > 1 << 20,
        "the upload flowed until the buffers were full: {sent} B"
    );
    assert!(sent < 64 << 20, "shuck kept reading the client: {sent} B");
    assert!(grown < 8 * 1024, "RSS grew by {grown} KiB");
    drop(held);
}

/// A backend that never answers the connection attempt (its accept queue is full, so the kernel
/// drops the SYN): the client's connection ends at connect_timeout, counted as a backend
/// connect error, and shuck keeps serving.
#[test]
fn a_black_hole_backend_ends_at_connect_timeout() {
    let pki = Pki::new();
    let hole =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    hole.bind(&"127.0.0.1:0".parse::<SocketAddr>().expect("addr").into())
        .expect("bind");
    hole.listen(0).expect("listen");
    let backend = hole.local_addr().expect("addr").as_socket().expect("inet");
    // Fill the accept queue (never accepted): further SYNs go unanswered.
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        s.set_nonblocking(true).expect("nonblocking");
        let _ = s.connect(&backend.into());
        fillers.push(s);
    }
    // The kernel completes the fillers' handshakes on its own; nothing reports the backlog full.
    std::thread::sleep(Duration::from_millis(200));
    let shuck = Shuck::start(&one_frontend(&pki, backend, "connect_timeout = \"1s\""));
    let started = Instant::now();
    let out = shuck_test_support::clients::curl_at(
        &pki,
        shuck.addr(),
        "rel.test",
        "/",
        &["--max-time", "20"],
    );
    let took = started.elapsed();
    assert!(
        !out.status.success(),
        "no answer without a backend: {out:?}"
    );
    let text = wait_metric(
        shuck.addrs[1],
        "shuck_backend_errors_total",
        &["kind=\"connect\""],
        1,
    );
    assert_eq!(
        sum(&text, "shuck_backend_errors_total", &["kind=\"connect\""]),
        1,
        "{text}"
    );
    assert!(
        shuck.log_text().contains("connect timed out after 1s"),
        "{}",
        shuck.log_text()
    );
    println!("black-hole backend: the client's request ended after {took:?} (connect_timeout 1 s)");
    drop(fillers);
}

/// One closed-loop `shuck bench` round against `target`: its JSON totals.
fn bench_round(
    target: SocketAddr,
    ca: &std::path::Path,
    (tls, resume): (&str, &str),
    secs: u32,
) -> serde_json::Value {
    let secs = secs.to_string();
    let mut cmd = std::process::Command::new(&*shuck_test_support::process::SHUCK);
    cmd.args(["bench", &target.to_string(), "--ca"])
        .arg(ca)
        .args([
            "--sni", "rel.test", "-c", "16", "-k", "4", "--tls", tls, "--resume", resume,
        ])
        .args(["--duration", &secs, "--step-duration", &secs])
        .args([
            "--expect-size",
            "1024",
            "--timeout",
            "5",
            "--json",
            "--quiet",
        ]);
    let out = shuck_test_support::process::run_bounded(&mut cmd, b"", 60);
    assert!(
        out.status.success(),
        "shuck bench: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("bench JSON");
    v["totals"].clone()
}

/// A compressed soak: rounds of load (TLS 1.3 PSK, TLS 1.2 session IDs and tickets in turn, 4
/// requests per session: full handshakes and resumptions, with a session cache that fills in the
/// first rounds), each followed by a quiet moment in which RSS is read. After a warm-up round of
/// each kind, memory stays flat: 1 MiB of noise plus 64 bytes a connection, so with the 6,000
/// connections the test asks for at least, a leak of 256 bytes a connection fails it however fast
/// the machine is.
#[test]
fn a_compressed_soak_keeps_memory_flat() {
    const ROUNDS: usize = 9;
    const WARM_UP: usize = 3;
    let pki = Pki::new();
    let backend = shuck_test_support::process::BenchBackend::start(1024);
    let shuck = Shuck::start(&one_frontend(
        &pki,
        backend.addr,
        "session_cache_size = 512",
    ));
    let metrics = shuck.addrs[1];
    let (mut rss, mut made) = (Vec::with_capacity(ROUNDS), Vec::with_capacity(ROUNDS));
    for round in 0..ROUNDS {
        let kind = [("1.3", "psk"), ("1.2", "session-id"), ("1.2", "ticket")][round % 3];
        let totals = bench_round(shuck.addr(), &pki.ca_path(), kind, 3);
        assert_eq!(totals["failed"], 0, "round {round}: {totals:#}");
        assert!(totals["resumed"].as_u64() > Some(0), "{kind:?}: {totals:#}");
        made.push(totals["successful"].as_u64().expect("successful"));
        let active = wait_metric(metrics, "shuck_connections_active", &[], 0);
        assert_eq!(sum(&active, "shuck_connections_active", &[]), 0, "{active}");
        rss.push(rss_kib(shuck.pid()));
    }
    let after_warm_up: u64 = made[WARM_UP..].iter().sum();
    println!(
        "soak: {} connections ({after_warm_up} after the warm-up), RSS after each round (KiB): {rss:?}",
        made.iter().sum::<u64>()
    );
    assert!(
        after_warm_up >= 6000,
        "too little load to judge: {after_warm_up}"
    );
    let settled = rss[WARM_UP - 1];
    let peak = *rss[WARM_UP..].iter().max().expect("rounds");
    // Flat: 1 MiB of noise (jemalloc returns pages in the background), plus 64 bytes a connection.
    let allowed = settled + 1024 + after_warm_up * 64 / 1024;
    assert!(
        peak <= allowed,
        "RSS grew over the soak (KiB, allowed {allowed}): {rss:?}"
    );
}
