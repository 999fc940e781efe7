//! What a CA, a validator and a Redis writer without the fleet's key can make fleet ACME do:
//! challenge lookups only for the frontend's names, a lease written in the clear, a flood of
//! notifications, a replaced certificate written back. Real pebble and redis-server.

use super::*;

/// `GET`s redis-server has run so far (its command statistics).
fn redis_gets(redis: &shuck_test_support::redis::RedisServer) -> u64 {
    let stats = redis.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_get:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// A handshake offering `acme-tls/1` for `name` (as a TLS-ALPN-01 validator does).
fn validator_hello(addr: SocketAddr, name: &str) {
    let _ = run_bounded(
        Command::new("openssl").args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            name,
            "-alpn",
            "acme-tls/1",
        ]),
        b"",
        20,
    );
}

/// A client offering `acme-tls/1` makes a fleet host look a challenge up in the store only for
/// a name the frontend orders (`acme.names`): any other name asks nothing of the store. (Any
/// SNI once made every such handshake a store lookup.)
#[test]
fn acme_challenge_lookups_are_only_for_the_frontends_names() {
    let pki = Pki::new();
    let redis = shuck_test_support::redis::RedisServer::start(&[]);
    let port = free_tcp_port();
    let nobody = format!("https://127.0.0.1:{}/dir", free_tcp_port());
    let state = pki.dir.path().join("state");
    let shuck = Shuck::start(&format!(
        "{}acme_store = \"redis://127.0.0.1:{}\"\nacme_store_key = {}\n",
        acme_config(port, &nobody, &pki.ca_path(), &state),
        redis.port,
        toml_path(&fleet_key(&pki))
    ));
    shuck.wait_log("ACME order failed");
    let addr = shuck.addr();
    // Every command redis-server runs, as MONITOR shows them (the fleet's own background reads
    // of its back-off key included, so the challenge keys are looked for by name).
    let monitor = RedisMonitor::start(redis.port, pki.path("monitor.log"));
    let monitored = || monitor.text();
    for name in ["other.acme.test", "admin.example", "shop.acme.test.evil"] {
        validator_hello(addr, name);
    }
    // The frontend's own name last: once its lookup shows, any before it would have too.
    validator_hello(addr, NAME);
    let own = format!("shuck:acme:challenge:{NAME}");
    shuck_test_support::process::wait_for("the own name's lookup", Duration::from_secs(10), || {
        monitored().contains(&own)
    });
    let log = monitored();
    let looked_up: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("shuck:acme:challenge:"))
        .collect();
    assert!(
        looked_up.iter().all(|l| l.contains(&own)),
        "store lookups for names the frontend does not order: {looked_up:#?}\n{}",
        shuck.log_text()
    );
}

/// The ClientHello a TLS-ALPN-01 validator sends for `name` (`acme-tls/1` only), as bytes.
fn acme_hello(name: &str) -> Vec<u8> {
    let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    config.alpn_protocols = vec![b"acme-tls/1".to_vec()];
    let name = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
    let mut conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("conn");
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).expect("hello");
    hello
}

/// A flood of validators' handshakes for made-up names at an on-demand fleet host whose store
/// does not answer (redis-server stopped): 16 store lookups run at once, the handshakes beyond
/// them are answered without the store and counted; once the store answers again, a lookup
/// runs (the slots came back). (Each hello once started a lookup of its own: a flood was as
/// many queries waiting on the store the fleet's sessions share.)
#[test]
fn validators_handshakes_look_challenges_up_sixteen_at_a_time() {
    use std::io::{Read, Write};
    let pki = Pki::new();
    let redis = shuck_test_support::redis::RedisServer::start(&[]);
    let port = free_tcp_port();
    let nobody = format!("https://127.0.0.1:{}/dir", free_tcp_port());
    let ask = format!("http://127.0.0.1:{}/allowed", free_tcp_port());
    let shuck = Shuck::start(&format!(
        "workers = 2\nstate_dir = {}\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\n\
         name = \"saas\"\nlisten = \"127.0.0.1:{port}\"\n\
         acme = {{ directory = \"{nobody}\", directory_ca = {} }}\n\
         on_demand = {{ ask = \"{ask}\" }}\n\
         acme_store = \"redis://127.0.0.1:{}\"\nacme_store_key = {}\n",
        toml_path(&pki.dir.path().join("state")),
        toml_path(&pki.ca_path()),
        redis.port,
        toml_path(&fleet_key(&pki)),
    ));
    let (addr, metrics) = (shuck.addr(), *shuck.addrs.last().expect("metrics"));
    let busy = || {
        counter_sum(
            metrics,
            "shuck_acme_fleet_events_total",
            ("event", "challenge_lookup_busy"),
        )
    };
    let signal = |sig: &str| {
        let ok = Command::new("kill")
            .args([sig, &redis.pid().to_string()])
            .status()
            .expect("kill");
        assert!(ok.success(), "kill {sig}");
    };
    // One lookup first, so the store's connection is open: each lookup then waits for the
    // stopped server until its own timeout.
    validator_hello(addr, "first.flood.test");
    let flood = 48;
    let hellos: Vec<Vec<u8>> = (0..flood)
        .map(|i| acme_hello(&format!("n{i}.flood.test")))
        .collect();
    let mut conns: Vec<TcpStream> = (0..flood)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect();
    signal("-STOP");
    // Every hello written before any answer is read: they arrive within milliseconds.
    for (c, hello) in conns.iter_mut().zip(&hellos) {
        c.write_all(hello).expect("hello");
    }
    for mut c in conns {
        c.set_read_timeout(Some(Duration::from_secs(15)))
            .expect("timeout");
        let _ = c.read_to_end(&mut Vec::new());
    }
    signal("-CONT");
    assert_eq!(
        busy(),
        flood - 16,
        "handshakes past the 16 lookups\n{}",
        shuck.log_text()
    );
    validator_hello(addr, "after.flood.test");
    assert_eq!(
        busy(),
        flood - 16,
        "a lookup runs again once the store answers"
    );
}

