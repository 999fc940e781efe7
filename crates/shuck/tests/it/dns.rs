//! Host-name backends follow DNS (`dns_refresh`, `resolvers`) with a real DNS server, dnsmasq,
//! whose records the test changes while a client loop runs through shuck.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;

use shuck_test_support::clients::{held_request, scrape, sum, wait_metric, within, ClientLoop};
use shuck_test_support::dns::Dnsmasq;
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{HttpBackend, Shuck};

/// Two backends on 127.0.0.2 and 127.0.0.3 with the same port, as one service's instances on
/// two hosts are.
fn two_hosts() -> (HttpBackend, HttpBackend) {
    for _ in 0..50 {
        let a = HttpBackend::start_on("127.0.0.2:0".parse().expect("addr")).expect("bind");
        let twin = SocketAddr::new([127, 0, 0, 3].into(), a.addr.port());
        if let Some(b) = HttpBackend::start_on(twin) {
            return (a, b);
        }
    }
    panic!("no port free on both 127.0.0.2 and 127.0.0.3");
}

/// Connections shuck made to the member of `name` at `ip`.
fn connects_to(metrics: SocketAddr, name: &str, ip: &str) -> i64 {
    sum(
        &scrape(metrics),
        "shuck_backend_connect_duration_seconds_count",
        &[&format!("backend=\"{name}@{ip}\"")],
    )
}

