//! What shuck says when something is wrong, as an operator meets it: a busy port fails once,
//! naming the address and what to do; a second shuck on an address is refused unless told to
//! take over; a busy metrics port is named as such; configuration mistakes serde would describe
//! in its own terms (single brackets, a number without a unit, a misspelt key) say what to
//! write; `*:port` and OpenSSL's cipher names are taken; Ctrl-C says what it does.

use std::net::TcpListener;
use std::process::Command;

use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{run_bounded, Shuck, SHUCK};

/// Runs shuck with `args` (60 s at most); exit code and standard error.
fn shuck(args: &[&str]) -> (i32, String) {
    let out = run_bounded(Command::new(&*SHUCK).args(args), b"", 60);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `shuck check` on `text` written to a file: exit code and standard output and error.
fn check(pki: &Pki, text: &str) -> (i32, String) {
    let path = pki.path("messages.toml");
    std::fs::write(&path, text).expect("write config");
    let out = run_bounded(
        Command::new(&*SHUCK).args(["check", "--config", path.to_str().expect("utf-8")]),
        b"",
        60,
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), all)
}

fn frontend(pki: &Pki, extra: &str) -> String {
    let cert = pki.leaf("m.pem", "m", &["m.test"], Key::EcdsaP256);
    format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n{extra}\n",
        toml_path(&cert)
    )
}

