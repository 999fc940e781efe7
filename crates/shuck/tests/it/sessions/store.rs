//! Sessions shared by hosts through a real Redis: outages, silent and slow stores, a Unix
//! socket, replies too large, a reload that replaces a failing store; Sentinel, Cluster and
//! TLS in `topologies`.

use super::*;
use shuck_test_support::redis::{cli as redis_cli, wait_cli};

mod topologies;

/// A real `redis-server` on a free loopback port, without persistence; killed on drop.
struct Redis {
    child: std::process::Child,
    url: String,
    /// The TCP port, when it listens on one.
    port: Option<u16>,
}

impl Redis {
    /// `redis-server` without persistence and with `listen` (its listening options), waiting
    /// until `ready` connects.
    fn spawn(listen: &[&str], what: &str, ready: impl Fn() -> bool) -> std::process::Child {
        let bin = shuck_test_support::peers::require("redis-server", "redis-server");
        // Replication still writes an RDB file (to the working directory): not into the tree.
        let child = Command::new(bin)
            .current_dir(std::env::temp_dir())
            .args(listen)
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    fn start_on(port: u16) -> Redis {
        let p = port.to_string();
        let ready = || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        let child = Self::spawn(&["--port", &p, "--bind", "127.0.0.1"], &p, ready);
        Redis {
            child,
            url: format!("redis://127.0.0.1:{port}"),
            port: Some(port),
        }
    }

    fn start() -> Redis {
        Self::start_on(free_port())
    }

    /// Listening on a Unix socket only.
    fn start_unix(socket: &std::path::Path) -> Redis {
        let path = socket.to_str().expect("utf-8 path");
        let ready = || std::os::unix::net::UnixStream::connect(socket).is_ok();
        let child = Self::spawn(&["--port", "0", "--unixsocket", path], path, ready);
        Redis {
            child,
            url: format!("unix:{path}"),
            port: None,
        }
    }

    fn url(&self) -> String {
        self.url.clone()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn store_config(
    backend: SocketAddr,
    cert: &std::path::Path,
    url: &str,
    key: &std::path::Path,
    extra: &str,
) -> String {
    // Generous: these tests check what happens, not how fast, on a machine running other tests.
    let timeout = if extra.contains("session_store_timeout") {
        ""
    } else {
        "session_store_timeout = \"50ms\"\n"
    };
    config(
        backend,
        cert,
        &format!(
            "session_tickets = false\nsession_store = \"{url}\"\nsession_store_key = {}\n{timeout}{extra}",
            toml_path(key)
        ),
    )
}

/// Two hosts sharing a real Redis with tickets off: a TLS 1.2 session ID and a TLS 1.3 session
/// made on one resume on the other; a frontend with other client-certificate trust never resumes
/// them; Redis stopped means full handshakes (never a failure) and an open breaker, which closes
/// when Redis is back.
#[test]
fn redis_shares_sessions_across_hosts_and_its_outages_cost_only_full_handshakes() {
    let pki = Pki::new();
    let cert = pki.leaf("r.pem", "r", &["r.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let key = pki.path("store.key");
    ticket_key(&["--format", "nginx", key.to_str().expect("utf-8")]);
    let redis = Redis::start();
    let a = Shuck::start(&store_config(backend.addr, &cert, &redis.url(), &key, ""));
    let b = Shuck::start(&store_config(backend.addr, &cert, &redis.url(), &key, ""));
    let mtls = format!(
        "client_auth = \"optional\"\nclient_ca = {}",
        toml_path(&pki.ca_path())
    );
    let other_trust = Shuck::start(&store_config(
        backend.addr,
        &cert,
        &redis.url(),
        &key,
        &mtls,
    ));
    let client = Client {
        pki: &pki,
        sni: "r.test",
    };

    for (version, chain) in [("-tls1_2", false), ("-tls1_3", true)] {
        let sess = pki.path(&format!("r{version}.sess"));
        let sess = sess.to_str().expect("utf-8 path");
        client.first(a.addr(), version, sess);
        for (i, host) in [&b, &a, &b, &b, &a].into_iter().enumerate() {
            let (resumed, out) = client.again(host.addr(), version, sess, chain);
            assert!(
                resumed,
                "{version}: reconnect {i} through Redis not resumed: {out}"
            );
        }
        let (resumed, out) = client.again(other_trust.addr(), version, sess, chain);
        assert!(
            !resumed,
            "{version}: resumed under other client trust: {out}"
        );
    }
    let text = scrape(a.addrs[1]);
    assert!(
        sum(
            &text,
            "shuck_session_store_lookups_total",
            &["result=\"hit\""]
        ) > 0,
        "{text}"
    );

    // Redis gone: every connection still succeeds, as a full handshake.
    let port = redis.port.expect("a TCP port");
    drop(redis);
    let sess = pki.path("down.sess");
    let sess = sess.to_str().expect("utf-8 path");
    client.first(a.addr(), "-tls1_2", sess);
    // 32 over four workers: at least one worker fails eight times, which opens its breaker.
    for _ in 0..32 {
        let (resumed, out) = client.again(b.addr(), "-tls1_2", sess, false);
        assert!(!resumed, "nothing to resume from: {out}");
    }
    b.wait_log("session store failing");
    let text = scrape(b.addrs[1]);
    assert!(
        sum(&text, "shuck_session_store_breaker_open", &[]) > 0,
        "{text}"
    );

    // Redis back: after the breaker's pause, sessions are shared again, and the workers whose
    // breaker opened say so once they reach it (connections keep coming until then).
    let _redis = Redis::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut resumed_again = false;
    loop {
        client.first(a.addr(), "-tls1_2", sess);
        let (resumed, _) = client.again(b.addr(), "-tls1_2", sess, false);
        resumed_again |= resumed;
        if resumed_again && b.log_text().contains("session store answering again") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "resumed again: {resumed_again}; {}",
            b.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = scrape(b.addrs[1]);
    assert!(
        sum(
            &text,
            "shuck_session_store_lookups_total",
            &["result=\"error\""]
        ) + sum(
            &text,
            "shuck_session_store_lookups_total",
            &["result=\"timeout\""]
        ) > 0,
        "{text}"
    );
}

/// A host asking a store at `url` for sessions made on another host (one without a store), so
/// every reconnection with `sess` must look the store up.
struct StoreLookups {
    pki: Pki,
    backend: HttpBackend,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
    shuck: Shuck,
    sni: String,
    sess: String,
}

impl StoreLookups {
    fn start(name: &str, url: &str, extra: &str) -> StoreLookups {
        let pki = Pki::new();
        let sni = format!("{name}.test");
        let cert = pki.leaf(&format!("{name}.pem"), name, &[&sni], Key::EcdsaP256);
        let backend = HttpBackend::start();
        let key = pki.path("store.key");
        ticket_key(&["--format", "nginx", key.to_str().expect("utf-8")]);
        let shuck = Shuck::start(&store_config(backend.addr, &cert, url, &key, extra));
        let other = Shuck::start(&config(backend.addr, &cert, "session_tickets = false"));
        let sess = pki.path(&format!("{name}.sess"));
        let sess = sess.to_str().expect("utf-8 path").to_string();
        let lookups = StoreLookups {
            pki,
            backend,
            cert,
            key,
            shuck,
            sni,
            sess,
        };
        lookups
            .client()
            .first(other.addr(), "-tls1_2", &lookups.sess);
        lookups
    }

    fn client(&self) -> Client<'_> {
        Client {
            pki: &self.pki,
            sni: &self.sni,
        }
    }

    /// `n` reconnections with the session, none of which resumes.
    fn full_handshakes(&self, n: usize) {
        for _ in 0..n {
            let (resumed, out) =
                self.client()
                    .again(self.shuck.addr(), "-tls1_2", &self.sess, false);
            assert!(!resumed, "{out}");
        }
    }
}

type Held = std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>;

/// A store that accepts connections and never answers: its URL and the connections it holds.
fn black_hole_store() -> (String, Held) {
    let hole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("redis://{}", hole.local_addr().expect("addr"));
    let held = Held::default();
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in hole.incoming().flatten() {
            keep.lock().expect("lock").push(s);
        }
    });
    (url, held)
}

/// A store that accepts connections and never answers: each handshake waits at most the store's
/// timeout, then completes in full; the breaker opens.
#[test]
fn redis_that_never_answers_does_not_stall_handshakes() {
    let (url, held) = black_hole_store();
    let host = StoreLookups::start("bh", &url, "");
    // Awaited without a bound, each lookup would hold the handshake until handshake_timeout and
    // fail it (counted below).
    host.full_handshakes(6);
    let shuck = &host.shuck;
    let text = scrape(shuck.addrs[1]);
    assert!(
        sum(
            &text,
            "shuck_session_store_lookups_total",
            &["result=\"timeout\""]
        ) >= 1,
        "{text}"
    );
    assert_eq!(
        sum(&text, "shuck_handshake_failures_total", &[]),
        0,
        "{text}"
    );
    assert!(
        !held.lock().expect("lock").is_empty(),
        "shuck did connect to the store"
    );
}

/// `shuck ticket-key` appends whole lines, even to a file whose last line has no end (as
/// `openssl rand 80 | openssl base64 -A > FILE` leaves it).
#[test]
fn ticket_key_appends_whole_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("keys.txt");
    let first = base64::engine::general_purpose::STANDARD.encode([7u8; 80]);
    std::fs::write(&file, &first).expect("write");
    ticket_key(&[file.to_str().expect("utf-8")]);
    let names = haproxy_key_names(&file);
    assert_eq!(names.len(), 2, "two keys, each on its own line");
    assert_eq!(names[0], hex(&[7u8; 16]));
}

/// The store over a Unix socket (`unix:/PATH`), as Redis on the same host is often reached.
#[test]
fn redis_over_a_unix_socket_shares_sessions() {
    let pki = Pki::new();
    let cert = pki.leaf("u.pem", "u", &["u.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let key = pki.path("store.key");
    ticket_key(&["--format", "nginx", key.to_str().expect("utf-8")]);
    let redis = Redis::start_unix(&pki.path("redis.sock"));
    let url = redis.url();
    let a = Shuck::start(&store_config(backend.addr, &cert, &url, &key, ""));
    let b = Shuck::start(&store_config(backend.addr, &cert, &url, &key, ""));
    let client = Client {
        pki: &pki,
        sni: "u.test",
    };
    let sess = pki.path("u.sess");
    let sess = sess.to_str().expect("utf-8 path");
    client.first(a.addr(), "-tls1_2", sess);
    let (resumed, out) = client.again(b.addr(), "-tls1_2", sess, false);
    drop(redis);
    assert!(
        resumed,
        "resumed on the other host through the socket: {out}"
    );
}

/// A broken store: answers `+OK` to each command of the connection's set-up and, to a lookup,
/// a bulk string of 6,000,000,000 bytes, which it then streams (for at most 20 s or 4 GB).
/// Returns its URL and the bytes it managed to send per lookup.
fn bulk_bomb_store() -> (String, std::sync::Arc<std::sync::Mutex<Vec<u64>>>) {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("redis://{}", l.local_addr().expect("addr"));
    let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = sent.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let record = record.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n @ 1..) = s.read(&mut buf) else {
                        return;
                    };
                    let chunk = &buf[..n];
                    if !chunk.windows(3).any(|w| w == b"GET") {
                        // One `+OK` per command in the chunk (each begins with `*`).
                        let commands = 1 + chunk.windows(3).filter(|w| w == b"\r\n*").count();
                        let _ = s.write_all(&b"+OK\r\n".repeat(commands));
                        continue;
                    }
                    let mut total = 0u64;
                    let filler = vec![b'x'; 64 * 1024];
                    let started = Instant::now();
                    if s.write_all(b"$6000000000\r\n").is_ok() {
                        while total < 4 << 30 && started.elapsed() < Duration::from_secs(20) {
                            if s.write_all(&filler).is_err() {
                                break;
                            }
                            total += filler.len() as u64;
                        }
                    }
                    record.lock().expect("lock").push(total);
                    return;
                }
            });
        }
    });
    (url, sent)
}

