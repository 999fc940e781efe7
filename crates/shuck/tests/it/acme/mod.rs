//! ACME against a real ACME server: pebble (Debian's `pebble`), with its own CA, validating
//! TLS-ALPN-01 on shuck's listener; names resolve to 127.0.0.1 through pebble-challtestsrv's DNS.
//! `cargo test --workspace acme` runs these.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shuck_test_support::peers::require;
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{run_bounded, Shuck};

/// The name the tests order a certificate for; pebble's DNS answers 127.0.0.1 for any name.
const NAME: &str = "shop.acme.test";

fn free_tcp_port() -> u16 {
    shuck_test_support::ports::tcp()
}

/// A port free for both UDP and TCP: a DNS server answers on both.
fn free_dns_port() -> u16 {
    shuck_test_support::ports::tcp_and_udp()
}

/// A child process killed on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// redis-server's MONITOR: every command the server runs, written to a file as it runs it.
struct RedisMonitor {
    _child: Killed,
    log: PathBuf,
}

impl RedisMonitor {
    /// Watching the server on `port` (once MONITOR answers), written to `log`.
    fn start(port: u16, log: PathBuf) -> RedisMonitor {
        let child = Command::new(require("redis-cli", "redis-tools"))
            .args(["-h", "127.0.0.1", "-p", &port.to_string(), "MONITOR"])
            .stdout(std::fs::File::create(&log).expect("monitor log"))
            .spawn()
            .expect("redis-cli MONITOR");
        let monitor = RedisMonitor {
            _child: Killed(child),
            log,
        };
        shuck_test_support::process::wait_for("MONITOR", Duration::from_secs(10), || {
            monitor.text().contains("OK")
        });
        monitor
    }

    /// What it has seen so far.
    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// pebble and its DNS server, for one test; the directory at `directory`, issued certificates
/// chaining to `root` (fetched from pebble's management interface).
struct Pebble {
    _dns: Option<Killed>,
    _server: Killed,
    directory: String,
    root: PathBuf,
    log: PathBuf,
}

impl Pebble {
    /// Starts pebble validating TLS-ALPN-01 on `tls_port`, issuing certificates valid for
    /// `validity` seconds.
    fn start(pki: &Pki, tls_port: u16, validity: u64) -> Pebble {
        Self::start_with(pki, tls_port, validity, None)
    }

    /// The same, requiring external account binding with the key `eab` (ID, base64url key).
    fn start_with(pki: &Pki, tls_port: u16, validity: u64, eab: Option<(&str, &str)>) -> Pebble {
        Self::start_spec(
            pki,
            &Spec {
                tls_port,
                validity,
                eab,
                ..Spec::default()
            },
        )
    }

