//! On-demand certificates against pebble: the ask endpoint is a small HTTP server of the test's
//! own (it allows names under `customer.test`, counts what it is asked); names resolve to
//! 127.0.0.1 through pebble-challtestsrv.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shuck_test_support::pki::{toml_path, Pki};
use shuck_test_support::process::Shuck;
use shuck_test_support::redis::RedisServer;

use super::{free_tcp_port, Pebble, Spec};

/// The operator's endpoint: 200 for `domain=*.customer.test`, 403 for any other; every name
/// asked is kept. Served by a thread until dropped.
struct AskEndpoint {
    url: String,
    asked: Arc<Mutex<Vec<String>>>,
    /// Names refused from now on, though under `customer.test`.
    denied: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl AskEndpoint {
    fn start() -> AskEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}/allowed", listener.local_addr().expect("addr"));
        let asked = Arc::new(Mutex::new(Vec::new()));
        let denied = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (log, deny, stopped) = (asked.clone(), denied.clone(), stop.clone());
        std::thread::spawn(move || {
            // Bounded: the test's life, at most five minutes.
            let deadline = Instant::now() + Duration::from_secs(300);
            while !stopped.load(Ordering::Relaxed) && Instant::now() < deadline {
                let Ok((s, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                answer(&s, &log, &deny);
            }
        });
        AskEndpoint {
            url,
            asked,
            denied,
            stop,
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().expect("lock").clone()
    }
}

impl Drop for AskEndpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn answer(s: &std::net::TcpStream, log: &Mutex<Vec<String>>, denied: &Mutex<Vec<String>>) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut line = String::new();
    let mut reader = BufReader::new(s);
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let domain = line
        .split_whitespace()
        .nth(1)
        .and_then(|target| target.split("domain=").nth(1))
        .unwrap_or_default()
        .to_string();
    // The rest of the head, so the answer is not cut off by a reset.
    let mut rest = String::new();
    while reader.read_line(&mut rest).is_ok_and(|n| n > 2) {
        rest.clear();
    }
    let allowed =
        domain.ends_with(".customer.test") && !denied.lock().expect("lock").contains(&domain);
    log.lock().expect("lock").push(domain);
    let status = if allowed { "200 OK" } else { "403 Forbidden" };
    let _ = (&mut &*s).write_all(
        format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").as_bytes(),
    );
}

/// A frontend on `port` getting certificates on demand, its state in `state`.
fn on_demand_config(port: u16, pebble: &Pebble, pki: &Pki, ask: &str, state: &Path) -> String {
    format!(
        "workers = 2\nstate_dir = {}\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"saas\"\n\
         listen = \"127.0.0.1:{port}\"\n\
         acme = {{ directory = \"{}\", directory_ca = {} }}\n\
         on_demand = {{ ask = \"{ask}\", hold = \"30s\", max_per_minute = 5 }}\n",
        toml_path(state),
        pebble.directory,
        toml_path(&pki.ca_path()),
    )
}

/// curl to `name` on `addr`'s port, trusting `ca`, long enough for an order: (success, stderr).
fn curl_name(name: &str, addr: SocketAddr, ca: &Path) -> (bool, String) {
    super::curl_name(name, addr, ca, 40)
}

/// `shuck_on_demand_events_total` for `event`, from the metrics at `metrics`.
fn on_demand_count(metrics: SocketAddr, event: &str) -> u64 {
    super::counter_sum(metrics, "shuck_on_demand_events_total", ("event", event))
}

/// A name the endpoint allows gets its certificate at its first handshake (held until issued;
/// curl verifies it with pebble's root); a name refused fails its handshake, orders nothing and
/// is not asked about again within a minute; after a restart the stored certificate is served
/// at once, with no order and no question.
#[test]
fn an_allowed_name_is_issued_at_its_first_handshake_and_a_refused_one_fails() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let pebble = Pebble::start(&pki, port, 300);
    let ask = AskEndpoint::start();
    let state = pki.dir.path().join("state");
    let config = on_demand_config(port, &pebble, &pki, &ask.url, &state);
    let shuck = Shuck::start(&config);
    let addr = shuck.addr();
    let metrics = *shuck.addrs.last().expect("metrics");
    let started = Instant::now();
    let (ok, err) = curl_name("shop1.customer.test", addr, &pebble.root);
    assert!(ok, "{err}\n{}\n{}", shuck.log_text(), pebble.log_text());
    eprintln!("first handshake served after {:?}", started.elapsed());
    let (ok, _) = curl_name("shop1.customer.test", addr, &pebble.root);
    assert!(ok, "served again from the new certificate");
    for _ in 0..2 {
        let (ok, err) = curl_name("intruder.example", addr, &pebble.root);
        assert!(!ok, "a refused name is not served");
        assert!(
            !err.contains("Operation timed out"),
            "failed at once: {err}"
        );
    }
    assert_eq!(
        ask.asked(),
        ["shop1.customer.test", "intruder.example"],
        "each name asked once"
    );
    let ca = pebble.log_text();
    assert_eq!(ca.matches("Issued certificate serial").count(), 1, "{ca}");
    assert!(
        !ca.contains("intruder"),
        "no order for a refused name: {ca}"
    );
    assert_eq!(on_demand_count(metrics, "issued"), 1);
    assert_eq!(on_demand_count(metrics, "refused"), 1);
    let bundle = state.join("acme/on-demand/saas/shop1.customer.test.pem");
    assert!(bundle.exists(), "stored");
    let (status, log) = shuck.stop();
    assert!(status.success(), "{log}");

