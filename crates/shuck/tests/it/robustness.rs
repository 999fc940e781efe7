//! Bad input and failure cases: each closes only the connection concerned, is logged with its
//! reason, and leaves shuck alive and serving a parallel good connection. Also: workers share the
//! load, backends fail over and rotate, idle connections are closed, running out of descriptors
//! backs off. max_connections and the demo page's stall timeout are tested in-process:
//! crates/shuck-proxy/tests/limits.rs.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use shuck_test_support::clients::{curl_at, read_all_bounded, sum, wait_metric};
use shuck_test_support::pki::{connector, toml_path, Key, Pki};
use shuck_test_support::process::{HttpBackend, Shuck};
use tokio::io::AsyncWriteExt;

/// One `[[frontend]]` per (extra keys, backend TOML value), all with the same certificate.
fn config(pki: &Pki, frontends: &[(&str, String)], global: &str) -> String {
    let cert = pki.leaf("good.pem", "good", &["good.test"], Key::EcdsaP256);
    let mut s = format!("{global}\n");
    for (extra, backend) in frontends {
        let _ = write!(
            s,
            "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = {backend}\ncertificates = {}\n{extra}\n",
            toml_path(&cert)
        );
    }
    s
}

fn assert_good_request(pki: &Pki, addr: SocketAddr) {
    let out = curl_at(pki, addr, "good.test", "/still-fine", &[]);
    assert!(
        out.status.success(),
        "good request failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "backend got: GET /still-fine HTTP/1.1"
    );
}

#[test]
fn garbage_instead_of_client_hello_is_refused_with_an_alert() {
    let pki = Pki::new();
    let b = HttpBackend::start();
    let mut shuck = Shuck::start(&config(&pki, &[("", format!("\"{}\"", b.addr))], ""));
    // Plain HTTP on the TLS port: a very common mistake.
    let mut s = TcpStream::connect(shuck.addr()).expect("connect");
    s.write_all(b"GET / HTTP/1.1\r\nHost: good.test\r\n\r\n")
        .expect("write");
    let reply = read_all_bounded(&mut s);
    // A TLS alert record (content type 21), then the close.
    assert_eq!(
        reply.first(),
        Some(&21u8),
        "expected a TLS alert, got {reply:02x?}"
    );
    assert_good_request(&pki, shuck.addr());
    shuck.wait_log("TLS handshake failed");
    shuck.assert_alive();
}

/// A first handshake message that is not a ClientHello (a KeyUpdate, type 24; a type no one
/// defined, 34) is out of place, not undecodable: `unexpected_message` (10), as OpenSSL answers,
/// where rustls' acceptor said `decode_error` (50).
#[test]
fn a_first_handshake_message_other_than_client_hello_is_unexpected() {
    let pki = Pki::new();
    let b = HttpBackend::start();
    let mut shuck = Shuck::start(&config(&pki, &[("", format!("\"{}\"", b.addr))], ""));
    for typ in [24u8, 34] {
        let mut s = TcpStream::connect(shuck.addr()).expect("connect");
        s.write_all(&handshake_record(8, &[typ, 0, 0, 4]))
            .expect("write");
        let reply = read_all_bounded(&mut s);
        assert_eq!(
            reply.get(..7).map(|r| (r[0], r[5], r[6])),
            Some((21, 2, 10)),
            "type {typ}: expected a fatal unexpected_message alert, got {reply:02x?}"
        );
    }
    assert_good_request(&pki, shuck.addr());
    shuck.assert_alive();
}