    /// pebble as `spec` says; names resolve through pebble-challtestsrv (127.0.0.1 for all)
    /// unless `spec.dns` names a DNS server of the test's.
    fn start_spec(pki: &Pki, spec: &Spec<'_>) -> Pebble {
        let pebble = require("pebble", "pebble");
        let dir = pki.dir.path();
        let (dns, dns_child) = if let Some(server) = &spec.dns {
            (server.clone(), None)
        } else {
            let dns = format!("127.0.0.1:{}", free_dns_port());
            (dns.clone(), Some(challtestsrv(&dns)))
        };
        // pebble's HTTPS certificate, from the test CA; the same bundle holds chain and key.
        let tls = pki.leaf(
            "pebble.pem",
            "pebble",
            &["localhost", "127.0.0.1"],
            Key::EcdsaP256,
        );
        let (listen, management) = (free_tcp_port(), free_tcp_port());
        let config = dir.join("pebble.json");
        let json = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{listen}"),
            "managementListenAddress": format!("127.0.0.1:{management}"),
            "certificate": tls, "privateKey": tls,
            "httpPort": spec.http_port.unwrap_or_else(free_tcp_port), "tlsPort": spec.tls_port,
            "ocspResponderURL": "", "externalAccountBindingRequired": spec.eab.is_some(),
            "externalAccountMACKeys": spec.eab.map(|(kid, key)| serde_json::json!({ kid: key })),
            "certificateValidityPeriod": spec.validity,
        }});
        std::fs::write(&config, json.to_string()).expect("pebble config");
        let log = dir.join("pebble.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(pebble)
            .arg("-config")
            .arg(&config)
            .args(["-dnsserver", &dns])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .env("PEBBLE_WFE_NONCEREJECT", "0")
            .env("PEBBLE_AUTHZREUSE", "0")
            .stdout(out.try_clone().expect("dup"))
            .stderr(out)
            .spawn()
            .expect("start pebble");
        let (dns, pebble) = (dns_child.map(Killed), Killed(child));
        wait_tcp(&format!("127.0.0.1:{management}"), &log);
        let root = dir.join("pebble-root.pem");
        let out = run_bounded(
            Command::new("curl")
                .args(["-sS", "--fail", "--cacert"])
                .arg(pki.ca_path())
                .arg(format!("https://127.0.0.1:{management}/roots/0"))
                .arg("-o")
                .arg(&root),
            b"",
            20,
        );
        assert!(
            out.status.success(),
            "pebble root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Pebble {
            _dns: dns,
            _server: pebble,
            directory: format!("https://127.0.0.1:{listen}/dir"),
            root,
            log,
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// What a test's pebble validates on and how long its certificates last.
#[derive(Default)]
struct Spec<'a> {
    /// Where TLS-ALPN-01 and HTTP-01 validations connect (on the name's address).
    tls_port: u16,
    http_port: Option<u16>,
    validity: u64,
    eab: Option<(&'a str, &'a str)>,
    /// The DNS server pebble asks (`IP:port`), instead of a pebble-challtestsrv of its own.
    dns: Option<String>,
}

/// pebble-challtestsrv as a DNS server alone, answering 127.0.0.1 for every name.
fn challtestsrv(dns: &str) -> Child {
    Command::new(require("pebble-challtestsrv", "pebble"))
        .args([
            "-dns01",
            dns,
            "-http01",
            "",
            "-https01",
            "",
            "-tlsalpn01",
            "",
        ])
        .args(["-management", &format!("127.0.0.1:{}", free_tcp_port())])
        .args(["-defaultIPv6", "", "-defaultIPv4", "127.0.0.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start pebble-challtestsrv")
}

fn wait_tcp(addr: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "pebble did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One frontend on `port` with its certificate from `directory`; its state in `state`.
fn acme_config(port: u16, directory: &str, ca: &Path, state: &Path) -> String {
    format!(
        "workers = 2\nstate_dir = {}\n[[frontend]]\nlisten = \"127.0.0.1:{port}\"\n\
         acme = {{ directory = \"{directory}\", names = [\"{NAME}\"], contact = [\"mailto:ops@acme.test\"], directory_ca = {} }}\n",
        toml_path(state),
        toml_path(ca)
    )
}

/// curl to the frontend by name, trusting only `ca`: (success, stderr).
fn curl_trusting(ca: &Path, addr: SocketAddr) -> (bool, String) {
    curl_name(NAME, addr, ca, 5)
}

/// curl to `name` on `addr`'s port at 127.0.0.1 within `secs`, trusting only `ca`: (success,
/// stderr).
fn curl_name(name: &str, addr: SocketAddr, ca: &Path, secs: u64) -> (bool, String) {
    let out = run_bounded(
        Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                &secs.to_string(),
                "-o",
                "/dev/null",
                "--cacert",
            ])
            .arg(ca)
            .arg("--resolve")
            .arg(format!("{name}:{}:127.0.0.1", addr.port()))
            .arg(format!("https://{name}:{}/", addr.port())),
        b"",
        secs + 15,
    );
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The sum of a counter family's samples whose label `label` is `value` (over the others).
fn counter_sum(metrics: SocketAddr, family: &str, (label, value): (&str, &str)) -> u64 {
    shuck_test_support::clients::scrape(metrics)
        .lines()
        .filter(|l| {
            l.starts_with(&format!("{family}{{")) && l.contains(&format!("{label}=\"{value}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// What `openssl s_client` prints about the frontend's certificate for NAME.
fn s_client_text(addr: SocketAddr) -> String {
    s_client_text_for(addr, NAME)
}

/// What `openssl s_client` prints about the frontend's certificate for `name`.
fn s_client_text_for(addr: SocketAddr, name: &str) -> String {
    let out = run_bounded(
        Command::new("openssl").args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            name,
        ]),
        b"",
        20,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The leaf certificate the frontend serves for NAME, PEM.
fn served_leaf(addr: SocketAddr) -> String {
    served_leaf_for(addr, NAME)
}

/// The leaf certificate the frontend serves for `name`, PEM.
fn served_leaf_for(addr: SocketAddr, name: &str) -> String {
    let text = s_client_text_for(addr, name);
    let begin = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end = text.find("-----END CERTIFICATE-----").expect("its end");
    text[begin..end].to_string()
}

/// The subject line of the served certificate.
fn served_subject(addr: SocketAddr) -> String {
    s_client_text(addr)
        .lines()
        .find(|l| l.starts_with("subject="))
        .unwrap_or_default()
        .to_string()
}

/// shuck orders a certificate from pebble (TLS-ALPN-01 answered on its own listener), serves it
/// (curl trusting only pebble's root succeeds), renews it at two thirds of its 45-second
/// lifetime while a client keeps connecting (none fails), and after a restart serves the stored
/// certificate with the stored account, ordering nothing.
#[test]
fn acme_issues_serves_renews_and_restarts_from_the_stored_certificate() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let pebble = Pebble::start(&pki, port, 45);
    let state = pki.dir.path().join("state");
    let config = acme_config(port, &pebble.directory, &pki.ca_path(), &state);
    let shuck = Shuck::start(&config);
    let addr = shuck.addr();
    // Until issued: the temporary certificate, which pebble's root does not sign.
    shuck.wait_log("ACME certificate issued");
    shuck.wait_log("loaded a renewed certificate or OCSP staple");
    let (ok, err) = curl_trusting(&pebble.root, addr);
    assert!(ok, "{err}\n{}", shuck.log_text());
    let first = served_leaf(addr);
    // Keep connecting through the renewal.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut served = 0;
    while shuck.log_text().matches("ACME certificate issued").count() < 2 {
        assert!(
            Instant::now() < deadline,
            "no renewal: {}\n{}",
            shuck.log_text(),
            pebble.log_text()
        );
        let (ok, err) = curl_trusting(&pebble.root, addr);
        assert!(ok, "a client failed during the renewal: {err}");
        served += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    shuck.wait_log_count("loaded a renewed certificate or OCSP staple", 2);
    assert!(served > 10, "{served} requests during the renewal");
    let second = served_leaf(addr);
    assert_ne!(first, second, "the renewed certificate is served");
    let (ok, err) = curl_trusting(&pebble.root, addr);
    assert!(ok, "{err}");
    let (status, log) = shuck.stop();
    assert!(status.success(), "{log}");
    assert_eq!(log.matches("ACME account created").count(), 1, "{log}");
    let bundle = state.join("acme/certs/frontend0.pem");
    let mode = std::fs::metadata(&bundle)
        .expect("stored")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // A restart: the stored certificate is served at once, nothing is ordered.
    let shuck = Shuck::start(&config);
    assert_eq!(served_leaf(shuck.addr()), second);
    let (ok, err) = curl_trusting(&pebble.root, shuck.addr());
    assert!(ok, "{err}");
    // An order that does not start has no event: a second for one to show in the log.
    std::thread::sleep(Duration::from_secs(1));
    let log = shuck.log_text();
    assert!(
        !log.contains("an ACME certificate") && !log.contains("account created"),
        "{log}"
    );
}

/// With the CA unreachable the frontend serves its temporary certificate, named as such, and the
/// failure is logged once per attempt; with `until_issued = "refuse"` it serves nothing.
#[test]
fn acme_unreachable_ca_keeps_the_temporary_certificate_and_logs_the_failure() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let nobody = format!("https://127.0.0.1:{}/dir", free_tcp_port());
    let state = pki.dir.path().join("state");
    let shuck = Shuck::start(&acme_config(port, &nobody, &pki.ca_path(), &state));
    let log = shuck.wait_log("ACME order failed");
    assert_eq!(log.matches("ACME order failed").count(), 1, "{log}");
    assert!(log.contains("retry_in=10s"), "{log}");
    let subject = served_subject(shuck.addr());
    assert!(subject.contains("shuck temporary certificate"), "{subject}");
    // It still serves (a client that accepts any certificate gets the demo page).
    let out = run_bounded(
        Command::new("curl")
            .args(["-sS", "-k", "--max-time", "5"])
            .arg(format!("https://127.0.0.1:{port}/")),
        b"",
        20,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The fleet's key (what seals its store's values), made by `shuck ticket-key`.
fn fleet_key(pki: &Pki) -> PathBuf {
    let key = pki.path("fleet.key");
    let made = Command::new(&*shuck_test_support::process::SHUCK)
        .args(["ticket-key", "--format", "nginx"])
        .arg(&key)
        .output()
        .expect("shuck ticket-key");
    assert!(made.status.success(), "{made:?}");
    key
}

/// Every host's log, one after the other.
fn logs_of(hosts: &[Shuck]) -> String {
    let mut out = String::new();
    for (i, h) in hosts.iter().enumerate() {
        let _ = write!(out, "--- host {i}:\n{}", h.log_text());
    }
    out
}

/// One host of the fleet: the frontend on `port` with its own state, the fleet's store (through
/// `acme_store`) and key.
fn fleet_config(
    port: u16,
    pebble: &Pebble,
    pki: &Pki,
    state: &Path,
    store: &str,
    key: &Path,
) -> String {
    format!(
        "{}acme_store = \"{store}\"\nacme_store_key = {}\n",
        acme_config(port, &pebble.directory, &pki.ca_path(), state),
        toml_path(key)
    )
}

/// Three hosts behind HAProxy (round-robin, `mode tcp`), a Redis Cluster of three masters as
/// their `acme_store` (each key on the master of its slot), pebble validating
/// TLS-ALPN-01 on the balancer's port (its DNS points the name at it), so a validation reaches
/// any host. The host that takes the lease is killed mid-order: nobody orders until its lease
/// lapses; then exactly one other host orders, both remaining hosts serve the same certificate,
/// a host that joins later loads it and orders nothing, and the renewal at two thirds of the
/// 60-second lifetime happens once for the fleet while a client loop through the balancer sees
/// no failure.
#[test]
fn fleet_acme_three_hosts_behind_a_balancer_share_one_certificate() {
    let pki = Pki::new();
    let ports: Vec<u16> = (0..4).map(|_| free_tcp_port()).collect();
    let targets: Vec<SocketAddr> = ports[..3]
        .iter()
        .map(|&p| SocketAddr::from(([127, 0, 0, 1], p)))
        .collect();
    let balancer = shuck_test_support::peers::haproxy_balancer([127, 0, 0, 1].into(), &targets);
    let pebble = Pebble::start(&pki, balancer.addr.port(), 60);
    let cluster = shuck_test_support::redis::cluster(3);
    let store = format!(
        "redis+cluster://127.0.0.1:{},127.0.0.1:{}",
        cluster[0].port, cluster[1].port
    );
    let key = fleet_key(&pki);
    let mut hosts: Vec<Shuck> = (0..3)
        .map(|i| {
            let state = pki.dir.path().join(format!("state{i}"));
            Shuck::start(&fleet_config(ports[i], &pebble, &pki, &state, &store, &key))
        })
        .collect();
    // The host that takes the lease is killed at once, mid-order (its order has at least two
    // polls of 250 ms ahead of it): its lease is never released, it lapses.
    let orderer = wait_for_lease_taker(&hosts);
    let killed_at = Instant::now();
    hosts[orderer].signal("KILL");
    let dead = hosts.remove(orderer);
    let logs = || logs_of(&hosts);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !hosts.iter().all(|h| {
        h.log_text()
            .contains("loaded a renewed certificate or OCSP staple")
    }) {
        assert!(Instant::now() < deadline, "no host took over:\n{}", logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let took_over = killed_at.elapsed();
    let count = |needle: &str| {
        hosts
            .iter()
            .map(|h| h.log_text().matches(needle).count())
            .sum::<usize>()
    };
    assert!(
        !dead.log_text().contains("issued and stored"),
        "killed after its order: {}",
        dead.log_text()
    );
    assert_eq!(count("took the fleet's ACME lease"), 1, "{}", logs());
    assert_eq!(count("issued and stored for the fleet"), 1, "{}", logs());
    assert_eq!(
        count("loaded the fleet's ACME certificate"),
        1,
        "{}",
        logs()
    );
    assert!(
        took_over >= Duration::from_secs(12),
        "ordered before the dead host's lease lapsed ({took_over:?})"
    );
    // The CA's side: the order that completed was validated from several perspectives, each
    // connection to whichever host the balancer picked (one to the dead host is redispatched).
    // Killed while it ordered: perhaps before its account or order reached the CA, perhaps
    // after (then that order stays pending); one certificate was issued either way.
    let ca = pebble.log_text();
    assert_eq!(ca.matches("Issued certificate serial").count(), 1, "{ca}");
    let accounts = ca.matches("accounts in memory").count();
    eprintln!("a host took over {took_over:?} after the orderer was killed");
    let first: Vec<String> = hosts.iter().map(|h| served_leaf(h.addr())).collect();
    assert!(
        first.iter().all(|l| *l == first[0]),
        "one certificate for the fleet"
    );
    let (ok, err) = curl_trusting(&pebble.root, balancer.addr);
    assert!(ok, "{err}");

    // A host that joins later loads the stored certificate and orders nothing.
    let late_state = pki.dir.path().join("state3");
    let late = Shuck::start(&fleet_config(
        ports[3],
        &pebble,
        &pki,
        &late_state,
        &store,
        &key,
    ));
    late.wait_log("loaded a renewed certificate or OCSP staple");
    assert_eq!(served_leaf(late.addr()), first[0]);
    assert!(
        !late.log_text().contains("took the fleet's ACME lease"),
        "{}",
        late.log_text()
    );
    drop(late);

    // The renewal, once for the fleet, while clients keep connecting through the balancer.
    renewal_under_traffic(&hosts, &pebble, balancer.addr);
    let logs = || logs_of(&hosts);
    assert_eq!(count("took the fleet's ACME lease"), 2, "{}", logs());
    let second: Vec<String> = hosts.iter().map(|h| served_leaf(h.addr())).collect();
    assert!(
        second.iter().all(|l| *l == second[0]) && second[0] != first[0],
        "{}",
        logs()
    );
    let ca = pebble.log_text();
    assert_eq!(
        ca.matches("Issued certificate serial").count(),
        2,
        "one renewal: {ca}"
    );
    assert_eq!(
        ca.matches("accounts in memory").count(),
        accounts,
        "the renewal used the fleet's account: {ca}"
    );
    drop(dead);
}

/// Waits (bounded, 90 s) until every host loaded a second certificate, with a client through the
/// balancer every 100 ms meanwhile (none may fail); then checks the hosts that did not order
/// loaded it within half a second of its storing (notified through the store: without it, at the
/// next try of the lease, every 3 s, or the 30 s poll).
fn renewal_under_traffic(hosts: &[Shuck], pebble: &Pebble, balancer: SocketAddr) {
    let loads = |h: &Shuck| {
        h.log_text()
            .matches("loaded a renewed certificate or OCSP staple")
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut served = 0;
    while !hosts.iter().all(|h| loads(h) >= 2) {
        assert!(Instant::now() < deadline, "no renewal:\n{}", logs_of(hosts));
        let (ok, err) = curl_trusting(&pebble.root, balancer);
        assert!(ok, "a client failed during the renewal: {err}");
        served += 1;
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(served > 10, "{served} requests during the renewal");
    // The renewal is the later of the two certificates stored (not always by the same host).
    let stored = hosts
        .iter()
        .flat_map(|h| {
            let log = h.log_text();
            [1, 2].map(|n| log_time(&log, "issued and stored for the fleet", n))
        })
        .flatten()
        .max()
        .expect("the renewal was stored");
    for h in hosts {
        let loaded = log_time(&h.log_text(), "loaded a renewed certificate", 2).expect("loaded");
        let after = loaded - stored;
        eprintln!("loaded {after} after the renewal was stored");
        // Without the notification a host would find it at its next try of the lease (3 s).
        assert!(
            after >= time::Duration::ZERO && after < time::Duration::milliseconds(500),
            "{after}:\n{}",
            logs_of(hosts)
        );
    }
}

/// When the `n`th line holding `needle` was logged (the line's leading RFC 3339 time).
fn log_time(log: &str, needle: &str, n: usize) -> Option<time::OffsetDateTime> {
    let line = log.lines().filter(|l| l.contains(needle)).nth(n - 1)?;
    let stamp = line.split_whitespace().next()?;
    time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339).ok()
}

/// The index of the first host to log that it took the fleet's lease (polled every 5 ms).
fn wait_for_lease_taker(hosts: &[Shuck]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(i) = hosts
            .iter()
            .position(|h| h.log_text().contains("took the fleet's ACME lease"))
        {
            return i;
        }
        assert!(
            Instant::now() < deadline,
            "nobody took the lease:\n{}",
            logs_of(hosts)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A CA that requires external account binding (pebble with `externalAccountBindingRequired`):
/// a frontend without `eab_kid` is refused (the error logged), one with the key ID and its HMAC
/// key file gets its account and certificate.
#[test]
fn acme_external_account_binding_is_sent_when_the_ca_requires_it() {
    let pki = Pki::new();
    let port = free_tcp_port();
    let key = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
    let pebble = Pebble::start_with(&pki, port, 300, Some(("kid-shuck", key)));
    let without = Shuck::start(&acme_config(
        port,
        &pebble.directory,
        &pki.ca_path(),
        &pki.dir.path().join("state-without"),
    ));
    let log = without.wait_log("ACME order failed");
    assert!(log.to_lowercase().contains("external"), "{log}");
    drop(without);
    let key_file = pki.path("eab.key");
    std::fs::write(&key_file, format!("{key}\n")).expect("write key");
    let config = acme_config(
        port,
        &pebble.directory,
        &pki.ca_path(),
        &pki.dir.path().join("state"),
    )
    .replace(
        "acme = { ",
        &format!(
            "acme = {{ eab_kid = \"kid-shuck\", eab_hmac_key_file = {}, ",
            toml_path(&key_file)
        ),
    );
    let with = Shuck::start(&config);
    with.wait_log("ACME certificate issued");
    with.wait_log("loaded a renewed certificate or OCSP staple");
    let (ok, err) = curl_trusting(&pebble.root, with.addr());
    assert!(ok, "{err}\n{}", with.log_text());
}

mod challenges;
mod on_demand;
mod trust;