    let again = Shuck::start(&config);
    again.wait_log("serving the on-demand certificates stored before");
    let (ok, err) = curl_name("shop1.customer.test", again.addr(), &pebble.root);
    assert!(ok, "{err}");
    assert_eq!(ask.asked().len(), 2, "nothing asked after the restart");
    assert_eq!(
        pebble
            .log_text()
            .matches("Issued certificate serial")
            .count(),
        1
    );
}

/// Three hosts behind HAProxy share a Redis store; pebble validates TLS-ALPN-01 through the
/// balancer (any host answers, from the store). A client asks each host for the same new name
/// at once: every handshake is served, with one certificate, from one order.
#[test]
fn three_hosts_asked_for_one_name_at_once_make_one_order() {
    let pki = Pki::new();
    let ports: Vec<u16> = (0..3).map(|_| free_tcp_port()).collect();
    let targets: Vec<SocketAddr> = ports
        .iter()
        .map(|&p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect();
    let balancer = shuck_test_support::peers::haproxy_balancer([127, 0, 0, 1].into(), &targets);
    let pebble = Pebble::start_spec(
        &pki,
        &Spec {
            tls_port: balancer.addr.port(),
            validity: 300,
            ..Spec::default()
        },
    );
    let ask = AskEndpoint::start();
    let redis = RedisServer::start(&[]);
    let key = super::fleet_key(&pki);
    let hosts: Vec<Shuck> = ports
        .iter()
        .enumerate()
        .map(|(i, &port)| {
            let state = pki.dir.path().join(format!("state{i}"));
            Shuck::start(&format!(
                "{}acme_store = \"redis://127.0.0.1:{}\"\nacme_store_key = {}\n",
                on_demand_config(port, &pebble, &pki, &ask.url, &state),
                redis.port,
                toml_path(&key)
            ))
        })
        .collect();
    let clients: Vec<_> = hosts
        .iter()
        .map(|h| {
            let (addr, root) = (h.addr(), pebble.root.clone());
            std::thread::spawn(move || curl_name("shared.customer.test", addr, &root))
        })
        .collect();
    for (i, c) in clients.into_iter().enumerate() {
        let (ok, err) = c.join().expect("client");
        assert!(ok, "host {i}: {err}\n{}", super::logs_of(&hosts));
    }
    let ca = pebble.log_text();
    assert_eq!(ca.matches("Issued certificate serial").count(), 1, "{ca}");
    let leases: usize = hosts
        .iter()
        .map(|h| h.log_text().matches("took the fleet's ACME lease").count())
        .sum();
    assert_eq!(leases, 1, "{}", super::logs_of(&hosts));
    let served: Vec<String> = hosts
        .iter()
        .map(|h| super::served_leaf_for(h.addr(), "shared.customer.test"))
        .collect();
    assert!(!served[0].is_empty());
    assert!(
        served.iter().all(|c| *c == served[0]),
        "one certificate for the fleet"
    );
}

/// A name the endpoint stops allowing is not renewed: when its 30-second certificate falls due
/// (at two thirds of its life) the endpoint is asked, refuses, and the certificate is no longer
/// served nor kept for the next start.
#[test]
fn a_name_no_longer_allowed_is_not_renewed_and_no_longer_served() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let pebble = Pebble::start(&pki, port, 30);
    let ask = AskEndpoint::start();
    let state = pki.dir.path().join("state");
    let shuck = Shuck::start(&on_demand_config(port, &pebble, &pki, &ask.url, &state));
    let (ok, err) = curl_name("leaving.customer.test", shuck.addr(), &pebble.root);
    assert!(ok, "{err}\n{}", shuck.log_text());
    let bundle = state.join("acme/on-demand/saas/leaving.customer.test.pem");
    assert!(bundle.exists());
    ask.denied
        .lock()
        .expect("lock")
        .push("leaving.customer.test".into());
    shuck.wait_log_within("no longer allows this name", Duration::from_secs(40));
    let deadline = Instant::now() + Duration::from_secs(5);
    while bundle.exists() {
        assert!(Instant::now() < deadline, "the bundle is kept");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, _) = curl_name("leaving.customer.test", shuck.addr(), &pebble.root);
    assert!(!ok, "no longer served");
    assert_eq!(
        pebble
            .log_text()
            .matches("Issued certificate serial")
            .count(),
        1,
        "not renewed"
    );
    assert!(
        ask.asked()
            .iter()
            .filter(|n| *n == "leaving.customer.test")
            .count()
            >= 2,
        "asked before the renewal"
    );
}