/// A port another program holds (without SO_REUSEPORT): one error, naming the address, the
/// frontend and what to do; no warning first, no second line.
#[test]
fn a_busy_port_fails_once_saying_what_to_do() {
    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = held.local_addr().expect("addr").to_string();
    let (code, err) = shuck(&["serve", "--self-signed", "--listen", &addr]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.matches("already listens").count(), 1, "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert!(err.contains("stop it or choose another address"), "{err}");
    assert!(!err.contains("kernel will split"), "{err}");
    assert!(!err.contains("Address already in use"), "{err}");
}

/// A second shuck on the address of a running one is refused (the kernel would otherwise
/// split connections between them); with `--takeover` it shares the address, and says so.
#[test]
fn a_second_shuck_on_an_address_is_refused_unless_it_takes_over() {
    let pki = Pki::new();
    let cfg = |listen: &str| frontend(&pki, "").replace("127.0.0.1:0", listen);
    let old = Shuck::start(&format!("workers = 1\n{}", cfg("127.0.0.1:0")));
    let addr = old.addr().to_string();
    let path = pki.path("second.toml");
    std::fs::write(&path, format!("workers = 1\n{}", cfg(&addr))).expect("write");
    let (code, err) = shuck(&["serve", "--config", path.to_str().expect("utf-8")]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("another process already listens there"),
        "{err}"
    );
    assert!(err.contains("--takeover"), "{err}");
    let new = Shuck::with()
        .config(&format!("workers = 1\n{}", cfg(&addr)))
        .args(&["--takeover"])
        .run();
    assert_eq!(new.addr(), old.addr());
    let log = new.wait_log("sharing this address");
    assert!(log.contains(&addr), "{log}");
}

/// A busy metrics port is blamed on `metrics_listen`, not on a frontend called "metrics".
#[test]
fn a_busy_metrics_port_is_named_as_metrics_listen() {
    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = held.local_addr().expect("addr").to_string();
    let (code, err) = shuck(&[
        "serve",
        "--self-signed",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        &addr,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&format!("cannot listen on {addr} (metrics_listen)")),
        "{err}"
    );
    assert!(!err.contains("frontend \"metrics\""), "{err}");
}

/// Mistakes serde would describe in its own terms say what to write instead.
#[test]
fn configuration_mistakes_say_what_to_write() {
    let pki = Pki::new();
    let fe = frontend(&pki, "");
    let cases = [
        (
            fe.replace("[[frontend]]", "[frontend]"),
            "each frontend is written [[frontend]] (double brackets)",
        ),
        (
            frontend(&pki, "idle_timeout = 30"),
            "idle_timeout: 30 has no unit: write idle_timeout = \"30s\"",
        ),
        (
            frontend(&pki, "name = \"web\"\nidle_timout = \"30s\""),
            "idle_timout: not a key of [[frontend]] number 1 (\"web\"); did you mean idle_timeout?",
        ),
        (
            format!("log-level = \"info\"\n{fe}"),
            "log-level: not a key of the top level; did you mean log_level?",
        ),
    ];
    for (text, want) in cases {
        let (code, out) = check(&pki, &text);
        assert_eq!(code, 1, "{text}\n{out}");
        assert!(out.contains(want), "{text}\nwanted {want:?} in:\n{out}");
        assert!(!out.contains("expected one of"), "{out}");
    }
}

/// `*:port` and `:port` are every address (IPv4 and, where the host has it, IPv6); OpenSSL's
/// TLS 1.2 cipher names are taken.
#[test]
fn star_ports_and_openssl_cipher_names_are_taken() {
    let pki = Pki::new();
    for listen in ["*:18447", ":18447"] {
        let text = frontend(&pki, "").replace("127.0.0.1:0", listen);
        let (code, out) = check(&pki, &text);
        assert_eq!(code, 0, "{listen}: {out}");
        assert!(out.contains("0.0.0.0:18447"), "{listen}: {out}");
        if shuck_test_support::peers::ipv6_loopback() {
            assert!(out.contains("[::]:18447"), "{listen}: {out}");
        }
    }
    let (code, out) = check(
        &pki,
        &frontend(
            &pki,
            "ciphersuites = [\"TLS_AES_128_GCM_SHA256\", \"ECDHE-ECDSA-AES128-GCM-SHA256\"]",
        ),
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = check(&pki, &frontend(&pki, "ciphersuites = [\"HIGH:!aNULL\"]"));
    assert_eq!(code, 1, "{out}");
}

/// Ctrl-C (SIGINT) says what it does, not which signal number it was.
#[test]
fn ctrl_c_says_it_stops() {
    let s = Shuck::with()
        .args(&["--self-signed", "--listen", "127.0.0.1:0"])
        .run();
    s.signal("INT");
    let (status, log) = s.stop();
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("stopping: no new connections"), "{log}");
    assert!(!log.contains("stop signal 1"), "{log}");
}

/// As root with `user = "nobody"` and certbot's `live/` closed to others (mode 0700, as certbot
/// makes it): the files load now, but nobody could not read them at a renewal or reload. `shuck
/// check` and `serve` say so once, naming the user, the directory and its mode; opened to
/// nobody's group, nothing is said. Started as nobody, the load itself fails, naming the file
/// and the user.
#[test]
#[ignore = "needs root"]
fn files_the_serving_user_cannot_read_later_are_said_at_check_and_start() {
    use std::os::unix::fs::PermissionsExt;
    shuck_test_support::process::assert_root();
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let open = |p: &std::path::Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    open(dir.path(), 0o755);
    let live = dir.path().join("live");
    let site = live.join("site.test");
    std::fs::create_dir_all(&site).expect("mkdir");
    let bundle = pki.leaf("site.pem", "site", &["site.test"], Key::EcdsaP256);
    std::fs::copy(&bundle, site.join("fullchain.pem")).expect("copy");
    std::fs::copy(&bundle, site.join("privkey.pem")).expect("copy");
    open(&live, 0o700);
    let cfg = dir.path().join("shuck.toml");
    std::fs::write(
        &cfg,
        format!(
            "user = \"nobody\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
            toml_path(&live)
        ),
    )
    .expect("config");
    let cfg = cfg.to_str().expect("utf-8").to_string();
    let (code, out) = {
        let o = run_bounded(
            Command::new(&*SHUCK).args(["check", "--config", &cfg]),
            b"",
            60,
        );
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{out}");
    let said = "who serves after start, cannot get to";
    assert_eq!(out.matches(said).count(), 1, "{out}");
    assert!(out.contains("user \"nobody\""), "{out}");
    assert!(
        out.contains(&format!("{} is 0700 root:root", live.display())),
        "{out}"
    );
    let shuck = Shuck::with().args(&["--config", &cfg]).run();
    let log = shuck.wait_log("dropped privileges");
    assert_eq!(log.matches(said).count(), 1, "{log}");
    drop(shuck);
    // Opened to nobody's group: nothing to say.
    let status = Command::new("chgrp")
        .args(["-R", "nogroup", live.to_str().expect("utf-8")])
        .status()
        .expect("chgrp");
    assert!(status.success());
    open(&live, 0o750);
    open(&site, 0o750);
    open(&site.join("privkey.pem"), 0o640);
    open(&site.join("fullchain.pem"), 0o640);
    let o = run_bounded(
        Command::new(&*SHUCK).args(["check", "--config", &cfg]),
        b"",
        60,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains(said), "{err}");
    // Started as nobody with the directory closed again: the load fails, naming who.
    open(&live, 0o700);
    let o = run_bounded(
        Command::new("setpriv")
            .args(["--reuid", "nobody", "--regid", "nogroup", "--clear-groups"])
            .arg(&*SHUCK)
            .args(["check", "--config", &cfg]),
        b"",
        60,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot read"), "{err}");
    assert!(err.contains("shuck runs as user \"nobody\""), "{err}");
}

/// A failed handshake's line names the server name the client asked for, and says why in
/// words: a TLS 1.2-only client at a TLS 1.3-only frontend, and plain HTTP at a TLS port (the
/// metrics' reasons are as before).
#[test]
fn failed_handshakes_say_the_name_asked_for_and_why_in_words() {
    use shuck_test_support::clients::{handshake_failures, s_client, scrape};
    let pki = Pki::new();
    let text = format!(
        "metrics_listen = \"127.0.0.1:0\"\n{}",
        frontend(&pki, "protocols = [\"TLS1.3\"]")
    );
    let shuck = Shuck::start(&text);
    let (ok, _) = s_client(&pki, shuck.addr(), Some("m.test"), &["-tls1_2"]);
    assert!(!ok, "a TLS 1.2 client was served");
    let log = shuck.wait_log("the client offers no TLS 1.3");
    let line = log
        .lines()
        .find(|l| l.contains("the client offers no TLS 1.3"))
        .expect("line");
    assert!(line.contains("sni=m.test"), "{line}");
    let mut plain = std::net::TcpStream::connect(shuck.addr()).expect("connect");
    std::io::Write::write_all(&mut plain, b"GET / HTTP/1.1\r\nHost: m.test\r\n\r\n")
        .expect("write");
    let _ = shuck_test_support::clients::read_all_bounded(&mut plain);
    let log = shuck.wait_log("not TLS (plain HTTP");
    assert!(!log.contains("InvalidContentType"), "{log}");
    assert!(!log.contains("SupportedVersionsExtensionRequired"), "{log}");
    let metrics = *shuck.addrs.last().expect("metrics");
    let m = scrape(metrics);
    assert_eq!(handshake_failures(&m, "incompatible"), 1, "{m}");
    assert_eq!(handshake_failures(&m, "malformed"), 1, "{m}");
}

/// `--log-format json`: every line is a JSON object; the access log's values are typed
/// (numbers, null for what did not happen, the client's address and port apart); an error
/// that ends the process is a JSON line too.
#[test]
fn json_lines_are_typed_and_fatal_errors_are_json() {
    let running = Shuck::with()
        .args(&[
            "--self-signed",
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log-connections",
        ])
        .run();
    let out = Command::new("curl")
        .args([
            "-sk",
            "--max-time",
            "5",
            &format!("https://{}/", running.addr()),
        ])
        .output()
        .expect("curl");
    assert!(out.status.success());
    let mut plain = std::net::TcpStream::connect(running.addr()).expect("connect");
    std::io::Write::write_all(&mut plain, b"GET / HTTP/1.1\r\n\r\n").expect("write");
    let _ = shuck_test_support::clients::read_all_bounded(&mut plain);
    running.wait_log_count("\"reason\"", 2);
    let log = running.log_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let access: Vec<&serde_json::Value> =
        lines.iter().filter(|v| v.get("reason").is_some()).collect();
    let served = access
        .iter()
        .find(|v| v["reason"] == "-" || v["reason"].is_null())
        .expect("the served connection's line");
    assert!(served["handshake_ms"].is_u64(), "{served}");
    assert!(
        served["ms"].is_u64() && served["worker"].is_u64(),
        "{served}"
    );
    assert_eq!(served["resumed"], false, "{served}");
    assert_eq!(served["client"], "127.0.0.1", "{served}");
    assert!(served["client_port"].is_u64(), "{served}");
    assert!(served["balancer"].is_null(), "{served}");
    // The schema of an access line: each field of its type, or null; never the text "-".
    let numbers = ["up", "down", "ms", "worker", "handshake_ms", "connect_ms"];
    for line in &access {
        for (k, v) in line.as_object().expect("an object") {
            let ok = if numbers.contains(&k.as_str()) || k.ends_with("_port") {
                v.is_u64() || v.is_null()
            } else if k == "resumed" {
                v.is_boolean() || v.is_null()
            } else {
                v.is_string() || v.is_null()
            };
            assert!(ok && v != "-", "{k}: {v} in {line}");
        }
    }
    let failed = access
        .iter()
        .find(|v| v["reason"] == "handshake_malformed")
        .expect("the plain-HTTP connection's line");
    assert!(failed["handshake_ms"].is_null(), "{failed}");
    assert!(failed["protocol"].is_null(), "{failed}");
    drop(running);
    let held = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = held.local_addr().expect("addr").to_string();
    let (code, err) = shuck(&[
        "serve",
        "--self-signed",
        "--listen",
        &addr,
        "--log-format",
        "json",
    ]);
    assert_eq!(code, 1, "{err}");
    let last = err.lines().last().expect("a line");
    let v: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}"));
    assert_eq!(v["level"], "ERROR", "{last}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.contains("already listens")),
        "{last}"
    );
}

/// The access log names what HAProxy's and nginx's do beside the rest: the address the client
/// connected to, the backend connection's own address, and the client certificate's subject
/// and verify result.
#[test]
fn the_access_log_names_listen_backend_source_and_client_certificate() {
    use shuck_test_support::clients::curl;
    use shuck_test_support::process::HttpBackend;
    let pki = Pki::new();
    let backend = HttpBackend::start();
    let client = pki.client("client.pem", "alice", 7);
    let shuck = Shuck::start(&format!(
        "log_connections = true\n{}",
        frontend(
            &pki,
            &format!(
                "backend = \"{}\"\nclient_auth = \"required\"\nclient_ca = {}",
                backend.addr,
                toml_path(&pki.ca_path())
            )
        )
    ));
    let out = curl(
        &pki,
        &shuck,
        "m.test",
        "/",
        &["--cert", client.to_str().expect("path")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = shuck.wait_log("client_verify=");
    let line = log
        .lines()
        .find(|l| l.contains("client_verify="))
        .expect("line");
    for want in [
        format!("listen={}", shuck.addr()),
        "backend_source=127.0.0.1:".to_string(),
        "client_cert=CN=alice".to_string(),
        "client_verify=ok".to_string(),
    ] {
        assert!(line.contains(&want), "{want} in {line}");
    }
}

/// Two frontends of one shuck on a wildcard and a specific address of one port share it (the
/// kernel gives each connection to the more specific): shuck's own sockets are not "another
/// process".
#[test]
fn a_wildcard_and_a_specific_address_of_one_port_are_not_another_process() {
    let pki = Pki::new();
    let port = shuck_test_support::ports::tcp_on(std::net::Ipv4Addr::UNSPECIFIED.into());
    let fe = frontend(&pki, "");
    let text = format!(
        "workers = 1\n{}{}",
        fe.replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
        fe.replace("127.0.0.1:0", &format!("0.0.0.0:{port}"))
    );
    let shuck = Shuck::start(&text);
    assert_eq!(shuck.addrs.len(), 2, "{}", shuck.log_text());
    assert!(
        !shuck.log_text().contains("already listens"),
        "{}",
        shuck.log_text()
    );
}
