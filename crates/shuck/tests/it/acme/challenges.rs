//! The other two ways a CA validates: HTTP-01 answered by the `[[redirect]]` listener on
//! "port 80" (here a free port pebble is told of), DNS-01 by dynamic update of a real BIND
//! `named` that pebble asks, wildcards included.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use shuck_test_support::clients::scrape;
use shuck_test_support::peers::require;
use shuck_test_support::pki::{toml_path, Pki};
use shuck_test_support::process::{run_bounded, Shuck};
use shuck_test_support::redis::RedisServer;

use super::{free_tcp_port, Killed, Pebble, Spec};

/// The value of `shuck_redirect_requests_total` for `outcome`, summed over listeners.
fn redirect_count(metrics: SocketAddr, outcome: &str) -> u64 {
    super::counter_sum(
        metrics,
        "shuck_redirect_requests_total",
        ("outcome", outcome),
    )
}

/// One host: a frontend on `port` ordering `name` by HTTP-01, its plain-HTTP listener on
/// `http_port` redirecting to `port`, the fleet's store at `store`.
fn http01_host(
    name: &str,
    (port, http_port): (u16, u16),
    pebble: &Pebble,
    pki: &Pki,
    store: &str,
    key: &Path,
) -> String {
    let state = pki.dir.path().join(format!("state-{name}"));
    format!(
        "workers = 1\nstate_dir = {}\nmetrics_listen = \"127.0.0.1:0\"\n\
         [[redirect]]\nlisten = \"127.0.0.1:{http_port}\"\nhttps_port = {port}\n\
         [[frontend]]\nlisten = \"127.0.0.1:{port}\"\n\
         acme = {{ directory = \"{}\", names = [\"{name}\"], challenge = \"http-01\", directory_ca = {} }}\n\
         acme_store = \"{store}\"\nacme_store_key = {}\n",
        toml_path(&state),
        pebble.directory,
        toml_path(&pki.ca_path()),
        toml_path(key),
    )
}

/// curl to `url` (following redirects when `follow`), names resolved to 127.0.0.1 on both
/// ports, trusting `ca`: (exit success, the effective URL and status, stderr).
fn curl(url: &str, resolve: &[String], ca: &Path, follow: bool) -> (bool, String, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "5",
        "-o",
        "/dev/null",
        "-w",
        "%{url_effective} %{http_code}",
        "--cacert",
    ])
    .arg(ca);
    if follow {
        cmd.arg("-L");
    }
    for r in resolve {
        cmd.args(["--resolve", r]);
    }
    let out = run_bounded(cmd.arg(url), b"", 20);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Two hosts share a store; pebble validates HTTP-01 on host B's plain-HTTP port only. Host A's
/// certificate is issued all the same (B answers A's challenge from the store), B's too; A's
/// listener answered no challenge. curl on http:// follows B's 301 to https:// and gets the page
/// with the issued certificate; a host no frontend serves gets 421; every request is counted.
#[test]
fn http_01_is_answered_by_a_host_that_did_not_order_and_curl_follows_the_redirect() {
    let pki = Pki::new();
    let (port_a, port_b, http_a, http_b) = (
        free_tcp_port(),
        free_tcp_port(),
        free_tcp_port(),
        free_tcp_port(),
    );
    let pebble = Pebble::start_spec(
        &pki,
        &Spec {
            tls_port: free_tcp_port(),
            http_port: Some(http_b),
            validity: 300,
            ..Spec::default()
        },
    );
    let redis = RedisServer::start(&[]);
    let store = format!("redis://127.0.0.1:{}", redis.port);
    let key = super::fleet_key(&pki);
    let b = Shuck::start(&http01_host(
        "b.acme.test",
        (port_b, http_b),
        &pebble,
        &pki,
        &store,
        &key,
    ));
    let a = Shuck::start(&http01_host(
        "shop.acme.test",
        (port_a, http_a),
        &pebble,
        &pki,
        &store,
        &key,
    ));
    for h in [&a, &b] {
        h.wait_log_within("ACME certificate issued", Duration::from_secs(60));
        h.wait_log("loaded a renewed certificate or OCSP staple");
    }
    // addrs: the frontend, the plain-HTTP listener, the metrics endpoint.
    let (metrics_a, metrics_b) = (a.addrs[2], b.addrs[2]);
    assert_eq!(
        redirect_count(metrics_a, "challenge"),
        0,
        "A's listener is never asked"
    );
    assert!(
        redirect_count(metrics_b, "challenge") >= 2,
        "{}",
        scrape(metrics_b)
    );
    let resolve = [
        format!("b.acme.test:{http_b}:127.0.0.1"),
        format!("b.acme.test:{port_b}:127.0.0.1"),
    ];
    let (ok, effective, err) = curl(
        &format!("http://b.acme.test:{http_b}/some/path?q=1"),
        &resolve,
        &pebble.root,
        true,
    );
    assert!(ok, "{err}\n{}", b.log_text());
    assert_eq!(
        effective,
        format!("https://b.acme.test:{port_b}/some/path?q=1 200")
    );
    let (_, unknown, _) = curl(
        &format!("http://other.example:{http_b}/"),
        &[format!("other.example:{http_b}:127.0.0.1")],
        &pebble.root,
        false,
    );
    assert!(unknown.ends_with(" 421"), "{unknown}");
    assert!(redirect_count(metrics_b, "redirected") >= 1);
    assert!(redirect_count(metrics_b, "unknown_host") >= 1);
}