/// What a Redis writer without the fleet's key can do to a fleet's ACME, with pebble and a real
/// redis-server. A lease written in the clear with no TTL (`SET shuck:acme:lease:<id> x`) once
/// kept a fresh host from ever ordering: now it is taken over at once, logged and counted, and
/// the host gets its certificate. A flood of `PUBLISH` on the fleet's channel once made every
/// host read the store thousands of times: now at most once a second, the rest counted.
#[test]
fn a_redis_writer_without_the_key_neither_freezes_nor_floods_fleet_acme() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let pebble = Pebble::start(&pki, port, 3600);
    let redis = shuck_test_support::redis::RedisServer::start(&[]);
    let store = format!("redis://127.0.0.1:{}", redis.port);
    let key = fleet_key(&pki);
    // A first host orders, so that the order's key is known (as anyone reading Redis sees it).
    let first = Shuck::start(&fleet_config(
        port,
        &pebble,
        &pki,
        &pki.path("state-a"),
        &store,
        &key,
    ));
    first.wait_log_within("ACME certificate issued", Duration::from_secs(60));
    let keys = redis.cli(&["--scan", "--pattern", "shuck:acme:cert:*"]);
    let id = keys
        .trim()
        .strip_prefix("shuck:acme:cert:")
        .unwrap_or_else(|| panic!("the fleet's certificate key: {keys:?}"))
        .to_string();
    drop(first);
    redis.cli(&["FLUSHALL"]);
    redis.cli(&["SET", &format!("shuck:acme:lease:{id}"), "attacker"]);

    let metrics_port = free_tcp_port();
    let config = format!(
        "metrics_listen = \"127.0.0.1:{metrics_port}\"\n{}",
        fleet_config(port, &pebble, &pki, &pki.path("state-b"), &store, &key)
    );
    let host = Shuck::start(&config);
    let log = host.wait_log_within("ACME certificate issued", Duration::from_secs(60));
    assert!(log.contains("taken over"), "{log}");
    host.wait_log("loaded a renewed certificate or OCSP staple");
    let (ok, err) = curl_trusting(&pebble.root, host.addr());
    assert!(ok, "{err}\n{}", host.log_text());
    let metrics: SocketAddr = format!("127.0.0.1:{metrics_port}").parse().expect("addr");
    let event = |name: &str| {
        shuck_test_support::clients::sum(
            &shuck_test_support::clients::scrape(metrics),
            "shuck_acme_fleet_events_total",
            &[&format!("event=\"{name}\"")],
        )
    };
    assert_eq!(event("lease_taken_over"), 1);

    // Notifications as fast as redis-cli sends them, for 14 s: past the 10 s a host rests after
    // an order, then 2 s more.
    let gets_before = redis_gets(&redis);
    let flood = format!("PUBLISH shuck:acme:issued:{id} x\n").repeat(5_000);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(14) {
        let out = run_bounded(
            Command::new(require("redis-cli", "redis-tools")).args([
                "-h",
                "127.0.0.1",
                "-p",
                &redis.port.to_string(),
            ]),
            flood.as_bytes(),
            60,
        );
        assert!(out.status.success(), "{out:?}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let seconds = t.elapsed().as_secs() + 1;
    let gets = redis_gets(&redis) - gets_before;
    eprintln!("{gets} GETs in {seconds} s of notifications");
    assert!(
        gets <= 3 * seconds,
        "{gets} GETs in {seconds} s: a notification flood drives the store reads"
    );
    assert!(event("notification_dropped") > 0);
}

/// A Redis writer who kept a sealed certificate the fleet has since replaced (`COPY`, as `DUMP`
/// and `RESTORE` would) and writes it back: a host with no certificate of its own once adopted it
/// and ordered nothing. Now the store's record of the newest certificate it holds refuses the
/// older one: the host says so once, counts it, and orders its own.
#[test]
fn a_host_with_no_certificate_refuses_a_replayed_older_one() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let pebble = Pebble::start(&pki, port, 3600);
    let redis = shuck_test_support::redis::RedisServer::start(&[]);
    let store = format!("redis://127.0.0.1:{}", redis.port);
    let key = fleet_key(&pki);
    let order = |state: &str| {
        let host = Shuck::start(&fleet_config(
            port,
            &pebble,
            &pki,
            &pki.path(state),
            &store,
            &key,
        ));
        host.wait_log_within("ACME certificate issued", Duration::from_secs(60));
        host.wait_log("loaded a renewed certificate or OCSP staple");
        (served_leaf(host.addr()), host)
    };
    let (first_leaf, first) = order("state-a");
    drop(first);
    let keys = redis.cli(&["--scan", "--pattern", "shuck:acme:cert:*"]);
    let cert_key = keys.trim().to_string();
    assert!(cert_key.starts_with("shuck:acme:cert:"), "{keys:?}");
    assert_eq!(redis.cli(&["COPY", &cert_key, "kept"]).trim(), "1");
    // The fleet's certificate replaced by a newer one (as a renewal would). Issue times are
    // whole seconds (X.509's resolution), and the fleet's record tells certificates apart by
    // them alone: two issued in the same second are not (a renewal comes days later). The
    // second order starts a second later, so its certificate is the newer one.
    redis.cli(&["DEL", &cert_key]);
    std::thread::sleep(Duration::from_millis(1100));
    let (second_leaf, second) = order("state-c");
    drop(second);
    assert_ne!(first_leaf, second_leaf);
    assert_eq!(
        redis.cli(&["COPY", "kept", &cert_key, "REPLACE"]).trim(),
        "1"
    );

    let metrics_port = free_tcp_port();
    let config = format!(
        "metrics_listen = \"127.0.0.1:{metrics_port}\"\n{}",
        fleet_config(port, &pebble, &pki, &pki.path("state-b"), &store, &key)
    );
    let host = Shuck::start(&config);
    let log = host.wait_log_within("ACME certificate issued", Duration::from_secs(60));
    assert!(
        !log.contains("loaded the fleet's ACME certificate"),
        "{log}"
    );
    assert_eq!(
        log.matches("issued before the newest the fleet stored")
            .count(),
        1,
        "{log}"
    );
    host.wait_log("loaded a renewed certificate or OCSP staple");
    let served = served_leaf(host.addr());
    assert_ne!(served, first_leaf, "{}", host.log_text());
    let metrics: SocketAddr = format!("127.0.0.1:{metrics_port}").parse().expect("addr");
    let refused = shuck_test_support::clients::sum(
        &shuck_test_support::clients::scrape(metrics),
        "shuck_acme_fleet_events_total",
        &[r#"event="value_refused""#],
    );
    assert!(refused >= 1, "{refused}");
}

/// `deny_ja4` holds for hellos offering `acme-tls/1` too: a client denied by its fingerprint
/// cannot get handshakes (and the challenge configuration's signatures) by offering the ACME
/// protocol. (The ACME branch once came before the fingerprint was taken.)
#[test]
fn deny_ja4_holds_for_hellos_offering_acme_tls() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let nobody = format!("https://127.0.0.1:{}/dir", free_tcp_port());
    let acme = |state: &str| acme_config(port, &nobody, &pki.ca_path(), &pki.path(state));
    let logged = Shuck::start(&format!("log_connections = true\n{}", acme("state-a")));
    validator_hello(logged.addr(), NAME);
    // The hello's line (no challenge is pending: its handshake fails), with its fingerprint.
    let log = logged.wait_log_within("ja4=t", Duration::from_secs(10));
    let ja4 = log
        .lines()
        .find(|l| l.contains("ja4=t"))
        .and_then(|l| l.split("ja4=").nth(1))
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_default()
        .to_string();
    assert_eq!(ja4.len(), 36, "no fingerprint in {log}");
    drop(logged);
    let metrics_port = free_tcp_port();
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:{metrics_port}\"\n{}deny_ja4 = [\"{ja4}\"]\n",
        acme("state-b")
    ));
    validator_hello(shuck.addr(), NAME);
    let metrics: SocketAddr = format!("127.0.0.1:{metrics_port}").parse().expect("addr");
    let text = shuck_test_support::clients::wait_metric(
        metrics,
        "shuck_refused_total",
        &["reason=\"ja4\""],
        1,
    );
    assert_eq!(
        shuck_test_support::clients::sum(&text, "shuck_refused_total", &["reason=\"ja4\""]),
        1,
        "{text}\n{}",
        shuck.log_text()
    );
}
