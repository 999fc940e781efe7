//! Sessions through the Redis topologies operators run: Sentinel failing over, a Cluster of
//! masters sharing by slot, and Redis over TLS (`rediss://`, with Sentinel asked over TLS).

use super::*;

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