/// The limits: with `max_per_minute = 1` a second new name within the minute fails its
/// handshake at once (counted `rate_limited`) and orders nothing; with a CA that never answers,
/// a handshake is held for its `hold` (2 s) and then refused with an alert, not left hanging
/// (counted `held_too_long`).
#[test]
fn a_name_past_the_rate_limit_or_past_its_hold_fails_cleanly() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let pebble = Pebble::start(&pki, port, 300);
    let ask = AskEndpoint::start();
    let state = pki.dir.path().join("state");
    let config = on_demand_config(port, &pebble, &pki, &ask.url, &state)
        .replace("max_per_minute = 5", "max_per_minute = 1");
    let shuck = Shuck::start(&config);
    let metrics = *shuck.addrs.last().expect("metrics");
    let (ok, err) = curl_name("first.customer.test", shuck.addr(), &pebble.root);
    assert!(ok, "{err}");
    let started = Instant::now();
    let (ok, err) = curl_name("second.customer.test", shuck.addr(), &pebble.root);
    assert!(!ok && started.elapsed() < Duration::from_secs(5), "{err}");
    assert_eq!(on_demand_count(metrics, "rate_limited"), 1);
    assert!(!pebble.log_text().contains("second.customer.test"));
    drop(shuck);

    // A CA that takes connections and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    let directory = format!("https://{}/dir", silent.local_addr().expect("addr"));
    let config = on_demand_config(port, &pebble, &pki, &ask.url, &pki.dir.path().join("s2"))
        .replace(&pebble.directory, &directory)
        .replace("hold = \"30s\"", "hold = \"2s\"");
    let shuck = Shuck::start(&config);
    let metrics = *shuck.addrs.last().expect("metrics");
    let started = Instant::now();
    let (ok, err) = curl_name("held.customer.test", shuck.addr(), &pebble.root);
    let took = started.elapsed();
    assert!(!ok, "served without a certificate?");
    assert!(err.contains("alert"), "refused with an alert: {err}");
    assert!(
        (Duration::from_secs(2)..Duration::from_secs(6)).contains(&took),
        "{took:?}"
    );
    assert_eq!(on_demand_count(metrics, "held_too_long"), 1);
    drop(silent);
}