/// A slow client that never ends its request is closed after 10 s, counted as `timeout`; a
/// request too long for the bounded reader is closed unanswered; one address holding 16
/// connections has its 17th closed at once.
#[test]
fn the_plain_http_listener_bounds_what_a_client_may_hold() {
    let http = free_tcp_port();
    let s = Shuck::start(&format!(
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\n[[redirect]]\nlisten = \"127.0.0.1:{http}\"\n\
         [[frontend]]\nlisten = \"127.0.0.1:0\"\nself_signed = true\n"
    ));
    let mut slow = std::net::TcpStream::connect(("127.0.0.1", http)).expect("connect");
    slow.write_all(b"GET / HTTP/1.1\r\nHost: a").expect("write");
    let started = Instant::now();
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut buf = [0u8; 64];
    let n = slow.read(&mut buf).unwrap_or(0);
    let held = started.elapsed();
    assert_eq!(n, 0, "no answer to half a request");
    assert!(
        (Duration::from_secs(9)..Duration::from_secs(15)).contains(&held),
        "{held:?}"
    );
    assert_eq!(redirect_count(s.addrs[2], "timeout"), 1);
    let mut long = std::net::TcpStream::connect(("127.0.0.1", http)).expect("connect");
    let _ = long.write_all(&vec![b'a'; 16 * 1024]);
    long.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut answer = Vec::new();
    let _ = long.read_to_end(&mut answer);
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    assert_eq!(redirect_count(s.addrs[2], "bad_request"), 1);
    let held: Vec<std::net::TcpStream> = (0..16)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", http)).expect("connect"))
        .collect();
    // Each held connection is accepted before the next is counted on.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut extra = std::net::TcpStream::connect(("127.0.0.1", http)).expect("connect");
    extra
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let closed_at_once = matches!(extra.read(&mut buf), Ok(0));
    assert!(closed_at_once && Instant::now() < deadline);
    assert_eq!(redirect_count(s.addrs[2], "too_many"), 1);
    drop(held);
}

/// A TSIG key `shuck-acme` made by `tsig-keygen`, in `dir`.
fn tsig_key(dir: &Path) -> PathBuf {
    let key = dir.join("tsig.key");
    let made = Command::new(require("tsig-keygen", "bind9"))
        .args(["-a", "hmac-sha256", "shuck-acme"])
        .output()
        .expect("tsig-keygen");
    assert!(made.status.success(), "{made:?}");
    std::fs::write(&key, &made.stdout).expect("key file");
    key
}

/// A BIND `named` serving the zone `acme.test` (every name 127.0.0.1), taking updates signed
/// with a TSIG key made by `tsig-keygen`.
struct Named {
    _child: Killed,
    addr: SocketAddr,
    key: PathBuf,
    log: PathBuf,
}

impl Named {
    /// The primary of `acme.test` on a free port of 127.0.0.1, its one NS server itself.
    fn start(dir: &Path) -> Named {
        let key = tsig_key(dir);
        std::fs::write(
            dir.join("acme.test.db"),
            "$TTL 60\n@ IN SOA ns.acme.test. hostmaster.acme.test. 1 60 60 600 60\n\
             @ IN NS ns.acme.test.\nns IN A 127.0.0.1\n@ IN A 127.0.0.1\n* IN A 127.0.0.1\n",
        )
        .expect("zone");
        let zone = format!(
            "zone \"acme.test\" {{ type primary; file \"{}/acme.test.db\"; allow-update {{ key \"shuck-acme\"; }}; }};\n",
            dir.display()
        );
        Named::run(
            dir,
            SocketAddr::from(([127, 0, 0, 1], super::free_dns_port())),
            &zone,
            key,
        )
    }

