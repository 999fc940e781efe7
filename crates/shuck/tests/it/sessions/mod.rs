//! Session resumption across workers and processes: the per-process session cache, ticket keys
//! from files shared by a fleet, and a Redis store shared by hosts. Real `openssl s_client`
//! sessions (`-sess_out` / `-sess_in`), asserted on what the client reports ("Reused").

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use shuck_test_support::clients::{s_client, scrape, sum};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{rss_kib, HttpBackend, Shuck, SHUCK};

mod store;

const WORKERS: usize = 4;
/// Enough connections that, spread by the kernel's SO_REUSEPORT hash, every one of the four
/// workers serves some (the chance that one gets none of 24 is 4 × 0.75^24 ≈ 0.04%).
const RECONNECTS: usize = 24;

struct Client<'a> {
    pki: &'a Pki,
    sni: &'a str,
}

impl Client<'_> {
    /// A full handshake that saves its session to `sess`; returns the client's output.
    fn first(&self, addr: SocketAddr, version: &str, sess: &str) -> String {
        let (ok, out) = s_client(
            self.pki,
            addr,
            Some(self.sni),
            &[version, "-sess_out", sess],
        );
        assert!(ok, "{out}");
        assert!(
            out.contains("\nNew, TLSv1."),
            "{version}: first handshake is full: {out}"
        );
        out
    }

    /// Reconnects with the session in `sess` (saving the new one when `chain`: a TLS 1.3
    /// stateful session is single-use); returns whether it resumed, and the output.
    fn again(&self, addr: SocketAddr, version: &str, sess: &str, chain: bool) -> (bool, String) {
        let mut args = vec![version, "-sess_in", sess];
        let next = format!("{sess}.next");
        if chain {
            args.extend(["-sess_out", &next]);
        }
        let (ok, out) = s_client(self.pki, addr, Some(self.sni), &args);
        assert!(ok, "{out}");
        if chain {
            std::fs::rename(&next, sess).expect("keep the new session");
        }
        (out.contains("\nReused, TLSv1."), out)
    }
}

fn config(backend: SocketAddr, cert: &std::path::Path, extra: &str) -> String {
    format!(
        "workers = {WORKERS}\nmetrics_listen = \"127.0.0.1:0\"\nmetrics_per_worker = true\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = {}\n{extra}\n",
        toml_path(cert)
    )
}

/// Resumed handshakes per worker, from the metrics endpoint.
fn resumed_per_worker(metrics: SocketAddr) -> Vec<i64> {
    let text = scrape(metrics);
    (0..WORKERS)
        .map(|w| {
            sum(
                &text,
                "shuck_handshakes_total",
                &[&format!("worker=\"{w}\""), "kind=\"resumed\""],
            )
        })
        .collect()
}