/// A name another frontend orders by its `acme.names` is not ordered or served on demand:
/// refused at once, nobody asked, counted `reserved`; a certificate issued on demand before
/// the name was listed is no longer served. (Such a name was asked about and ordered, and the
/// two orders' challenges for one name replaced each other: the process answers validators by
/// name.)
#[test]
fn a_name_another_frontend_orders_is_not_ordered_on_demand() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let pebble = Pebble::start(&pki, port, 300);
    let ask = AskEndpoint::start();
    let state = pki.dir.path().join("state");
    let on_demand = on_demand_config(port, &pebble, &pki, &ask.url, &state);
    let shuck = Shuck::start(&on_demand);
    let (ok, err) = curl_name("shop.customer.test", shuck.addr(), &pebble.root);
    assert!(ok, "issued on demand first: {err}");
    drop(shuck);
    // The name now listed by another frontend.
    let listed = format!(
        "{on_demand}[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:{}\"\n\
         acme = {{ directory = \"{}\", directory_ca = {}, names = [\"shop.customer.test\"] }}\n",
        free_tcp_port(),
        pebble.directory,
        toml_path(&pki.ca_path()),
    );
    let shuck = Shuck::start(&listed);
    shuck.wait_log("not served or renewed on demand");
    let metrics = *shuck.addrs.last().expect("metrics");
    let started = Instant::now();
    let (ok, err) = super::curl_name("shop.customer.test", shuck.addr(), &pebble.root, 10);
    assert!(!ok && started.elapsed() < Duration::from_secs(5), "{err}");
    assert_eq!(on_demand_count(metrics, "reserved"), 1);
    assert_eq!(ask.asked(), vec!["shop.customer.test".to_string()]);
    // Any other name is asked about and issued.
    let (ok, err) = curl_name("other.customer.test", shuck.addr(), &pebble.root);
    assert!(ok, "{err}");
    assert_eq!(ask.asked().len(), 2, "{:?}", ask.asked());
}

/// The jobs of the names an earlier run stored start 100 ms apart, not all at once: each reads
/// the fleet's store as it starts (and asks the CA for its renewal window), and a frontend may
/// have a thousand. Four names issued, then a restart: their first store reads, as redis-server's
/// MONITOR times them, come apart: the second to the fourth span at least 0.15 s (2 × 100 ms,
/// less slack; the first may wait for the store's connection, made by the first read); all four
/// are served at once meanwhile. (They came within a few milliseconds of each other.)
#[test]
fn the_stored_names_jobs_start_apart() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let pebble = Pebble::start(&pki, port, 300);
    let ask = AskEndpoint::start();
    let redis = RedisServer::start(&[]);
    let state = pki.dir.path().join("state");
    let config = format!(
        "{}acme_store = \"redis://127.0.0.1:{}\"\nacme_store_key = {}\n",
        on_demand_config(port, &pebble, &pki, &ask.url, &state),
        redis.port,
        toml_path(&super::fleet_key(&pki))
    );
    let names: Vec<String> = (0..4).map(|i| format!("shop{i}.customer.test")).collect();
    let shuck = Shuck::start(&config);
    for name in &names {
        let (ok, err) = curl_name(name, shuck.addr(), &pebble.root);
        assert!(ok, "{name}: {err}");
    }
    drop(shuck);
    let monitor = super::RedisMonitor::start(redis.port, pki.path("monitor.log"));
    let monitored = || monitor.text();
    let shuck = Shuck::start(&config);
    for name in &names {
        let (ok, err) = super::curl_name(name, shuck.addr(), &pebble.root, 5);
        assert!(ok, "{name} served at once after the restart: {err}");
    }
    // The first read of each name's certificate in the store, by MONITOR's clock.
    let first_reads = || {
        let mut first = std::collections::BTreeMap::<String, f64>::new();
        for line in monitored().lines() {
            let Some((time, rest)) = line.split_once(' ') else {
                continue;
            };
            let key = rest
                .split('"')
                .find(|part| part.starts_with("shuck:acme:cert:"));
            if let (Some(key), Ok(t)) = (key, time.parse::<f64>()) {
                if rest.contains("\"GET\"") {
                    first.entry(key.to_string()).or_insert(t);
                }
            }
        }
        first
    };
    shuck_test_support::process::wait_for("four names' reads", Duration::from_secs(10), || {
        first_reads().len() >= names.len()
    });
    let mut times: Vec<f64> = first_reads().into_values().collect();
    times.sort_by(f64::total_cmp);
    let spread = times[3] - times[1];
    assert!(
        spread >= 0.15,
        "second to fourth first reads {spread:.3} s apart: {times:?}"
    );
}