/// A store whose reply to a lookup is a 6 GB bulk string, streamed: before, the redis crate
/// buffered it (RSS 15 MB → 2.98 GB, throughput down tenfold). Now the reply is refused at its
/// header, the lookup ends as a full handshake, the connection is closed (the store cannot push
/// more than the sockets' buffers) and each is counted.
#[test]
fn a_store_reply_larger_than_any_session_is_refused_and_its_connection_closed() {
    let (url, sent) = bulk_bomb_store();
    let host = StoreLookups::start("bomb", &url, "session_store_timeout = \"1s\"");
    let shuck = &host.shuck;
    let before = rss_kib(shuck.pid());
    host.full_handshakes(6);
    let text = scrape(shuck.addrs[1]);
    let oversized = sum(
        &text,
        "shuck_session_store_lookups_total",
        &["result=\"oversized\""],
    );
    assert!(oversized >= 1, "{text}");
    assert_eq!(
        sum(&text, "shuck_handshake_failures_total", &[]),
        0,
        "{text}"
    );
    let deadline = Instant::now() + Duration::from_secs(25);
    while sent.lock().expect("lock").len() < usize::try_from(oversized).expect("count") {
        assert!(
            Instant::now() < deadline,
            "the store's connections stayed open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pushed = sent.lock().expect("lock").clone();
    let grew = rss_kib(shuck.pid()).saturating_sub(before);
    println!("bulk bomb: {oversized} lookups refused, the store pushed {pushed:?} bytes each before the close, RSS grew {grew} KiB");
    assert!(pushed.iter().all(|&b| b < 64 << 20), "{pushed:?}");
    assert!(grew < 64 * 1024, "RSS grew {grew} KiB");
}

/// A reload that replaces a failing store (one that never answers, its breaker open) with a
/// working one: the old store's connections are closed, the breaker gauge describes the new
/// store (0, with a line saying why), and sessions resume through it.
#[test]
fn a_reload_that_replaces_a_failing_store_closes_its_connections_and_resets_the_breaker() {
    let (hole_url, held) = black_hole_store();
    let host = StoreLookups::start("swap", &hole_url, "");
    let shuck = &host.shuck;
    // 32 over four workers: at least one worker fails eight times, which opens its breaker.
    host.full_handshakes(32);
    shuck.wait_log("session store failing");
    let open = "shuck_session_store_breaker_open";
    assert!(sum(&scrape(shuck.addrs[1]), open, &[]) > 0);
    let redis = Redis::start();
    let text = std::fs::read_to_string(shuck.config_path()).expect("config");
    std::fs::write(shuck.config_path(), text.replace(&hole_url, &redis.url())).expect("config");
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates and configuration");
    // Sessions go through the new store: made on a peer that uses it, resumed here.
    let peer = Shuck::start(&store_config(
        host.backend.addr,
        &host.cert,
        &redis.url(),
        &host.key,
        "",
    ));
    let (client, sess) = (host.client(), host.sess.as_str());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        client.first(peer.addr(), "-tls1_2", sess);
        let (resumed, _) = client.again(shuck.addr(), "-tls1_2", sess, false);
        let text = scrape(shuck.addrs[1]);
        let hits = sum(
            &text,
            "shuck_session_store_lookups_total",
            &["result=\"hit\""],
        );
        if resumed && hits > 0 && sum(&text, open, &[]) == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(100));
    }
    shuck.wait_log("session store replaced by a reload");
    // Every connection to the old store is closed (the black hole reads EOF on each).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let open_ones = held
            .lock()
            .expect("lock")
            .iter()
            .filter(|s| {
                use std::io::Read;
                let _ = s.set_nonblocking(true);
                // Closed: end of stream, or a reset. Open: nothing to read yet.
                match (&**s).read(&mut [0u8; 1]) {
                    Ok(0) => false,
                    Ok(_) => true,
                    Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
                }
            })
            .count();
        if open_ones == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open_ones} connections to the old store still open"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A store that answers every lookup, but late (30 ms, past a 5 ms `session_store_timeout`):