/// Tickets off: TLS 1.2 session IDs and TLS 1.3 stateful sessions live in one cache per process,
/// so a client resumes on whichever worker the kernel hands its connection to.
#[test]
fn sessions_by_id_resume_on_every_worker() {
    let pki = Pki::new();
    let cert = pki.leaf("id.pem", "id", &["id.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let shuck = Shuck::start(&config(backend.addr, &cert, "session_tickets = false"));
    let client = Client {
        pki: &pki,
        sni: "id.test",
    };
    for (version, chain) in [("-tls1_2", false), ("-tls1_3", true)] {
        let sess = pki.path(&format!("id{version}.sess"));
        let sess = sess.to_str().expect("utf-8 path");
        client.first(shuck.addr(), version, sess);
        for i in 0..RECONNECTS {
            let (resumed, out) = client.again(shuck.addr(), version, sess, chain);
            assert!(resumed, "{version}: reconnect {i} not resumed: {out}");
        }
    }
    let per_worker = resumed_per_worker(shuck.addrs[1]);
    assert!(
        per_worker.iter().all(|&n| n > 0),
        "every worker resumed some sessions: {per_worker:?}"
    );
    // Counted by version and by mechanism: IDs for TLS 1.2, stateful PSKs for TLS 1.3.
    let n = i64::try_from(RECONNECTS).expect("small");
    let text = scrape(shuck.addrs[1]);
    for (labels, want) in [
        (&["kind=\"resumed\"", "version=\"TLSv1.2\""][..], n),
        (&["kind=\"resumed\"", "version=\"TLSv1.3\""][..], n),
        (&["kind=\"full\"", "version=\"TLSv1.2\""][..], 1),
    ] {
        assert_eq!(
            sum(&text, "shuck_handshakes_total", labels),
            want,
            "{labels:?}: {text}"
        );
    }
    for (mechanism, want) in [("id", n), ("psk", n), ("ticket", 0)] {
        let label = format!("mechanism=\"{mechanism}\"");
        assert_eq!(
            sum(&text, "shuck_resumptions_total", &[&label]),
            want,
            "{text}"
        );
    }
}

/// TLS 1.3 tickets issued, as OpenSSL's servers (nginx, HAProxy, hitch) issue them: two after a
/// full handshake (two resumptions may follow at once), one after a resumption (it replaces the
/// ticket the client just used). Both stateless tickets and the stateful cache.
#[test]
fn a_resumption_gets_one_new_ticket_a_full_handshake_two() {
    let pki = Pki::new();
    let cert = pki.leaf("t.pem", "t", &["t.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let tickets = |out: &str| {
        out.matches("Post-Handshake New Session Ticket arrived")
            .count()
    };
    for extra in ["", "session_tickets = false"] {
        let shuck = Shuck::start(&config(backend.addr, &cert, extra));
        let client = Client {
            pki: &pki,
            sni: "t.test",
        };
        let sess = pki.path("t.sess");
        let sess = sess.to_str().expect("utf-8 path");
        let out = client.first(shuck.addr(), "-tls1_3", sess);
        assert_eq!(tickets(&out), 2, "{extra:?}: after a full handshake: {out}");
        for i in 0..3 {
            let (resumed, out) = client.again(shuck.addr(), "-tls1_3", sess, true);
            assert!(resumed, "{extra:?}: reconnect {i} not resumed: {out}");
            assert_eq!(tickets(&out), 1, "{extra:?}: after resumption {i}: {out}");
        }
    }
}

/// The key name (hex) of the ticket in an `openssl s_client -sess_out` file.
fn ticket_key_name(sess: &str) -> String {
    let out = Command::new("openssl")
        .args(["sess_id", "-noout", "-text", "-in", sess])
        .output()
        .expect("openssl sess_id");
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text
        .lines()
        .skip_while(|l| !l.contains("TLS session ticket:"))
        .nth(1)
        .unwrap_or_else(|| panic!("no ticket in {sess}: {text}"));
    let hex: String = first
        .split(" - ")
        .nth(1)
        .expect("hex dump line")
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(32)
        .collect();
    assert_eq!(hex.len(), 32, "{first}");
    hex
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// `shuck ticket-key ARGS`, which must succeed.
fn ticket_key(args: &[&str]) {
    let out = Command::new(&*SHUCK)
        .arg("ticket-key")
        .args(args)
        .output()
        .expect("shuck ticket-key");
    assert!(out.status.success(), "{out:?}");
}

/// The names (hex) of the keys of a HAProxy-format file, in file order.
fn haproxy_key_names(path: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("key file");
    text.lines()
        .map(|l| {
            let key = base64::engine::general_purpose::STANDARD
                .decode(l.trim())
                .expect("base64");
            hex(&key[..16])
        })
        .collect()
}

/// Two shuck processes (two hosts of a fleet) with one HAProxy-format key file: a session made on
/// one resumes on the other, through a rotation (a key appended, both reloaded) and until its key
/// is removed from the file.
#[test]
fn a_fleet_sharing_a_haproxy_key_file_resumes_across_hosts_and_rotations() {
    let pki = Pki::new();
    let cert = pki.leaf("fleet.pem", "fleet", &["fleet.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let keys = pki.path("ticket-keys.txt");
    let keys_arg = keys.to_str().expect("utf-8 path");
    for _ in 0..3 {
        ticket_key(&[keys_arg]);
    }
    let names = haproxy_key_names(&keys);
    let extra = format!("session_ticket_keys = {}", toml_path(&keys));
    let a = Shuck::start(&config(backend.addr, &cert, &extra));
    let b = Shuck::start(&config(backend.addr, &cert, &extra));
    let client = Client {
        pki: &pki,
        sni: "fleet.test",
    };
    let mut sessions = Vec::new();
    for version in ["-tls1_2", "-tls1_3"] {
        let sess = pki.path(&format!("fleet{version}.sess"));
        let sess = sess.to_str().expect("utf-8 path").to_string();
        client.first(a.addr(), version, &sess);
        assert_eq!(
            ticket_key_name(&sess),
            names[1],
            "{version}: the second-to-last key encrypts"
        );
        for host in [&a, &b, &b, &a] {
            let (resumed, out) = client.again(host.addr(), version, &sess, false);
            assert!(
                resumed,
                "{version}: a session from host A resumes on both: {out}"
            );
        }
        sessions.push((version, sess));
    }

    // Rotation: a fourth key appended, both hosts reloaded. Old tickets still resume; new ones
    // are sealed with the key that was newest before.
    ticket_key(&[keys_arg]);
    for host in [&a, &b] {
        host.signal("HUP");
        host.wait_log("reloaded certificates");
    }
    for (version, sess) in &sessions {
        for host in [&a, &b] {
            let (resumed, out) = client.again(host.addr(), version, sess, false);
            assert!(
                resumed,
                "{version}: an old ticket resumes after the rotation: {out}"
            );
        }
        // ...and is answered with a fresh ticket under the key that encrypts now (seen with
        // TLS 1.3: `s_client -sess_out` saves no ticket a TLS 1.2 resumption renews).
        if *version == "-tls1_3" {
            let renewed = format!("{sess}.renewed");
            std::fs::copy(sess, &renewed).expect("copy session");
            let (resumed, out) = client.again(a.addr(), version, &renewed, true);
            assert!(resumed, "{out}");
            assert_eq!(
                ticket_key_name(&renewed),
                names[2],
                "renewed under the new key"
            );
        }
        let fresh = format!("{sess}.fresh");
        client.first(b.addr(), version, &fresh);
        assert_eq!(
            ticket_key_name(&fresh),
            names[2],
            "{version}: the next key encrypts"
        );
        let (resumed, out) = client.again(a.addr(), version, &fresh, false);
        assert!(resumed, "{version}: {out}");
    }
    let text = scrape(a.addrs[1]);
    assert!(
        sum(&text, "shuck_resumptions_total", &["mechanism=\"ticket\""]) > 0,
        "{text}"
    );
    assert_eq!(
        sum(&text, "shuck_resumptions_total", &["mechanism=\"id\""]),
        0,
        "{text}"
    );

    // The key that sealed the old tickets removed from the file: they no longer resume.
    let lines: Vec<String> = std::fs::read_to_string(&keys)
        .expect("key file")
        .lines()
        .map(str::to_string)
        .collect();
    std::fs::write(&keys, format!("{}\n{}\n", lines[2], lines[3])).expect("rewrite keys");
    for host in [&a, &b] {
        host.signal("HUP");
        host.wait_log_count("reloaded certificates", 2);
    }
    for (version, sess) in &sessions {
        let (resumed, out) = client.again(a.addr(), version, sess, false);
        assert!(
            !resumed,
            "{version}: a removed key no longer opens its tickets: {out}"
        );
    }

    // The keys never reach `shuck check`'s output or the logs.
    assert_keys_hidden(&a.config_path(), [a, b], &names, &lines);
}

/// Neither `shuck check` on `config` nor the hosts' logs show a key or a key's name.
fn assert_keys_hidden(
    config: &std::path::Path,
    hosts: [Shuck; 2],
    names: &[String],
    lines: &[String],
) {
    let check = Command::new(&*SHUCK)
        .args(["check", "--config"])
        .arg(config)
        .output()
        .expect("shuck check");
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && report.contains("2 key(s) from file (haproxy format)"),
        "{report}"
    );
    for name in names {
        assert!(
            !report.contains(name.as_str()),
            "key name in shuck check: {report}"
        );
    }
    for line in lines {
        assert!(
            !report.contains(line.as_str()),
            "key in shuck check: {report}"
        );
    }
    for host in hosts {
        let (_, log) = host.stop();
        for name in names {
            assert!(!log.contains(name.as_str()), "key name in the log: {log}");
        }
        for line in lines {
            assert!(!log.contains(line.as_str()), "key in the log: {log}");
        }
    }
}

/// nginx-format files (one raw key per file, the first encrypts), given with the one-frontend
/// flag `--ticket-keys`: a host with the new key first still opens tickets of a host that has
/// only the old key, and seals with the new one.
#[test]
fn nginx_key_files_given_as_flags_are_shared_and_the_first_encrypts() {
    let pki = Pki::new();
    let cert = pki.leaf("ng.pem", "ng", &["ng.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let old = pki.path("old.key");
    let new = pki.path("new.key");
    ticket_key(&[
        "--format",
        "nginx",
        "--size",
        "48",
        old.to_str().expect("utf-8"),
    ]);
    ticket_key(&["--format", "nginx", new.to_str().expect("utf-8")]);
    let old_name = hex(&std::fs::read(&old).expect("old key")[..16]);
    let new_name = hex(&std::fs::read(&new).expect("new key")[..16]);
    let cert_arg = cert.to_str().expect("utf-8");
    let backend_arg = backend.addr.to_string();
    let start = |keys: &[&std::path::Path]| {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--backend",
            &backend_arg,
            "--cert",
            cert_arg,
        ];
        for k in keys {
            args.extend(["--ticket-keys", k.to_str().expect("utf-8")]);
        }
        Shuck::with().args(&args).run()
    };
    let behind = start(&[&old]);
    let ahead = start(&[&new, &old]);
    let client = Client {
        pki: &pki,
        sni: "ng.test",
    };
    let sess = pki.path("ng.sess");
    let sess = sess.to_str().expect("utf-8");
    client.first(behind.addr(), "-tls1_3", sess);
    assert_eq!(ticket_key_name(sess), old_name);
    let (resumed, out) = client.again(ahead.addr(), "-tls1_3", sess, false);
    assert!(resumed, "the old key still opens tickets: {out}");
    client.first(ahead.addr(), "-tls1_2", sess);
    assert_eq!(
        ticket_key_name(sess),
        new_name,
        "the first file's key seals"
    );
    let (resumed, out) = client.again(behind.addr(), "-tls1_2", sess, false);
    assert!(
        !resumed,
        "a host without the new key does a full handshake: {out}"
    );
}
