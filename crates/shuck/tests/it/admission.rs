//! Admission: `allow`/`deny` on the real client address (also behind `accept_proxy`),
//! `per_client` connections held across workers, the full-handshake rate that leaves
//! resumptions alone, `deny_ja4`, and the frontend's own `max_connections`; each refusal seen
//! by real clients from several loopback addresses and counted by reason.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shuck_test_support::clients::{curl_at, scrape, sum, wait_metric};
use shuck_test_support::pki::{client_config, toml_path, Key, Pki};
use shuck_test_support::process::Shuck;
use shuck_test_support::tlv_backend::{text, tlv, walk_v2, RawBackend};

/// A TCP connection to `to` from the loopback address `from`.
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let ip: IpAddr = from.parse().expect("ip");
    socket
        .bind(&SocketAddr::new(ip, 0).into())
        .expect("bind source");
    socket.connect(&to.into()).expect("connect");
    let s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s
}

/// Whether shuck closes `s` without sending a byte (within 5 s).
fn closed_unanswered(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        Ok(_) => false,
    }
}

/// A full TLS handshake (or a resumption, when `config` holds a session) from `from`; whether
/// it finished, and whether it resumed.
fn tls_from(from: &str, to: SocketAddr, config: &Arc<rustls::ClientConfig>) -> Option<bool> {
    let mut tcp = connect_from(from, to);
    let name = rustls::pki_types::ServerName::try_from("adm.test").expect("name");
    let mut conn = rustls::ClientConnection::new(config.clone(), name).expect("client");
    while conn.is_handshaking() {
        if conn.complete_io(&mut tcp).is_err() {
            return None;
        }
    }
    let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    // Read the tickets the server sends after the handshake (TLS 1.3), so the next one resumes.
    let mut stream = rustls::Stream::new(&mut conn, &mut tcp);
    let _ = stream.write_all(b"GET / HTTP/1.0\r\nHost: adm.test\r\n\r\n");
    let mut body = Vec::new();
    let _ = stream.read_to_end(&mut body);
    Some(resumed)
}

fn shuck_with(pki: &Pki, keys: &str) -> Shuck {
    let mut cert = pki.path("adm.pem");
    if !cert.exists() {
        cert = pki.leaf("adm.pem", "adm", &["adm.test"], Key::EcdsaP256);
    }
    Shuck::start(&format!(
        "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\nmetrics_per_worker = true\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n{keys}",
        toml_path(&cert)
    ))
}

/// `shuck_refused_total` for `reason`, once it reaches `want` (counted just after the close).
fn refused(metrics: SocketAddr, reason: &str, want: i64) -> i64 {
    let label = format!("reason=\"{reason}\"");
    let text = wait_metric(metrics, "shuck_refused_total", &[&label], want);
    sum(&text, "shuck_refused_total", &[&label])
}

/// `deny` wins over `allow`; an address outside `allow` is refused; both before a byte of TLS,
/// counted, and logged once per source however often it comes back.
#[test]
fn allow_and_deny_refuse_before_tls_and_log_each_source_once() {
    let pki = Pki::new();
    let shuck = shuck_with(
        &pki,
        "allow = [\"127.0.0.0/24\"]\ndeny = [\"127.0.0.66\"]\n",
    );
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    for _ in 0..20 {
        let mut denied = connect_from("127.0.0.66", web);
        // A ClientHello's first bytes: refused all the same, no answer.
        let _ = denied.write_all(&[0x16, 0x03, 0x01, 0x00, 0x05]);
        assert!(closed_unanswered(&mut denied));
    }
    let mut outside = connect_from("127.0.1.9", web);
    assert!(closed_unanswered(&mut outside));
    let text = wait_metric(metrics, "shuck_refused_total", &["reason=\"denied\""], 20);
    assert_eq!(
        sum(&text, "shuck_refused_total", &["reason=\"denied\""]),
        20,
        "{text}"
    );
    assert_eq!(refused(metrics, "not_allowed", 1), 1);
    assert_eq!(
        sum(&text, "shuck_handshake_failures_total", &[]),
        0,
        "no TLS work: {text}"
    );
    let ok = tls_from("127.0.0.5", web, &Arc::new(client_config(&pki)));
    assert_eq!(ok, Some(false), "an allowed client is served");
    let log = shuck.log_text();
    let lines = |ip: &str| {
        log.lines()
            .filter(|l| l.contains("admission rules") && l.contains(ip))
            .count()
    };
    assert_eq!(lines("127.0.0.66"), 1, "{log}");
    assert_eq!(lines("127.0.1.9"), 1, "{log}");
}