/// A host-name backend with the TTL followed (dnsmasq answers with 1 s): a second address
/// added to the name receives connections within about a refresh, a removed one gets no new
/// connection while a connection it had keeps going, a DNS server that stops answering keeps the
/// last good answer, and a client loop running all along sees no failure.
#[test]
fn a_host_name_backend_follows_dns_changes_with_no_client_failure() {
    let (a, b) = two_hosts();
    let (ip_a, ip_b): (IpAddr, IpAddr) = ([127, 0, 0, 2].into(), [127, 0, 0, 3].into());
    let dns = Dnsmasq::start(&[("app.internal", ip_a)]);
    let pki = Pki::new();
    let cert = pki.leaf("dns.pem", "dns", &["app.test"], Key::EcdsaP256);
    let name = format!("app.internal:{}", a.addr.port());
    let shuck = Shuck::start(&format!(
        "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\nresolvers = [\"{}\"]\ndns_allow_special_addresses = true\n[[frontend]]\nname = \"web\"\n\
         listen = \"127.0.0.1:0\"\nbackend = \"{name}\"\ncertificates = {}\n",
        dns.addr,
        toml_path(&cert)
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let context = || {
        format!(
            "--- shuck log:\n{}\n--- dnsmasq log:\n{}",
            shuck.log_text(),
            dns.log_text()
        )
    };
    // Resolved before listening: the first connection already has an address.
    let mut held = held_request(&pki, web, "app.test", "/held");
    wait_metric(
        metrics,
        "shuck_backend_connect_duration_seconds_count",
        &[],
        1,
    );
    assert_eq!(connects_to(metrics, &name, "127.0.0.2"), 1, "{}", context());
    std::thread::scope(|scope| {
        let clients = ClientLoop::start(scope, &pki, web, "app.test");

        dns.set(&[("app.internal", ip_a), ("app.internal", ip_b)]);
        let took = within(
            Duration::from_secs(6),
            "connections to the added address",
            || connects_to(metrics, &name, "127.0.0.3") > 0,
            context,
        );
        eprintln!("the added address took connections {took:?} after the DNS change");

        dns.set(&[("app.internal", ip_b)]);
        shuck.wait_log_count("resolves to new addresses", 3);
        // Connections accepted just before the change may still reach the old address: let
        // them finish first.
        let settled = b.served.load(Ordering::Relaxed) + 3;
        within(
            Duration::from_secs(20),
            "3 requests after the change",
            || b.served.load(Ordering::Relaxed) >= settled,
            context,
        );
        // Counted by the backend itself: the removed address's connect series goes once every
        // worker has rebuilt its pool.
        let before = a.served.load(Ordering::Relaxed);
        let served_b = b.served.load(Ordering::Relaxed);
        within(
            Duration::from_secs(20),
            "20 more requests to the remaining address",
            || b.served.load(Ordering::Relaxed) >= served_b + 20,
            context,
        );
        assert_eq!(
            a.served.load(Ordering::Relaxed),
            before,
            "the removed address got new connections:\n{}",
            context()
        );
        // The connection made to the removed address before the change still goes there.
        let served_a = a.served.load(Ordering::Relaxed);
        held.write_all(b"Host: app.test\r\n\r\n")
            .expect("rest of the request");
        let mut answer = Vec::new();
        let _ = held.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(
            answer.contains("backend got: GET /held"),
            "{answer}\n{}",
            context()
        );
        assert_eq!(
            a.served.load(Ordering::Relaxed),
            served_a + 1,
            "answered by the old address"
        );

        // The DNS server goes away: lookups fail, the last answer stays, one line says so.
        dns.stop();
        wait_metric(
            metrics,
            "shuck_dns_lookups_total",
            &["result=\"failed\""],
            2,
        );
        let served_b = b.served.load(Ordering::Relaxed);
        within(
            Duration::from_secs(20),
            "10 more requests while DNS is down",
            || b.served.load(Ordering::Relaxed) >= served_b + 10,
            context,
        );
        let (done, failures) = clients.finish();
        let log = shuck.log_text();
        assert_eq!(
            log.matches("lookup failed").count(),
            1,
            "one line per change of state: {log}"
        );
        assert!(done > 30, "only {done} requests ran");
        assert!(
            failures.is_empty(),
            "{} of {done} requests failed: {failures:?}\n{}",
            failures.len(),
            context()
        );
    });
}

/// What a DNS answer may name is filtered: 0.0.0.0 (which the kernel takes as this host) is
/// never a member, and loopback is one only with `dns_allow_special_addresses = true`. A refused
/// answer is counted and logged once, and sends no client to a service bound to 127.0.0.1 only.
#[test]
fn unspecified_and_loopback_answers_are_refused_unless_allowed() {
    let local_only = HttpBackend::start_on("127.0.0.1:0".parse().expect("addr")).expect("bind");
    let port = local_only.addr.port();
    let dns = Dnsmasq::start(&[
        ("zero.internal", [0, 0, 0, 0].into()),
        ("local.internal", [127, 0, 0, 1].into()),
    ]);
    let pki = Pki::new();
    let cert = pki.leaf(
        "dns.pem",
        "dns",
        &["zero.test", "local.test"],
        Key::EcdsaP256,
    );
    let config = |allow: bool| {
        format!(
            "metrics_listen = \"127.0.0.1:0\"\nresolvers = [\"{}\"]\ndns_allow_special_addresses = {allow}\n\
             [[frontend]]\nname = \"zero\"\nlisten = \"127.0.0.1:0\"\nbackend = \"zero.internal:{port}\"\ncertificates = {cert}\n\
             [[frontend]]\nname = \"local\"\nlisten = \"127.0.0.1:0\"\nbackend = \"local.internal:{port}\"\ncertificates = {cert}\n",
            dns.addr,
            cert = toml_path(&cert)
        )
    };
    for allow in [false, true] {
        let shuck = Shuck::start(&config(allow));
        let ask = |at: SocketAddr, name: &str| {
            shuck_test_support::clients::curl_at(&pki, at, name, "/", &["--max-time", "5"])
                .status
                .success()
        };
        assert!(
            !ask(shuck.addrs[0], "zero.test"),
            "0.0.0.0 reached the local service"
        );
        assert_eq!(
            ask(shuck.addrs[1], "local.test"),
            allow,
            "loopback with dns_allow_special_addresses = {allow}:\n{}",
            shuck.log_text()
        );
        let text = scrape(shuck.addrs[2]);
        let refused = |name: &str| {
            sum(
                &text,
                "shuck_dns_refused_addresses_total",
                &[&format!("name=\"{name}.internal:{port}\"")],
            )
        };
        assert!(refused("zero") > 0, "{text}");
        assert_eq!(refused("local") > 0, !allow, "{text}");
        let log = shuck.log_text();
        assert_eq!(
            log.matches("refused addresses").count(),
            if allow { 1 } else { 2 },
            "one line per name: {log}"
        );
    }
    assert_eq!(
        local_only.served.load(Ordering::Relaxed),
        1,
        "only the allowed loopback request"
    );
}

/// A reload abandoned while it waited on DNS (past `reload_timeout`) starts nothing that
/// outlives it: the host name only its unapplied configuration had is no longer looked up, and
/// has no series. (It was once looked up 18 times in 20 s after the reload was given up.)
#[test]
fn an_abandoned_reload_leaves_no_name_followed() {
    let silent =
        std::net::UdpSocket::bind("127.0.0.78:0").expect("a DNS server that never answers");
    let pki = Pki::new();
    let cert = pki.leaf("dns.pem", "dns", &["app.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let config = |backend: &str| {
        format!(
            "reload_timeout = \"1s\"\nmetrics_listen = \"127.0.0.1:0\"\nresolvers = [\"{}\"]\n\
             [[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ndns_refresh = \"1s\"\ncertificates = {}\n",
            silent.local_addr().expect("addr"),
            toml_path(&cert)
        )
    };
    let shuck = Shuck::start(&config(&backend.addr.to_string()));
    let metrics = shuck.addrs[1];
    std::fs::write(shuck.config_path(), config("slow.internal:8080")).expect("config");
    shuck.signal("HUP");
    shuck.wait_log("reload abandoned");
    let followed = || {
        let text = scrape(metrics);
        text.lines()
            .any(|l| l.starts_with("shuck_dns_") && l.contains("slow.internal"))
    };
    within(
        Duration::from_secs(10),
        "the unapplied name no longer followed",
        || !followed(),
        || format!("{}\n{}", scrape(metrics), shuck.log_text()),
    );
    // Its follower would look it up again every second or two (dns_refresh, the 2 s timeout):
    // nothing shows a follower that is gone, so three seconds without its series.
    std::thread::sleep(Duration::from_secs(3));
    assert!(!followed(), "{}", scrape(metrics));
    assert_eq!(
        shuck_test_support::clients::curl_at(&pki, shuck.addrs[0], "app.test", "/", &[])
            .status
            .code(),
        Some(0),
        "the configuration in force serves on"
    );
}

/// A name whose address keeps changing: the series and status-page rows of the addresses it no
/// longer has go, so what `/metrics` exports stays bounded by what the pools hold. (Every
/// address a name ever had once kept its series and row: 232 rows for a name of 2 addresses.)
#[test]
fn addresses_a_name_no_longer_has_leave_the_metrics_and_the_status_page() {
    let ips: Vec<IpAddr> = (2..=6).map(|i| IpAddr::from([127, 0, 0, i])).collect();
    let backends: Vec<HttpBackend> = 'found: {
        for _ in 0..50 {
            let first = HttpBackend::start_on(SocketAddr::new(ips[0], 0)).expect("bind");
            let port = first.addr.port();
            let rest: Option<Vec<HttpBackend>> = ips[1..]
                .iter()
                .map(|ip| HttpBackend::start_on(SocketAddr::new(*ip, port)))
                .collect();
            if let Some(mut rest) = rest {
                rest.insert(0, first);
                break 'found rest;
            }
        }
        panic!("no port free on all of 127.0.0.2-6");
    };
    let port = backends[0].addr.port();
    let dns = Dnsmasq::start(&[("rot.internal", ips[0])]);
    let pki = Pki::new();
    let cert = pki.leaf("dns.pem", "dns", &["rot.test"], Key::EcdsaP256);
    let name = format!("rot.internal:{port}");
    let shuck = Shuck::start(&format!(
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\nresolvers = [\"{}\"]\ndns_allow_special_addresses = true\n\
         [[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{name}\"\ncertificates = {}\n",
        dns.addr,
        toml_path(&cert)
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    for (i, ip) in ips.iter().enumerate() {
        dns.set(&[("rot.internal", *ip)]);
        within(
            Duration::from_secs(10),
            "a request served by the new address",
            || {
                let _ = shuck_test_support::clients::curl_at(&pki, web, "rot.test", "/", &[]);
                backends[i].served.load(Ordering::Relaxed) > 0
            },
            || shuck.log_text(),
        );
    }
    let text = scrape(metrics);
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("shuck_backend_connect_duration_seconds_count"))
        .collect();
    assert_eq!(series.len(), 1, "one member, one series: {series:#?}");
    assert!(series[0].contains("@127.0.0.6"), "{series:?}");
    let page = crate::routes::status_page(metrics);
    for gone in &ips[..4] {
        assert!(!page.contains(&format!("@{gone}<")), "{gone}: {page}");
    }
    assert!(page.contains("@127.0.0.6<"), "{page}");
}