/// each lookup ends as a full handshake, and the worker keeps its one connection (the late reply
/// is dropped by the client) instead of reconnecting after every slow answer.
#[test]
fn a_slow_store_costs_full_handshakes_but_no_reconnections() {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("redis://{}", l.local_addr().expect("addr"));
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut buf) {
                    let chunk = &buf[..n];
                    let commands = 1 + chunk.windows(3).filter(|w| w == b"\r\n*").count();
                    let lookup = chunk.windows(3).any(|w| w == b"GET");
                    if lookup {
                        std::thread::sleep(Duration::from_millis(30));
                    }
                    let reply: &[u8] = if lookup { b"$-1\r\n" } else { b"+OK\r\n" };
                    if s.write_all(&reply.repeat(commands)).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let host = StoreLookups::start("slow", &url, "session_store_timeout = \"5ms\"");
    let shuck = &host.shuck;
    // Fewer than the eight failures in a row that open a worker's breaker.
    host.full_handshakes(7);
    let text = scrape(shuck.addrs[1]);
    let timeouts = sum(
        &text,
        "shuck_session_store_lookups_total",
        &["result=\"timeout\""],
    );
    assert!(timeouts >= 1, "{text}");
    let connections = accepted.load(std::sync::atomic::Ordering::Relaxed);
    println!("slow store: {timeouts} lookups timed out over {connections} connections");
    assert!(
        connections <= WORKERS,
        "{connections} connections for {WORKERS} workers"
    );
}

/// A free loopback port.
fn free_port() -> u16 {
    shuck_test_support::ports::tcp()
}