    /// named serving `zones`, listening on `addr` alone, its files in `dir`, with the TSIG key
    /// `key` (`shuck-acme`) known.
    fn run(dir: &Path, addr: SocketAddr, zones: &str, key: PathBuf) -> Named {
        let d = dir.display();
        let conf = dir.join("named.conf");
        std::fs::write(
            &conf,
            format!(
                "include \"{}\";\noptions {{ directory \"{d}\"; listen-on port {} {{ {}; }};\n\
                 listen-on-v6 {{ none; }}; pid-file none; session-keyfile \"{d}/session.key\";\n\
                 recursion no; dnssec-validation no; }};\ncontrols {{ }};\n{zones}",
                key.display(),
                addr.port(),
                addr.ip(),
            ),
        )
        .expect("named.conf");
        let log = dir.join("named.log");
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(require("named", "bind9"))
            .args(["-g", "-c"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup"))
            .stderr(out)
            .spawn()
            .expect("start named");
        let named = Named {
            _child: Killed(child),
            addr,
            key,
            log,
        };
        named.wait_log("running");
        // "running" comes also when an address could not be bound.
        named.wait_log(&format!("{}#{}", addr.ip(), addr.port()));
        named
    }

    /// Waits (20 s at most) for `needle` in the log.
    fn wait_log(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log_text().contains(needle) {
            assert!(
                Instant::now() < deadline,
                "named never logged {needle:?}: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// What `dig` finds for `name` TXT on this server.
    fn txt(&self, name: &str) -> String {
        let out = run_bounded(
            Command::new(require("dig", "bind9-dnsutils")).args([
                "+short",
                "-p",
                &self.addr.port().to_string(),
                &format!("@{}", self.addr.ip()),
                name,
                "TXT",
            ]),
            b"",
            20,
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// pebble validating with `named` as its DNS server.
fn pebble_asking(pki: &Pki, named: &Named) -> Pebble {
    Pebble::start_spec(
        pki,
        &Spec {
            tls_port: free_tcp_port(),
            validity: 300,
            dns: Some(named.addr.to_string()),
            ..Spec::default()
        },
    )
}

/// A frontend on `port` ordering `ordered` (TOML list items) by DNS-01 through `named`, signing
/// with `key`, trusting `ca` for the directory, its state in `state`.
fn dns01_config(
    (port, ordered): (u16, &str),
    pebble: &Pebble,
    named: &Named,
    (key, ca, state): (&Path, &Path, &Path),
) -> String {
    format!(
        "workers = 1\nstate_dir = {}\n[[frontend]]\nlisten = \"127.0.0.1:{port}\"\n\
         [frontend.acme]\ndirectory = \"{}\"\nnames = [{ordered}]\nchallenge = \"dns-01\"\n\
         directory_ca = {}\n[frontend.acme.dns_update]\nserver = \"{}\"\nzone = \"acme.test\"\n\
         tsig_key_file = {}\nnameservers = [\"{}\"]\npropagation_timeout = \"20s\"\n",
        toml_path(state),
        pebble.directory,
        toml_path(ca),
        named.addr,
        toml_path(key),
        named.addr,
    )
}

/// `shuck check --config <toml>`: (success, standard output, standard error).
fn shuck_check(toml: &Path) -> (bool, String, String) {
    let out = Command::new(&*shuck_test_support::process::SHUCK)
        .args(["check", "--config"])
        .arg(toml)
        .output()
        .expect("shuck check");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A certificate for `acme.test` and `*.acme.test` by DNS-01: pebble asks the real `named`,
/// which shuck updated with TSIG-signed messages; curl to any name under the zone verifies with
/// pebble's root; the records are gone afterwards. A key with the wrong secret gets a failed
/// order whose line names the DNS server and its refusal.
#[test]
fn dns_01_by_dynamic_update_gets_a_wildcard_certificate_from_a_real_named() {
    let pki = Pki::new();
    let named = Named::start(pki.dir.path());
    let port = free_tcp_port();
    let pebble = pebble_asking(&pki, &named);
    let ca = pki.ca_path();
    let config = |key: &Path, state: &str| {
        let state = pki.dir.path().join(state);
        dns01_config(
            (port, "\"acme.test\", \"*.acme.test\""),
            &pebble,
            &named,
            (key, &ca, &state),
        )
    };
    // shuck check reads the key as the start does: a missing file stops it, naming it.
    let missing = pki.path("missing.key");
    let toml = pki.path("check.toml");
    std::fs::write(&toml, config(&missing, "state-check")).expect("config");
    let (ok, _, said) = shuck_check(&toml);
    assert!(!ok, "{said}");
    assert!(
        said.contains("acme.dns_update") && said.contains("missing.key"),
        "{said}"
    );
    std::fs::write(&toml, config(&named.key, "state-check")).expect("config");
    let (ok, said, err) = shuck_check(&toml);
    assert!(ok, "{said}{err}");
    assert!(
        said.contains("dns-01") && said.contains("(readable)"),
        "{said}"
    );
    let secret_now = std::fs::read_to_string(&named.key).expect("key");
    let secret_now = secret_now.split('"').nth(3).expect("secret");
    assert!(
        !said.contains(secret_now),
        "no secret in shuck check's output"
    );
    // A forged key next: named refuses the update, the order fails, one line says so.
    let forged = pki.path("forged.key");
    let real = std::fs::read_to_string(&named.key).expect("key");
    let secret = real.split('"').nth(3).expect("secret").to_string();
    std::fs::write(
        &forged,
        real.replace(&secret, "c2hhcmVkIHNlY3JldCBidXQgbm90IHRoaXMgb25lIQ=="),
    )
    .expect("forged");
    let refused = Shuck::start(&config(&forged, "state-forged"));
    let log = refused.wait_log_within("ACME order failed", Duration::from_secs(30));
    assert!(
        log.contains(&format!(
            "DNS server {}: the update was refused: Not authorized",
            named.addr
        )) && !log.contains("cannot remove"),
        "{log}"
    );
    assert!(!log.contains(&secret), "the secret stays out of the log");
    drop(refused);

    let shuck = Shuck::start(&config(&named.key, "state"));
    shuck.wait_log_within("ACME certificate issued", Duration::from_secs(60));
    shuck.wait_log("loaded a renewed certificate or OCSP staple");
    assert!(
        named.log_text().contains("signer \"shuck-acme\" approved"),
        "{}",
        named.log_text()
    );
    for name in ["acme.test", "anything.acme.test"] {
        let (ok, effective, err) = curl(
            &format!("https://{name}:{port}/"),
            &[format!("{name}:{port}:127.0.0.1")],
            &pebble.root,
            false,
        );
        assert!(
            ok && effective.ends_with(" 200"),
            "{name}: {effective} {err}"
        );
    }
    assert_eq!(
        named.txt("_acme-challenge.acme.test"),
        "",
        "the records are removed"
    );
}

/// Started as root with `user = "nobody"` and a TSIG key only root may read: the start reads
/// the key, the order (run by nobody, who can no longer read the file) signs with the key kept
/// from the start, and the wildcard is issued.
#[test]
#[ignore = "needs root"]
fn dns_01_signs_with_the_key_read_at_start_once_the_file_is_out_of_reach() {
    use std::os::unix::fs::PermissionsExt;
    shuck_test_support::process::assert_root();
    let pki = Pki::new();
    let named = Named::start(pki.dir.path());
    std::fs::set_permissions(&named.key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let pebble = pebble_asking(&pki, &named);
    // What nobody must reach: the state directory and the CA's root, under a directory it may
    // enter (the test's own directory is root's alone, like the key).
    let open = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let ca = open.path().join("ca.pem");
    std::fs::copy(pki.ca_path(), &ca).expect("copy");
    std::fs::set_permissions(&ca, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let port = free_tcp_port();
    let config = dns01_config(
        (port, "\"*.acme.test\""),
        &pebble,
        &named,
        (&named.key, &ca, &open.path().join("state")),
    );
    let shuck = Shuck::start(&format!("user = \"nobody\"\n{config}"));
    shuck.wait_log("dropped privileges");
    shuck.wait_log_within("ACME certificate issued", Duration::from_secs(60));
    assert!(
        named.log_text().contains("signer \"shuck-acme\" approved"),
        "{}",
        named.log_text()
    );
}

/// Loopback addresses put on `lo` for a test's servers, taken off again when dropped: named
/// listens only on the addresses of interfaces (all of 127.0.0.0/8 reaches `lo`, but only
/// 127.0.0.1 is one of its addresses).
struct LoopbackAddrs {
    ip: PathBuf,
    added: Vec<String>,
}

impl LoopbackAddrs {
    fn add(addrs: &[&str]) -> LoopbackAddrs {
        let mut added = LoopbackAddrs {
            ip: require("ip", "iproute2"),
            added: Vec::new(),
        };
        let ip = added.ip.clone();
        for a in addrs {
            let cidr = format!("{a}/32");
            // Left by a run that was killed: taken over.
            let _ = Command::new(&ip)
                .args(["addr", "del", &cidr, "dev", "lo"])
                .status();
            let ok = Command::new(&ip)
                .args(["addr", "add", &cidr, "dev", "lo"])
                .status()
                .expect("ip addr add");
            assert!(ok.success(), "ip addr add {cidr} dev lo");
            added.added.push(cidr);
        }
        added
    }
}

impl Drop for LoopbackAddrs {
    fn drop(&mut self) {
        for cidr in &self.added {
            let _ = Command::new(&self.ip)
                .args(["addr", "del", cidr, "dev", "lo"])
                .status();
        }
    }
}

/// With no `nameservers`, the record is looked for on the zone's NS servers, found by asking the
/// primary: here a secondary `named`, the server pebble asks, which hears of the update only by
/// the primary's NOTIFY 5 s later (`notify-delay`). The CA is told once the secondary answers,
/// and the certificate is issued. (Told when the primary answered, pebble would find no
/// record.) NS servers are asked on port 53: root.
#[test]
#[ignore = "needs root"]
fn dns_01_waits_for_the_ns_servers_the_primary_names() {
    shuck_test_support::process::assert_root();
    let _addrs = LoopbackAddrs::add(&["127.53.0.1", "127.53.0.2"]);
    let pki = Pki::new();
    let dir = pki.dir.path();
    let key = tsig_key(dir);
    std::fs::write(
        dir.join("acme.test.db"),
        "$TTL 60\n@ IN SOA ns1.acme.test. hostmaster.acme.test. 1 60 60 600 60\n\
         @ IN NS ns1.acme.test.\n@ IN NS ns2.acme.test.\nns1 IN A 127.53.0.1\n\
         ns2 IN A 127.53.0.2\n@ IN A 127.0.0.1\n* IN A 127.0.0.1\n",
    )
    .expect("zone");
    let primary = Named::run(
        dir,
        SocketAddr::from(([127, 53, 0, 1], 53)),
        &format!(
            "zone \"acme.test\" {{ type primary; file \"{}/acme.test.db\"; \
             allow-update {{ key \"shuck-acme\"; }}; allow-transfer {{ any; }}; notify-delay 5; }};\n",
            dir.display()
        ),
        key.clone(),
    );
    let second = dir.join("secondary");
    std::fs::create_dir(&second).expect("mkdir");
    let secondary = Named::run(
        &second,
        SocketAddr::from(([127, 53, 0, 2], 53)),
        &format!(
            "zone \"acme.test\" {{ type secondary; primaries {{ 127.53.0.1; }}; \
             file \"{}/acme.test.db\"; allow-notify {{ 127.0.0.0/8; }}; }};\n",
            second.display()
        ),
        key.clone(),
    );
    secondary.wait_log("transferred serial 1");
    let pebble = pebble_asking(&pki, &secondary);
    let config = dns01_config(
        (free_tcp_port(), "\"acme.test\""),
        &pebble,
        &primary,
        (&key, &pki.ca_path(), &dir.join("state")),
    )
    .replace(&format!("nameservers = [\"{}\"]\n", primary.addr), "");
    assert!(!config.contains("nameservers"), "{config}");
    let shuck = Shuck::start(&config);
    shuck.wait_log_within("ACME certificate issued", Duration::from_secs(60));
    assert!(
        !shuck.log_text().contains("ACME order failed"),
        "issued by the first order: {}",
        shuck.log_text()
    );
    assert!(
        secondary.log_text().contains("transferred serial 2"),
        "the update reached the secondary: {}",
        secondary.log_text()
    );
}
