//! Sessions shared by hosts through a real Redis: outages, silent and slow stores, a Unix
//! socket, replies too large, a reload that replaces a failing store.

use super::*;
use shuck_test_support::redis::{cli as redis_cli, wait_cli};

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

/// Redis Sentinel: a master, a replica, one sentinel (quorum 1) named second in the URL after
/// one that is down. Two hosts share sessions through the master Sentinel names; the master is
/// killed while a client loop runs: no handshake fails (the store fails open), Sentinel
/// promotes the replica, and sessions are shared again through it.
#[test]
fn sentinel_failover_fails_no_handshake_and_resumption_comes_back() {
    let pki = Pki::new();
    let cert = pki.leaf("s.pem", "s", &["r.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let key = pki.path("store.key");
    ticket_key(&["--format", "nginx", key.to_str().expect("utf-8")]);
    let master = Redis::start();
    let master_port = master.port.expect("tcp");
    let replica_port = free_port();
    let ready = || std::net::TcpStream::connect(("127.0.0.1", replica_port)).is_ok();
    let (mp, rp) = (master_port.to_string(), replica_port.to_string());
    let _replica = Redis {
        child: Redis::spawn(
            &[
                "--port",
                &rp,
                "--bind",
                "127.0.0.1",
                "--replicaof",
                "127.0.0.1",
                &mp,
            ],
            &rp,
            ready,
        ),
        url: String::new(),
        port: Some(replica_port),
    };
    wait_cli(
        replica_port,
        &["info", "replication"],
        "master_link_status:up",
    );
    let sentinel_port = free_port();
    let conf = pki.path("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {sentinel_port}\nbind 127.0.0.1\nsentinel monitor mymaster 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 5000\n"
        ),
    )
    .expect("sentinel.conf");
    let conf_path = conf.to_str().expect("utf-8").to_string();
    let sentinel_ready = || std::net::TcpStream::connect(("127.0.0.1", sentinel_port)).is_ok();
    let _sentinel = Redis {
        child: Redis::spawn(&[&conf_path, "--sentinel"], "sentinel", sentinel_ready),
        url: String::new(),
        port: Some(sentinel_port),
    };
    // The sentinel has found the replica: a failover has somewhere to go.
    wait_cli(sentinel_port, &["sentinel", "replicas", "mymaster"], &rp);
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{sentinel_port}/mymaster",
        free_port()
    );
    let host_a = Shuck::start(&store_config(backend.addr, &cert, &url, &key, ""));
    let host_b = Shuck::start(&store_config(backend.addr, &cert, &url, &key, ""));
    let client = Client {
        pki: &pki,
        sni: "r.test",
    };
    let sess = pki.path("s.sess");
    let sess = sess.to_str().expect("utf-8 path");
    // Shared through the master Sentinel names (the store may take a moment to connect).
    let shared = |deadline: Instant| loop {
        client.first(host_a.addr(), "-tls1_2", sess);
        let (resumed, out) = client.again(host_b.addr(), "-tls1_2", sess, false);
        if resumed {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not resumed through Sentinel's master: {out}\n{}",
            host_b.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    shared(Instant::now() + Duration::from_secs(15));

    // The master dies; every handshake meanwhile succeeds (`first` and `again` assert it).
    drop(master);
    let t = Instant::now();
    let mut handshakes = 0;
    while !redis_cli(
        sentinel_port,
        &["sentinel", "get-master-addr-by-name", "mymaster"],
    )
    .contains(&rp)
    {
        assert!(t.elapsed() < Duration::from_secs(30), "no failover");
        client.first(host_a.addr(), "-tls1_2", sess);
        let _ = client.again(host_b.addr(), "-tls1_2", sess, false);
        handshakes += 2;
    }
    eprintln!(
        "failover after {:?}, {handshakes} handshakes meanwhile, none failed",
        t.elapsed()
    );
    // Resumption comes back through the promoted replica.
    shared(Instant::now() + Duration::from_secs(30));
    eprintln!(
        "sessions shared again {:?} after the master died",
        t.elapsed()
    );
    assert!(handshakes > 0);
}

/// Redis Cluster: three masters made by `redis-cli --cluster create`. Two hosts share sessions
/// through it: each session's key goes to the master that owns its slot, so the keys of many
/// sessions land on every master, and every session made on one host resumes on the other.
#[test]
fn cluster_of_three_masters_shares_sessions_by_slot() {
    let pki = Pki::new();
    let cert = pki.leaf("c.pem", "c", &["r.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let key = pki.path("store.key");
    ticket_key(&["--format", "nginx", key.to_str().expect("utf-8")]);
    let masters = shuck_test_support::redis::cluster(3);
    let ports: Vec<u16> = masters.iter().map(|m| m.port).collect();
    let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    // Two seeds of three: the third is learnt from the slot map.
    let url = format!("redis+cluster://{},{}", nodes[0], nodes[1]);
    let host_a = Shuck::start(&store_config(backend.addr, &cert, &url, &key, ""));
    let host_b = Shuck::start(&store_config(backend.addr, &cert, &url, &key, ""));
    let client = Client {
        pki: &pki,
        sni: "r.test",
    };
    // The first lookups of each worker fetch the slot map (they fail open meanwhile).
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut resumed = 0;
    let mut tries = 0;
    while resumed < 24 {
        assert!(
            Instant::now() < deadline,
            "{resumed} of {tries} resumed:\n{}",
            host_b.log_text()
        );
        let sess = pki.path(&format!("c{tries}.sess"));
        let sess = sess.to_str().expect("utf-8 path");
        client.first(host_a.addr(), "-tls1_2", sess);
        // A miss (the write still queued, a worker without its slot map yet) is a full
        // handshake, never a failure (`again` asserts it), and only delays the count.
        let (ok, _) = client.again(host_b.addr(), "-tls1_2", sess, false);
        resumed += usize::from(ok);
        tries += 1;
    }
    let keys: Vec<i64> = ports
        .iter()
        .map(|&p| redis_cli(p, &["dbsize"]).trim().parse().unwrap_or(0))
        .collect();
    assert!(
        keys.iter().all(|&k| k > 0),
        "sessions on every master: {keys:?}"
    );
    eprintln!("{resumed} of {tries} resumed through the cluster; keys per master {keys:?}");
}

/// A certificate and key for a TLS `redis-server`, from the test CA, for `names`.
fn redis_tls_files(pki: &Pki, file: &str, names: &[&str]) -> (String, String) {
    let bundle = pki.leaf(file, file, names, Key::EcdsaP256);
    let text = std::fs::read_to_string(&bundle).expect("bundle");
    let at = text.find("-----BEGIN PRIVATE KEY-----").expect("key");
    let (cert, key) = (
        pki.path(&format!("{file}.crt")),
        pki.path(&format!("{file}.key")),
    );
    std::fs::write(&cert, &text[..at]).expect("cert");
    std::fs::write(&key, &text[at..]).expect("key");
    let s = |p: std::path::PathBuf| p.to_str().expect("utf-8").to_string();
    (s(cert), s(key))
}

/// A `redis-server` on TLS only, with `extra` options; its TLS port.
fn tls_redis(pki: &Pki, file: &str, names: &[&str], extra: &[&str]) -> (Redis, u16) {
    let (cert, key) = redis_tls_files(pki, file, names);
    let port = free_port();
    let p = port.to_string();
    let ca = pki.ca_path().to_str().expect("utf-8").to_string();
    let mut args = vec![
        "--port",
        "0",
        "--tls-port",
        &p,
        "--bind",
        "127.0.0.1",
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "no",
    ];
    args.extend_from_slice(extra);
    let ready = || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    let child = Redis::spawn(&args, &p, ready);
    let redis = Redis {
        child,
        url: String::new(),
        port: Some(port),
    };
    (redis, port)
}

/// A sentinel on TLS only (to the master too) watching `master_port` as `mymaster`, with the
/// master's `password` if it has one.
fn tls_sentinel(pki: &Pki, file: &str, master_port: u16, password: Option<&str>) -> (Redis, u16) {
    let (cert, key) = redis_tls_files(pki, file, &["127.0.0.1"]);
    let port = free_port();
    let conf = pki.path(&format!("{file}.conf"));
    std::fs::write(
        &conf,
        format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\ntls-cert-file {cert}\ntls-key-file {key}\n\
             tls-ca-cert-file {}\ntls-auth-clients no\ntls-replication yes\n\
             sentinel monitor mymaster 127.0.0.1 {master_port} 1\n{}",
            pki.ca_path().display(),
            password.map_or(String::new(), |p| format!(
                "sentinel auth-pass mymaster {p}\n"
            ))
        ),
    )
    .expect("sentinel.conf");
    let conf = conf.to_str().expect("utf-8").to_string();
    let ready = || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
    let child = Redis::spawn(&[&conf, "--sentinel"], "sentinel", ready);
    let redis = Redis {
        child,
        url: String::new(),
        port: Some(port),
    };
    (redis, port)
}

/// `redis-cli` over TLS (trusting the test CA) with `args`.
fn tls_cli(pki: &Pki, port: u16, args: &[&str]) -> String {
    let out = shuck_test_support::process::run_bounded(
        Command::new(shuck_test_support::peers::require(
            "redis-cli",
            "redis-tools",
        ))
        .args(["--tls", "--cacert"])
        .arg(pki.ca_path())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args),
        b"",
        20,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `rediss+sentinel://`: shuck asks the sentinels over TLS (they listen on TLS alone here), and
/// verifies the master's certificate against the master name, not against the address a
/// sentinel gives. A sentinel that names another TLS server, one with a good certificate for
/// its own address from the same CA, gets nothing from shuck: no AUTH, no command. (Shuck once
/// asked the sentinels in plain TCP and sent AUTH with the password to whatever they named.)
#[test]
fn rediss_sentinel_asks_over_tls_and_gives_credentials_only_to_the_named_master() {
    let pki = Pki::new();
    let cert = pki.leaf("s.pem", "s", &["r.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let key = pki.path("store.key");
    ticket_key(&["--format", "nginx", key.to_str().expect("utf-8")]);
    let ca = pki.ca_path().to_str().expect("utf-8").to_string();
    let client = Client {
        pki: &pki,
        sni: "r.test",
    };
    let sess = pki.path("s.sess");
    let sess = sess.to_str().expect("utf-8 path");

    // The real master: its certificate names the master, "mymaster".
    let (_master, master_port) = tls_redis(&pki, "master", &["mymaster"], &["--requirepass", "pw"]);
    let (_sentinel, sentinel_port) = tls_sentinel(&pki, "sentinel", master_port, Some("pw"));
    let url = format!("rediss+sentinel://:pw@127.0.0.1:{sentinel_port}/mymaster");
    let host = Shuck::with()
        .config(&store_config(backend.addr, &cert, &url, &key, ""))
        .env("SSL_CERT_FILE", &ca)
        .run();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        client.first(host.addr(), "-tls1_2", sess);
        let keys = tls_cli(
            &pki,
            master_port,
            &["-a", "pw", "--no-auth-warning", "DBSIZE"],
        );
        if keys.trim().parse::<u64>().is_ok_and(|n| n > 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no session stored through TLS sentinels: {keys}\n{}",
            host.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // A sentinel that names another server: a TLS one with a good certificate for 127.0.0.1.
    let (rogue, rogue_port) = tls_redis(&pki, "rogue", &["127.0.0.1", "localhost"], &[]);
    let (_liar, liar_port) = tls_sentinel(&pki, "liar", rogue_port, None);
    let url = format!("rediss+sentinel://:secret@127.0.0.1:{liar_port}/mymaster");
    let fooled = Shuck::with()
        .config(&store_config(backend.addr, &cert, &url, &key, ""))
        .env("SSL_CERT_FILE", &ca)
        .run();
    // Until the store was tried (sessions written, and failing): the rogue's certificate is
    // refused for the master's name before anything is sent.
    let tried = || {
        sum(
            &scrape(fooled.addrs[1]),
            "shuck_session_store_writes_total",
            &["result=\"error\""],
        ) >= 5
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !tried() {
        assert!(Instant::now() < deadline, "{}", fooled.log_text());
        client.first(fooled.addr(), "-tls1_2", sess);
    }
    let stats = tls_cli(&pki, rogue_port, &["INFO", "commandstats"]);
    for command in ["cmdstat_auth", "cmdstat_set", "cmdstat_get", "cmdstat_role"] {
        assert!(
            !stats.contains(command),
            "{command}: {stats}\n{}",
            fooled.log_text()
        );
    }
    drop(rogue);
}