/// Refusals rustls' acceptor leaves without an alert (no ClientHello in the first record, a
/// record of another type between a hello's fragments) are answered by type: a record that has
/// no business there, `unexpected_message` (10), as OpenSSL answers. They were a bare close.
#[test]
fn refusals_rustls_leaves_unanswered_get_an_alert() {
    let pki = Pki::new();
    let b = HttpBackend::start();
    let mut shuck = Shuck::start(&config(&pki, &[("", format!("\"{}\"", b.addr))], ""));
    let start_of_hello = handshake_record(4, &[1, 0, 1, 0]);
    let cases: [(&str, Vec<u8>); 3] = [
        ("ChangeCipherSpec first", vec![20, 3, 3, 0, 1, 1]),
        ("application data first", vec![23, 3, 3, 0, 1, 0]),
        (
            "ChangeCipherSpec inside the hello",
            [start_of_hello, vec![20, 3, 3, 0, 1, 1]].concat(),
        ),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .map(|(what, bytes)| (what, first_reply(shuck.addr(), bytes)))
        .filter(|(_, reply)| reply[..] != [21, 3, 3, 0, 2, 2, 10])
        .map(|(what, reply)| format!("{what}: got {reply:02x?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "expected fatal unexpected_message alerts: {wrong:#?}"
    );
    assert_good_request(&pki, shuck.addr());
    shuck.assert_alive();
}

/// One handshake record header (type 22, TLS 1.0 record version) with `len` bytes behind it.
fn handshake_record(len: u16, body_start: &[u8]) -> Vec<u8> {
    let mut r = vec![0x16, 0x03, 0x01];
    r.extend_from_slice(&len.to_be_bytes());
    let mut body = body_start.to_vec();
    body.resize(usize::from(len), 0);
    r.extend_from_slice(&body);
    r
}

/// A TLS 1.3 ClientHello for good.test (X25519, the TLS 1.3 suites, ECDSA P-256 among its
/// signature schemes), `len` bytes long with its 4-byte handshake header: a padding extension
/// (21) makes up the length.
fn client_hello(len: usize) -> Vec<u8> {
    fn ext(to: &mut Vec<u8>, typ: u16, data: &[u8]) {
        to.extend_from_slice(&typ.to_be_bytes());
        to.extend_from_slice(&u16::try_from(data.len()).expect("extension").to_be_bytes());
        to.extend_from_slice(data);
    }
    let name = b"good.test";
    let mut sni = vec![0, name.len() as u8 + 3, 0, 0, name.len() as u8];
    sni.extend_from_slice(name);
    // RFC 7748's test public key: any X25519 share the server can agree on will do.
    let mut key_share = vec![0, 36, 0, 0x1d, 0, 32];
    key_share.extend_from_slice(&[
        0x85, 0x20, 0xf0, 0x09, 0x89, 0x30, 0xa7, 0x54, 0x74, 0x8b, 0x7d, 0xdc, 0xb4, 0x3e, 0xf7,
        0x5a, 0x0d, 0xbf, 0x3a, 0x0d, 0x26, 0x38, 0x1a, 0xf4, 0xeb, 0xa4, 0xa9, 0x8e, 0xaa, 0x9b,
        0x4e, 0x6a,
    ]);
    let mut exts = Vec::new();
    ext(&mut exts, 0, &sni);
    ext(&mut exts, 43, &[2, 3, 4]);
    ext(&mut exts, 10, &[0, 2, 0, 0x1d]);
    ext(&mut exts, 13, &[0, 6, 4, 3, 8, 4, 8, 7]);
    ext(&mut exts, 51, &key_share);
    let mut body = vec![3, 3];
    body.extend_from_slice(&[7; 32]);
    body.push(32);
    body.extend_from_slice(&[9; 32]);
    body.extend_from_slice(&[0, 6, 0x13, 1, 0x13, 2, 0x13, 3, 1, 0]);
    // Handshake header, body so far, extensions' length, extensions, padding's own header.
    let fixed = 4 + body.len() + 2 + exts.len() + 4;
    let padding = len.checked_sub(fixed).expect("a hello that short");
    ext(&mut exts, 21, &vec![0; padding]);
    body.extend_from_slice(&u16::try_from(exts.len()).expect("extensions").to_be_bytes());
    body.extend_from_slice(&exts);
    let mut hello = vec![1];
    hello.extend_from_slice(&u32::try_from(body.len()).expect("body").to_be_bytes()[1..]);
    hello.extend_from_slice(&body);
    assert_eq!(hello.len(), len);
    hello
}

/// `message` in handshake records of up to `size` bytes each.
fn in_records(message: &[u8], size: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    for chunk in message.chunks(size) {
        wire.extend(handshake_record(
            u16::try_from(chunk.len()).expect("record"),
            chunk,
        ));
    }
    wire
}

/// Sends `bytes` on a new connection and returns the first 7 bytes of the reply (fewer if shuck
/// closed first): an alert record whole, or a handshake record's header and message type.
fn first_reply(addr: SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    // shuck refuses without reading the rest: a reset on write is fine.
    let _ = s.write_all(bytes);
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut reply = [0u8; 7];
    let mut got = 0;
    while got < reply.len() {
        match s.read(&mut reply[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    reply[..got].to_vec()
}

/// The ClientHello size limit, both sides of it: a hello is read while its records, headers
/// included, fit in the 65,535 bytes rustls holds for a handshake message being joined, so
/// 65,515 bytes in full records (four headers) and 10,922 in 1-byte records (one header each).
/// A hello past it, or declaring more than 64 KiB, is answered `illegal_parameter` (47), as
/// OpenSSL and BoringSSL answer theirs (it was a close without a word), and counted.
#[test]
fn client_hellos_up_to_rustls_64_kib_are_served_and_larger_ones_get_illegal_parameter() {
    let pki = Pki::new();
    let b = HttpBackend::start();
    let global = "workers = 1\nmetrics_listen = \"127.0.0.1:0\"";
    let mut shuck = Shuck::start(&config(&pki, &[("", format!("\"{}\"", b.addr))], global));
    let (addr, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    // (record type, message type) for a ServerHello, (record type, description) for the alert.
    let (served, too_large) = ((22, 2), (21, 47));
    let cases: [(&str, Vec<u8>, (u8, u8)); 5] = [
        (
            "65,515 bytes in full records",
            in_records(&client_hello(65_515), 16_384),
            served,
        ),
        (
            "65,516 bytes in full records",
            in_records(&client_hello(65_516), 16_384),
            too_large,
        ),
        (
            "10,922 bytes in 1-byte records",
            in_records(&client_hello(10_922), 1),
            served,
        ),
        (
            "10,923 bytes in 1-byte records",
            in_records(&client_hello(10_923), 1),
            too_large,
        ),
        (
            "declaring 16 MiB",
            handshake_record(16_384, &[1, 0xff, 0xff, 0xff]).repeat(2),
            too_large,
        ),
    ];
    let mut wrong = Vec::new();
    for (what, bytes, want) in &cases {
        let reply = first_reply(addr, bytes);
        // Record type and, for a handshake record, its first message's type; for an alert, its
        // description (level fatal, two bytes long).
        let got = match reply[..] {
            [22, 3, 3, _, _, typ, ..] => Some((22, typ)),
            [21, 3, 3, 0, 2, 2, description] => Some((21, description)),
            _ => None,
        };
        if got != Some(*want) {
            wrong.push(format!("{what}: want {want:?}, got {reply:02x?}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The three refused are counted, and logged, as the other refusals are.
    let text = wait_metric(
        metrics,
        "shuck_handshake_failures_total",
        &["reason=\"malformed\""],
        3,
    );
    assert_eq!(
        shuck_test_support::clients::handshake_failures(&text, "malformed"),
        3,
        "{text}"
    );
    // The log line may follow the counter by a moment.
    let log = shuck.wait_log_count("ClientHello larger than 64 KiB", 3);
    assert_eq!(log.matches("TLS handshake failed").count(), 3, "{log}");
    assert_good_request(&pki, addr);
    shuck.assert_alive();
}

/// Hellos too large for a record, for rustls' 64 KiB handshake limit, or just larger than one
/// read: each is refused (with an alert, at once, not at the handshake timeout) and counted,
/// the log stays within its per-second budget, and nothing panics (the ClientHello stage's
/// notes on the stream's first bytes did, on a hello longer than one 4 KiB read).
#[test]
fn oversized_hellos_are_refused_counted_and_logged_sparingly() {
    const EACH: i64 = 20;
    let pki = Pki::new();
    let b = HttpBackend::start();
    let global = "workers = 1\nmetrics_listen = \"127.0.0.1:0\"";
    let fe = ("handshake_timeout = \"30s\"", format!("\"{}\"", b.addr));
    let mut shuck = Shuck::start(&config(&pki, &[fe], global));
    let (addr, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let full = |first: Vec<u8>, more: usize| {
        let mut v = first;
        for _ in 0..more {
            v.extend(handshake_record(16384, &[]));
        }
        v
    };
    let hellos: [(&str, Vec<u8>); 3] = [
        // A record longer than TLS allows.
        ("record", [0x16, 0x03, 0x01, 0xff, 0xff].repeat(20)),
        // A ClientHello claiming 16 MiB, sent as five full records.
        (
            "16 MiB",
            full(handshake_record(16384, &[1, 0xff, 0xff, 0xff]), 4),
        ),
        // A ClientHello of 60 KiB full of zeros, as four full records: 65,556 bytes on the
        // wire, over the 65,535 rustls holds while it joins a handshake message.
        ("60 KiB", full(handshake_record(16384, &[1, 0, 0xf0, 0]), 3)),
    ];
    let flood = Instant::now();
    for (what, bytes) in &hellos {
        for _ in 0..EACH {
            let started = Instant::now();
            let mut s = TcpStream::connect(addr).expect("connect");
            // shuck may refuse before it has read everything: a reset on write is fine.
            let _ = s.write_all(bytes);
            let reply = read_all_bounded(&mut s);
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{what}: left waiting for {:?}",
                started.elapsed()
            );
            assert_eq!(
                reply.first(),
                Some(&21),
                "{what}: expected an alert, got {reply:02x?}"
            );
        }
    }
    let total = 3 * EACH;
    let m = wait_metric(metrics, "shuck_handshake_failures_total", &[], total);
    assert_eq!(sum(&m, "shuck_handshake_failures_total", &[]), total, "{m}");
    assert_good_request(&pki, addr);
    shuck.assert_alive();
    let log = shuck.log_text();
    assert!(!log.contains("panicked"), "{log}");
    let lines = log.matches("TLS handshake failed").count();
    // The per-worker budget: 20 lines a second.
    let budget = 20 * (flood.elapsed().as_secs() as usize + 2);
    assert!(lines <= budget, "{lines} lines for {total} refusals: {log}");
}

/// A client that connects and closes without a byte (a balancer's TCP health check, by FIN or by
/// reset) is no failure: a debug line at most, no warning, not counted. One that closes part-way
/// through its ClientHello, by FIN or reset, is counted as a client abort, not as "other".
#[test]
fn closes_before_and_during_the_handshake_are_told_apart() {
    let pki = Pki::new();
    let backend = HttpBackend::start();
    // A reset before any byte reaches shuck only without defer_accept (the kernel drops it).
    let shuck = Shuck::start(&config(
        &pki,
        &[("defer_accept = \"0s\"", format!("\"{}\"", backend.addr))],
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"",
    ));
    let (addr, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let close = |bytes: &[u8], reset: bool| {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.write_all(bytes).expect("write");
        if reset {
            socket2::SockRef::from(&c)
                .set_linger(Some(Duration::ZERO))
                .expect("linger");
        }
        drop(c);
    };
    // The start of a TLS handshake record, then nothing more.
    let partial: &[u8] = &[0x16, 0x03, 0x01, 0x00];
    for reset in [false, true] {
        close(&[], reset);
        close(partial, reset);
    }
    let text = wait_metric(
        metrics,
        "shuck_handshake_failures_total",
        &["reason=\"client_abort\""],
        2,
    );
    let failures = |reason: &str| shuck_test_support::clients::handshake_failures(&text, reason);
    assert_eq!(failures("client_abort"), 2, "{text}");
    assert_eq!(failures("other"), 0, "{text}");
    assert_good_request(&pki, addr);
    let log = shuck.log_text();
    assert!(!log.contains("WARN"), "no warning for any of them: {log}");
}

#[test]
fn a_handshake_that_never_completes_times_out() {
    let pki = Pki::new();
    let b = HttpBackend::start();
    let mut shuck = Shuck::start(&config(
        &pki,
        &[("handshake_timeout = \"1s\"", format!("\"{}\"", b.addr))],
        "",
    ));
    let started = Instant::now();
    let mut s = TcpStream::connect(shuck.addr()).expect("connect");
    // The first bytes of a TLS record header, then silence.
    s.write_all(&[0x16, 0x03, 0x01]).expect("write");
    // A good connection is served meanwhile.
    assert_good_request(&pki, shuck.addr());
    let reply = read_all_bounded(&mut s);
    let waited = started.elapsed();
    assert!(reply.is_empty() || reply[0] == 21, "{reply:02x?}");
    assert!(
        waited >= Duration::from_millis(900),
        "closed too early: {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(15),
        "not closed by the timeout: {waited:?}"
    );
    shuck.wait_log("no complete handshake within 1s");
    shuck.assert_alive();
}

#[test]
fn unreachable_backend_closes_only_that_connection() {
    let pki = Pki::new();
    let good = HttpBackend::start();
    // Nothing listens there: a port no bind(":0") can be handed.
    let dead = SocketAddr::from(([127, 0, 0, 1], shuck_test_support::ports::tcp()));
    let mut shuck = Shuck::start(&config(
        &pki,
        &[
            ("", format!("\"{dead}\"")),
            ("", format!("\"{}\"", good.addr)),
        ],
        "",
    ));
    let out = curl_at(&pki, shuck.addrs[0], "good.test", "/nowhere", &[]);
    assert!(!out.status.success(), "no backend, no answer");
    assert!(out.stdout.is_empty());
    let log = shuck.wait_log("backend unavailable");
    assert!(
        log.contains("Connection refused"),
        "the reason is logged: {log}"
    );
    assert_good_request(&pki, shuck.addrs[1]);
    shuck.assert_alive();
}

/// A backend that reads up to `read` bytes, then resets the connection (SO_LINGER 0).
fn resetting_backend(read: usize) -> SocketAddr {
    let resetter = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = resetter.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut c in resetter.incoming().flatten() {
            let mut buf = vec![0u8; read];
            let _ = c.read(&mut buf);
            let _ = socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO));
            drop(c);
        }
    });
    addr
}

#[test]
fn backend_reset_closes_only_that_connection() {
    let pki = Pki::new();
    let good = HttpBackend::start();
    let reset_addr = resetting_backend(16);
    let mut shuck = Shuck::start(&config(
        &pki,
        &[
            ("", format!("\"{reset_addr}\"")),
            ("", format!("\"{}\"", good.addr)),
        ],
        "",
    ));
    let out = curl_at(&pki, shuck.addrs[0], "good.test", "/reset", &[]);
    assert!(!out.status.success(), "a reset backend gives no answer");
    let log = shuck.wait_log("backend connection failed");
    assert!(log.contains("reset"), "the reason is logged: {log}");
    assert_good_request(&pki, shuck.addrs[1]);
    shuck.assert_alive();
}

#[test]
fn backends_fail_over_and_rotate() {
    let pki = Pki::new();
    let (b1, b2) = (HttpBackend::start(), HttpBackend::start());
    // Port 1, where nothing listens: a port freed by a listener dropped here could be taken by
    // another test's server meanwhile, which would answer as a backend that is not dead.
    let dead: SocketAddr = ([127, 0, 0, 1], 1).into();
    let shuck = Shuck::start(&config(
        &pki,
        &[(
            "",
            format!("[\"{dead}\", \"{}\", \"{}\"]", b1.addr, b2.addr),
        )],
        "workers = 1\nlog_connections = true",
    ));
    for i in 0..6 {
        let out = curl_at(&pki, shuck.addr(), "good.test", &format!("/r{i}"), &[]);
        assert!(
            out.status.success(),
            "request {i} must fail over to a live backend"
        );
    }
    let log = shuck.wait_log("trying the next one");
    for b in [&b1, &b2] {
        assert!(
            log.contains(&format!("backend={}", b.addr)),
            "{} never used: {log}",
            b.addr
        );
    }
}

#[test]
fn connections_are_spread_over_workers() {
    let pki = Pki::new();
    let b = HttpBackend::start();
    let shuck = Shuck::start(&config(
        &pki,
        &[("", format!("\"{}\"", b.addr))],
        "workers = 2\nlog_connections = true",
    ));
    for i in 0..24 {
        let out = curl_at(&pki, shuck.addr(), "good.test", &format!("/w{i}"), &[]);
        assert!(out.status.success());
    }
    let log = shuck.log_text();
    let workers: HashSet<&str> = log
        .lines()
        .filter(|l| l.contains("connection closed"))
        .filter_map(|l| l.split("worker=").nth(1))
        .filter_map(|w| w.split_whitespace().next())
        .collect();
    // SO_REUSEPORT hashes each connection's ports: 24 connections all on one worker would mean
    // the sockets are not spread (odds 2^-23 otherwise).
    assert_eq!(workers.len(), 2, "workers seen: {workers:?}\n{log}");
}

#[test]
fn idle_connections_are_closed() {
    let pki = Pki::new();
    // A backend that accepts and never speaks.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let saddr = silent.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in silent.incoming().flatten() {
            held.push(c);
        }
    });
    let mut shuck = Shuck::start(&config(
        &pki,
        &[("idle_timeout = \"1s\"", format!("\"{saddr}\""))],
        "log_connections = true",
    ));
    let started = Instant::now();
    let out = curl_at(&pki, shuck.addr(), "good.test", "/idle", &[]);
    assert!(!out.status.success());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(15),
        "{waited:?}"
    );
    shuck.wait_log("idle for longer than 1s");
    shuck.assert_alive();
}

/// A low open-files limit caps the connections shuck takes at what its descriptors can serve:
/// the rest wait in the kernel's backlog, instead of being accepted and then failed with the
/// backend blamed ("no backend reachable: Too many open files"). A limit with no room at all is
/// a start-up error that says the numbers.
#[test]
fn a_low_open_files_limit_caps_connections_instead_of_failing_them() {
    let pki = Pki::new();
    let b = HttpBackend::start();
    // Silent clients fill the slots below: the kernel hands them over at once only without
    // defer_accept.
    let cfg = config(
        &pki,
        &[("defer_accept = \"0s\"", format!("\"{}\"", b.addr))],
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"",
    );
    let mut shuck = Shuck::with().config(&cfg).nofile(100).run();
    let log = shuck.wait_log("starting");
    assert!(log.contains("fd_limit=100"), "{log}");
    // (100 - 69 reserved for one worker on one address) / 2 descriptors a connection.
    assert!(
        log.contains("using 15") && log.contains("max_connections=15"),
        "{log}"
    );
    // More silent clients than that: each accepted one holds its descriptor while its handshake
    // waits, the others wait in the backlog.
    let mut held = Vec::new();
    for _ in 0..60 {
        held.push(TcpStream::connect(shuck.addrs[0]).expect("connect (kernel backlog)"));
    }
    let metrics = shuck.addrs[1];
    let active = |text: &str| sum(text, "shuck_connections_active", &[]);
    let text = wait_metric(metrics, "shuck_connections_active", &[], 15);
    assert_eq!(active(&text), 15, "{text}");
    // And no more, a moment later: the rest stay in the backlog (a connection not accepted has
    // no event to wait on).
    std::thread::sleep(Duration::from_millis(300));
    let text = shuck_test_support::clients::scrape(metrics);
    assert_eq!(active(&text), 15, "{text}");
    drop(held);
    // Once they are gone, service resumes; nothing was blamed on the backend.
    assert_good_request(&pki, shuck.addrs[0]);
    let text = shuck_test_support::clients::scrape(metrics);
    let sum = |name: &str| sum(&text, name, &[]);
    assert_eq!(sum("shuck_backend_errors_total"), 0, "{text}");
    assert_eq!(sum("shuck_resource_errors_total"), 0, "{text}");
    assert_eq!(sum("shuck_accept_errors_total"), 0, "{text}");
    shuck.assert_alive();

    let out = shuck_test_support::process::run_bounded(
        std::process::Command::new("sh").arg("-c").arg(format!(
            "ulimit -n 64 && exec {} serve --self-signed --listen 127.0.0.1:0 {}",
            &*shuck_test_support::process::SHUCK,
            shuck_test_support::process::as_root_allowed().join(" ")
        )),
        b"",
        30,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("open-files limit (64) leaves no descriptors"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_reset_during_upload_is_blamed_on_the_backend() {
    let pki = Pki::new();
    // Takes a little of the upload, then resets.
    let reset_addr = resetting_backend(1024);
    let shuck = Shuck::start(&config(
        &pki,
        &[("", format!("\"{reset_addr}\""))],
        "workers = 1",
    ));
    let conn = connector(&pki);
    let tcp = tokio::net::TcpStream::connect(shuck.addr())
        .await
        .expect("connect");
    let mut tls = conn
        .connect(ServerName::try_from("good.test").expect("name"), tcp)
        .await
        .expect("handshake");
    let chunk = vec![7u8; 64 * 1024];
    // Keep uploading until shuck closes the connection (bounded).
    for _ in 0..1600 {
        if tls.write_all(&chunk).await.is_err() {
            break;
        }
    }
    let log = shuck.wait_log("backend connection failed");
    assert!(
        !log.contains("client side:"),
        "a backend reset is not a client error: {log}"
    );
}

/// `defer_accept`: a client that connects and says nothing is not handed to shuck (no accept, no
/// descriptor, no task) until it speaks, while one that speaks is served at once. Started with
/// `"0s"` (the silent one is accepted at once, as before the option), then reloaded to `"30s"`,
/// which the address already listened on takes.
#[test]
fn a_silent_connection_is_accepted_only_once_it_speaks() {
    let pki = Pki::new();
    let backend = HttpBackend::start();
    let with = |defer: &str| {
        config(
            &pki,
            &[(
                &format!("defer_accept = \"{defer}\""),
                format!("\"{}\"", backend.addr),
            )],
            "workers = 1\nmetrics_listen = \"127.0.0.1:0\"",
        )
    };
    let shuck = Shuck::start(&with("0s"));
    let (addr, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let accepted = |want: i64, what: &str| {
        let text = wait_metric(metrics, "shuck_connections_accepted_total", &[], want);
        assert_eq!(
            sum(&text, "shuck_connections_accepted_total", &[]),
            want,
            "{what}: {text}"
        );
    };
    let mut held = Vec::new();
    let mut total = 0;
    for (round, (defer, held_back)) in [("0s", false), ("30s", true)].into_iter().enumerate() {
        if round > 0 {
            std::fs::write(shuck.config_path(), with(defer)).expect("rewrite config");
            shuck.signal("HUP");
            shuck.wait_log_count("reloaded certificates", round);
        }
        let mut silent = TcpStream::connect(addr).expect("connect");
        assert_good_request(&pki, addr);
        total += if held_back { 1 } else { 2 };
        accepted(total, &format!("{defer}: while silent"));
        // A while later, still the same (the kernel holds the silent one back).
        std::thread::sleep(Duration::from_millis(500));
        let text = shuck_test_support::clients::scrape(metrics);
        let now = sum(&text, "shuck_connections_accepted_total", &[]);
        assert_eq!(now, total, "{defer}: still silent: {text}");
        // The first bytes of a TLS record: now it reaches shuck.
        silent.write_all(&[0x16, 0x03, 0x01]).expect("write");
        if held_back {
            total += 1;
        }
        accepted(total, &format!("{defer}: once it spoke"));
        held.push(silent);
    }
}