/// Behind `accept_proxy`, the address the PROXY header names is the one checked.
#[test]
fn allow_applies_to_the_address_the_proxy_header_names() {
    let pki = Pki::new();
    let shuck = shuck_with(&pki, "accept_proxy = true\nallow = [\"192.0.2.0/24\"]\n");
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let header = |client: &str| format!("PROXY TCP4 {client} 127.0.0.1 4000 443\r\n");
    let mut outside = TcpStream::connect(web).expect("connect");
    outside
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    outside
        .write_all(header("198.51.100.7").as_bytes())
        .expect("write");
    assert!(closed_unanswered(&mut outside));
    assert_eq!(refused(metrics, "not_allowed", 1), 1);
    // The same peer, naming an allowed client, gets its handshake.
    let mut inside = TcpStream::connect(web).expect("connect");
    inside
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    inside
        .write_all(header("192.0.2.10").as_bytes())
        .expect("write");
    let name = rustls::pki_types::ServerName::try_from("adm.test").expect("name");
    let mut conn =
        rustls::ClientConnection::new(Arc::new(client_config(&pki)), name).expect("client");
    while conn.is_handshaking() {
        conn.complete_io(&mut inside)
            .expect("handshake behind the header");
    }
}

/// `per_client.connections = 4` with two workers: a client opening 12 connections holds 4 (not
/// 4 per worker), the other 8 are closed at once; another client is unaffected; when the
/// first lets go it is served again.
#[test]
fn per_client_connections_hold_across_workers() {
    let pki = Pki::new();
    let shuck = shuck_with(&pki, "per_client = { connections = 4 }\n");
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let mut held: Vec<TcpStream> = (0..12).map(|_| connect_from("127.0.0.77", web)).collect();
    let text = wait_metric(
        metrics,
        "shuck_refused_total",
        &["reason=\"client_connections\""],
        8,
    );
    assert_eq!(
        sum(
            &text,
            "shuck_refused_total",
            &["reason=\"client_connections\""]
        ),
        8,
        "{text}"
    );
    let workers_used = text
        .lines()
        .filter(|l| l.starts_with("shuck_connections_accepted_total{") && !l.ends_with(" 0"))
        .count();
    held.retain_mut(|s| {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let mut b = [0u8; 1];
        !matches!(s.read(&mut b), Ok(0))
    });
    assert_eq!(held.len(), 4, "connections still open");
    assert_eq!(workers_used, 2, "both workers took some: {text}");
    let config = Arc::new(client_config(&pki));
    assert_eq!(
        tls_from("127.0.0.78", web, &config),
        Some(false),
        "another client"
    );
    assert_eq!(
        tls_from("127.0.0.77", web, &config),
        None,
        "the first is at its limit"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    while tls_from("127.0.0.77", web, &config).is_none() {
        assert!(Instant::now() < deadline, "never served again");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `per_client.handshakes = "1/m"`, `burst = 3`: a client resumes as often as it likes, makes
/// three full handshakes, and the fourth is refused after its ClientHello; another client has
/// its own budget.
#[test]
fn the_handshake_rate_limits_full_handshakes_and_not_resumptions() {
    let pki = Pki::new();
    let shuck = shuck_with(&pki, "per_client = { handshakes = \"1/m\", burst = 3 }\n");
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let resuming = Arc::new(client_config(&pki));
    assert_eq!(tls_from("127.0.0.90", web, &resuming), Some(false), "full");
    for i in 0..6 {
        assert_eq!(
            tls_from("127.0.0.90", web, &resuming),
            Some(true),
            "resumption {i}"
        );
    }
    for i in 0..2 {
        let fresh = Arc::new(client_config(&pki));
        assert_eq!(tls_from("127.0.0.90", web, &fresh), Some(false), "full {i}");
    }
    let fresh = Arc::new(client_config(&pki));
    assert_eq!(tls_from("127.0.0.90", web, &fresh), None, "past the burst");
    assert_eq!(refused(metrics, "client_handshakes", 1), 1);
    // Still resumes: resumptions are not limited.
    assert_eq!(tls_from("127.0.0.90", web, &resuming), Some(true));
    let other = Arc::new(client_config(&pki));
    assert_eq!(tls_from("127.0.0.91", web, &other), Some(false));
}

/// `deny_ja4` with the fingerprint the access log showed for one client: that client is
/// refused after its ClientHello, a client with another fingerprint is not.
#[test]
fn deny_ja4_refuses_the_fingerprint_the_access_log_showed() {
    let pki = Pki::new();
    pki.leaf("adm.pem", "adm", &["adm.test"], Key::EcdsaP256);
    let logged = Shuck::start(&format!(
        "log_connections = true\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&pki.path("adm.pem"))
    ));
    // Fresh client configurations: one holding a ticket offers a PSK, and its fingerprint
    // has the pre_shared_key extension the first had not.
    let fresh = || Arc::new(client_config(&pki));
    assert_eq!(tls_from("127.0.0.3", logged.addr(), &fresh()), Some(false));
    let line = logged.wait_log("ja4=t13d");
    let ja4 = line
        .split("ja4=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .expect("a ja4 field")
        .to_string();
    assert_eq!(ja4.len(), 36, "{ja4}");
    let shuck = shuck_with(&pki, &format!("deny_ja4 = [\"{ja4}\"]\n"));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    assert_eq!(
        tls_from("127.0.0.3", web, &fresh()),
        None,
        "the denied fingerprint"
    );
    assert_eq!(refused(metrics, "ja4", 1), 1);
    // curl (OpenSSL) sends other extensions: another fingerprint, served.
    let out = curl_at(&pki, web, "adm.test", "/", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The frontend's own `max_connections = 2`: a third connection is not served (it waits in the
/// listen queue, or accepted by a worker that was already in `accept()`, for a slot) until one
/// of the two closes; another frontend of the process is unaffected.
#[test]
fn a_frontends_max_connections_leaves_others_alone() {
    let pki = Pki::new();
    let cert = pki.leaf("adm.pem", "adm", &["adm.test"], Key::EcdsaP256);
    let shuck = Shuck::start(&format!(
        "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\n\
         [[frontend]]\nname = \"capped\"\nlisten = \"127.0.0.1:0\"\ncertificates = {0}\nmax_connections = 2\n\
         [[frontend]]\nname = \"free\"\nlisten = \"127.0.0.1:0\"\ncertificates = {0}\n",
        toml_path(&cert)
    ));
    let (capped, free, metrics) = (shuck.addrs[0], shuck.addrs[1], shuck.addrs[2]);
    let first = connect_from("127.0.0.20", capped);
    let second = connect_from("127.0.0.20", capped);
    wait_metric(
        metrics,
        "shuck_connections_active",
        &["frontend=\"capped\""],
        2,
    );
    let config = Arc::new(client_config(&pki));
    let waiting = std::thread::spawn({
        let config = config.clone();
        move || tls_from("127.0.0.21", capped, &config)
    });
    assert_eq!(
        tls_from("127.0.0.22", free, &config),
        Some(false),
        "the other frontend"
    );
    let text = scrape(metrics);
    assert_eq!(
        sum(&text, "shuck_connections_active", &["frontend=\"capped\""]),
        2,
        "{text}"
    );
    assert!(!waiting.is_finished(), "the third was served past the cap");
    drop((first, second));
    assert_eq!(
        waiting.join().expect("client"),
        Some(false),
        "served once room came"
    );
}

/// A worker past `overload_threshold` (set very low here) sheds some new full handshakes and
/// serves every resumption: a client resuming throughout a stream of new clients is never
/// refused, the new clients partly are (`overload`), and some still get in.
#[test]
fn an_overloaded_worker_sheds_new_full_handshakes_and_serves_resumptions() {
    let pki = Pki::new();
    let cert = pki.leaf("adm.pem", "adm", &["adm.test"], Key::EcdsaP256);
    let shuck = Shuck::start(&format!(
        "workers = 1\noverload_threshold = 0.05\nmetrics_listen = \"127.0.0.1:0\"\n\
         [[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let resuming = Arc::new(client_config(&pki));
    assert_eq!(tls_from("127.0.0.31", web, &resuming), Some(false));
    let (new_served, resumed) = std::thread::scope(|s| {
        let newcomers = s.spawn(|| {
            (0..300)
                .filter(|_| tls_from("127.0.0.30", web, &Arc::new(client_config(&pki))).is_some())
                .count()
        });
        let returning = s.spawn(|| {
            (0..60)
                .map(|_| tls_from("127.0.0.31", web, &resuming))
                .collect::<Vec<_>>()
        });
        (
            newcomers.join().expect("newcomers"),
            returning.join().expect("returning"),
        )
    });
    let shed = refused(
        metrics,
        "overload",
        300 - i64::try_from(new_served).expect("n"),
    );
    assert!(
        shed > 0,
        "nothing shed: {new_served} of 300 new clients served"
    );
    assert!(new_served > 0, "no new client got in");
    assert!(
        resumed.iter().all(|r| *r == Some(true)),
        "a returning client was refused or not resumed: {resumed:?}"
    );
    eprintln!("{new_served} of 300 new clients served, {shed} shed; 60 of 60 resumed");
}

/// Near `max_connections` (90% taken) a connection accepted gets shorter timeouts: with
/// `max_connections = 10`, eight silent connections keep the configured 10 s handshake
/// timeout, the ninth is closed after 3 s; the change is said once and counted.
#[test]
fn connections_accepted_near_the_limit_get_shorter_timeouts() {
    let pki = Pki::new();
    let cert = pki.leaf("adm.pem", "adm", &["adm.test"], Key::EcdsaP256);
    let shuck = Shuck::start(&format!(
        "workers = 1\nmax_connections = 10\nmetrics_listen = \"127.0.0.1:0\"\n\
         [[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\nhandshake_timeout = \"10s\"\n",
        toml_path(&cert)
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let calm: Vec<TcpStream> = (0..8).map(|_| connect_from("127.0.0.40", web)).collect();
    wait_metric(metrics, "shuck_connections_active", &[], 8);
    let mut pressed = connect_from("127.0.0.41", web);
    pressed
        .set_read_timeout(Some(Duration::from_secs(8)))
        .expect("timeout");
    let t = Instant::now();
    assert!(closed_unanswered(&mut pressed), "not closed within 8 s");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(2500) && took < Duration::from_secs(8),
        "closed after {took:?}, not the 3 s near the limit"
    );
    let mut first = &calm[0];
    first.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 1];
    assert!(
        matches!(first.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "a connection accepted before the pressure was closed as early"
    );
    let text = scrape(metrics);
    assert_eq!(
        sum(&text, "shuck_connections_pressured_total", &[]),
        1,
        "{text}"
    );
    assert_eq!(
        shuck
            .log_text()
            .matches("90% of max_connections taken")
            .count(),
        1
    );
}

/// `proxy_protocol_tlvs = ["ja4"]`: the backend reads the client's fingerprint in the PROXY v2
/// header under type 0xE4, the same the access log shows.
#[test]
fn the_ja4_fingerprint_reaches_the_backend_in_the_proxy_header() {
    let pki = Pki::new();
    let cert = pki.leaf("adm.pem", "adm", &["adm.test"], Key::EcdsaP256);
    let backend = RawBackend::start();
    let shuck = Shuck::start(&format!(
        "log_connections = true\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\n\
         certificates = {}\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"ja4\"]\n",
        backend.addr,
        toml_path(&cert)
    ));
    let out = curl_at(&pki, shuck.addr(), "adm.test", "/", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (tlvs, _) = walk_v2(&backend.next());
    let sent = text(tlv(&tlvs, 0xE4)).to_string();
    assert_eq!(sent.len(), 36, "{tlvs:?}");
    let log = shuck.wait_log("ja4=");
    assert!(log.contains(&format!("ja4={sent}")), "{sent}\n{log}");
}
