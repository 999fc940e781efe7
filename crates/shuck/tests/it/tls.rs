//! Real clients (curl, openssl s_client) through shuck to a real backend: protocol versions, key
//! types, SNI policies, ALPN and the ECDSA/RSA choice, each asserted on what the client negotiated.

use shuck_test_support::clients::{cpu_has_aes, curl, field, s_client};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{run_bounded, HttpBackend, Shuck};

/// One frontend with ECDSA (default), RSA, wildcard and dual ECDSA+RSA certificates.
fn setup(extra: &str) -> (Pki, HttpBackend, Shuck) {
    let pki = Pki::new();
    let certs = [
        pki.leaf(
            "a-ecdsa.pem",
            "ecdsa-default",
            &["ecdsa.test"],
            Key::EcdsaP256,
        ),
        pki.leaf("b-rsa.pem", "rsa-only", &["rsa.test"], Key::Rsa2048),
        pki.leaf("c-wild.pem", "wildcard", &["*.wild.test"], Key::EcdsaP384),
        pki.leaf("d-dual-rsa.pem", "dual-rsa", &["dual.test"], Key::Rsa2048),
        pki.leaf(
            "e-dual-ecdsa.pem",
            "dual-ecdsa",
            &["dual.test"],
            Key::EcdsaP256,
        ),
    ];
    let list: Vec<String> = certs.iter().map(|p| toml_path(p)).collect();
    let backend = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "workers = 2\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = [{}]\n{extra}\n",
        backend.addr,
        list.join(", ")
    ));
    (pki, backend, shuck)
}

#[test]
fn curl_reaches_the_backend_over_tls12_and_tls13_with_rsa_and_ecdsa() {
    let (pki, _b, shuck) = setup("");
    for (name, version) in [
        ("ecdsa.test", "--tlsv1.3"),
        ("rsa.test", "--tlsv1.3"),
        ("ecdsa.test", "--tls-max"),
        ("rsa.test", "--tls-max"),
    ] {
        let extra: &[&str] = if version == "--tls-max" {
            &["--tlsv1.2", "--tls-max", "1.2"]
        } else {
            &["--tlsv1.3"]
        };
        let out = curl(&pki, &shuck, name, "/hello?x=1", extra);
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name} {version}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            body, "backend got: GET /hello?x=1 HTTP/1.1",
            "{name} {version}"
        );
    }
}

#[test]
fn openssl_sees_the_negotiated_protocol_cipher_and_key() {
    let (pki, _b, shuck) = setup("");
    let (ok, out) = s_client(&pki, shuck.addr(), Some("ecdsa.test"), &["-tls1_3"]);
    assert!(ok, "{out}");
    assert_eq!(field(&out, "Protocol  :"), Some("TLSv1.3"), "{out}");
    let want = if cpu_has_aes() {
        "TLS_AES_128_GCM_SHA256"
    } else {
        "TLS_CHACHA20_POLY1305_SHA256"
    };
    assert_eq!(field(&out, "Cipher    :"), Some(want), "{out}");
    assert!(out.contains("CN = ecdsa-default"), "{out}");

    let (ok, out) = s_client(&pki, shuck.addr(), Some("rsa.test"), &["-tls1_2"]);
    assert!(ok, "{out}");
    assert_eq!(field(&out, "Protocol  :"), Some("TLSv1.2"), "{out}");
    assert!(out.contains("CN = rsa-only"), "{out}");
    assert!(out.contains("Server public key is 2048 bit"), "{out}");
    // Server preference: the client lists ChaCha20 first, the server still picks AES-GCM.
    if cpu_has_aes() {
        let (ok, out) = s_client(
            &pki,
            shuck.addr(),
            Some("rsa.test"),
            &[
                "-tls1_2",
                "-cipher",
                "ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256",
            ],
        );
        assert!(ok, "{out}");
        assert_eq!(
            field(&out, "Cipher    :"),
            Some("ECDHE-RSA-AES128-GCM-SHA256"),
            "{out}"
        );
    }
}

#[test]
fn sni_exact_wildcard_and_default() {
    let (pki, _b, shuck) = setup("");
    for (sni, cn) in [
        (Some("ecdsa.test"), "ecdsa-default"),
        (Some("rsa.test"), "rsa-only"),
        (Some("api.wild.test"), "wildcard"),
        (Some("unknown.test"), "ecdsa-default"),
        (Some("a.b.wild.test"), "ecdsa-default"), // a wildcard covers one label only
        (None, "ecdsa-default"),
    ] {
        let mut c = std::process::Command::new("openssl");
        // Without verification: the default certificate does not match unknown names, and that
        // is the point; we assert which certificate was served.
        c.args([
            "s_client",
            "-connect",
            &shuck.addr().to_string(),
            "-ign_eof",
        ]);
        match sni {
            Some(n) => c.args(["-servername", n]),
            None => c.arg("-noservername"),
        };
        let out = run_bounded(&mut c, b"GET / HTTP/1.0\r\n\r\n", 30);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("CN = {cn}")),
            "{sni:?} should get {cn}: {text}"
        );
        assert!(
            text.contains("backend got: GET / HTTP/1.0"),
            "{sni:?}: {text}"
        );
    }
    // And curl verifying the wildcard name end to end.
    let out = curl(&pki, &shuck, "www.wild.test", "/w", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sni_reject_policy_refuses_unknown_and_missing_names() {
    let (pki, _b, mut shuck) = setup("unknown_sni = \"reject\"\nmissing_sni = \"reject\"");
    let (ok, out) = s_client(&pki, shuck.addr(), Some("unknown.test"), &[]);
    assert!(!ok, "unknown SNI must be refused: {out}");
    // access_denied: the policy refused the name (not handshake_failure, which says that no
    // certificate fits the client's algorithms).
    assert!(out.contains("SSL alert number 49"), "{out}");
    let (ok, out) = s_client(&pki, shuck.addr(), None, &[]);
    assert!(!ok, "missing SNI must be refused: {out}");
    // Known names still work, and the refusals were logged with a reason.
    let (ok, out) = s_client(&pki, shuck.addr(), Some("ecdsa.test"), &[]);
    assert!(ok, "{out}");
    shuck.wait_log("TLS handshake failed");
    shuck.assert_alive();
}

#[test]
fn dual_certificate_picks_ecdsa_unless_the_client_only_verifies_rsa() {
    let (pki, _b, shuck) = setup("");
    for (version, sigalgs, cn) in [
        ("-tls1_3", None, "dual-ecdsa"),
        (
            "-tls1_3",
            Some("rsa_pss_rsae_sha256:rsa_pss_rsae_sha384"),
            "dual-rsa",
        ),
        ("-tls1_2", None, "dual-ecdsa"),
        (
            "-tls1_2",
            Some("RSA+SHA256:rsa_pss_rsae_sha256"),
            "dual-rsa",
        ),
    ] {
        let mut extra = vec![version];
        if let Some(s) = sigalgs {
            extra.extend(["-sigalgs", s]);
        }
        let (ok, out) = s_client(&pki, shuck.addr(), Some("dual.test"), &extra);
        assert!(ok, "{version} {sigalgs:?}: {out}");
        assert!(
            out.contains(&format!("CN = {cn}")),
            "{version} {sigalgs:?} wants {cn}: {out}"
        );
    }
}

#[test]
fn alpn_is_negotiated_in_server_order() {
    let (pki, _b, shuck) = setup("alpn = [\"h2\", \"http/1.1\"]");
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("ecdsa.test"),
        &["-alpn", "http/1.1,h2"],
    );
    assert!(ok, "{out}");
    assert_eq!(field(&out, "ALPN protocol:"), Some("h2"), "{out}");
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("ecdsa.test"),
        &["-alpn", "http/1.1"],
    );
    assert!(ok, "{out}");
    assert_eq!(field(&out, "ALPN protocol:"), Some("http/1.1"), "{out}");
    let (ok, out) = s_client(&pki, shuck.addr(), Some("ecdsa.test"), &[]);
    assert!(ok, "{out}");
    assert!(out.contains("No ALPN negotiated"), "{out}");
}

#[test]
fn protocol_and_group_settings_are_enforced() {
    let (pki, _b, shuck) = setup("protocols = [\"TLS1.3\"]\ngroups = [\"P-256\"]");
    let (ok, out) = s_client(&pki, shuck.addr(), Some("ecdsa.test"), &["-tls1_2"]);
    assert!(!ok, "TLS 1.2 is disabled: {out}");
    let (ok, out) = s_client(&pki, shuck.addr(), Some("ecdsa.test"), &["-tls1_3"]);
    assert!(ok, "{out}");
    assert!(
        out.contains("Server Temp Key: ECDH, prime256v1")
            || out.contains("Negotiated TLS1.3 group: secp256r1"),
        "group P-256 only: {out}"
    );
}

#[test]
fn ipv6_listener_serves_curl() {
    let pki = Pki::new();
    let cert = pki.leaf("v6.pem", "v6", &["v6.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nlisten = [\"[::1]:0\", \"127.0.0.1:0\"]\nbackend = \"{}\"\ncertificates = {}\n",
        backend.addr,
        toml_path(&cert)
    ));
    assert!(
        shuck.addrs[0].is_ipv6() && shuck.addrs[1].is_ipv4(),
        "{:?}",
        shuck.addrs
    );
    let out = curl(&pki, &shuck, "v6.test", "/six", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "backend got: GET /six HTTP/1.1"
    );
}

#[test]
fn self_signed_demo_backend_describes_the_connection() {
    let shuck = Shuck::with()
        .args(&["--self-signed", "--listen", "127.0.0.1:0", "--workers", "1"])
        .run();
    let out = run_bounded(
        std::process::Command::new("curl")
            .args([
                "-sS",
                "-k",
                "--max-time",
                "20",
                "--tlsv1.2",
                "--tls-max",
                "1.2",
            ])
            .arg(format!("https://localhost:{}/", shuck.port())),
        b"",
        30,
    );
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(body.contains("protocol: TLSv1.2"), "{body}");
    assert!(body.contains("sni: localhost"), "{body}");
    assert!(body.contains("alpn: http/1.1"), "{body}");
    assert!(body.contains("resumed: no"), "{body}");
    assert!(body.contains("client: 127.0.0.1:"), "{body}");
    assert!(body.contains("cipher: TLS_ECDHE_ECDSA_WITH_"), "{body}");
    assert!(
        body.contains("records: rustls"),
        "TLS 1.2 stays with rustls: {body}"
    );
}

/// The demo page of `shuck` over TLS 1.3.
fn demo_page_tls13(shuck: &Shuck) -> String {
    let out = run_bounded(
        std::process::Command::new("curl")
            .args(["-sS", "-k", "--max-time", "20", "--tlsv1.3"])
            .arg(format!("https://localhost:{}/", shuck.port())),
        b"",
        30,
    );
    let body = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(body.contains("protocol: TLSv1.3"), "{body}");
    body
}

/// `record_layer`: by default shuck's own layer protects a TLS 1.3 connection after the
/// handshake; with `--record-layer rustls`, rustls' does, for the connection's whole life; and a
/// reload that changes it applies to the next connection.
#[test]
fn the_record_layer_is_shucks_by_default_and_rustls_when_asked() {
    let flags = ["--self-signed", "--listen", "127.0.0.1:0", "--workers", "1"];
    let body = demo_page_tls13(&Shuck::with().args(&flags).run());
    assert!(body.contains("records: shuck"), "{body}");
    let rustls = [&flags[..], &["--record-layer", "rustls"]].concat();
    let body = demo_page_tls13(&Shuck::with().args(&rustls).run());
    assert!(body.contains("records: rustls"), "{body}");
    let file = "workers = 1\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nself_signed = true\n";
    let shuck = Shuck::start(file);
    assert!(demo_page_tls13(&shuck).contains("records: shuck"));
    std::fs::write(
        shuck.config_path(),
        format!("{file}record_layer = \"rustls\"\n"),
    )
    .expect("config");
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates and configuration");
    let body = demo_page_tls13(&shuck);
    assert!(body.contains("records: rustls"), "after the reload: {body}");
}

#[test]
fn sessions_resume_over_tls12_and_tls13_across_workers() {
    let (pki, _b, shuck) = setup("");
    for version in ["-tls1_2", "-tls1_3"] {
        let sess = pki.path(&format!("session{version}"));
        let sess = sess.to_str().expect("utf-8 path");
        let (ok, out) = s_client(
            &pki,
            shuck.addr(),
            Some("ecdsa.test"),
            &[version, "-sess_out", sess],
        );
        assert!(ok, "{out}");
        assert!(
            out.contains("\nNew, TLSv1."),
            "{version}: first handshake is full: {out}"
        );
        // Two workers: with tickets shared by all workers, every attempt resumes wherever the
        // kernel puts the connection.
        for _ in 0..6 {
            let (ok, out) = s_client(
                &pki,
                shuck.addr(),
                Some("ecdsa.test"),
                &[version, "-sess_in", sess],
            );
            assert!(ok, "{out}");
            assert!(
                out.contains("\nReused, TLSv1."),
                "{version}: not resumed: {out}"
            );
        }
    }
}

#[test]
fn certificate_directories_are_loaded_and_selected_by_sni() {
    let pki = Pki::new();
    let dir = pki.path("certs");
    std::fs::create_dir(&dir).expect("mkdir");
    for (file, cn, name) in [("a.pem", "dir-a", "a.test"), ("b.pem", "dir-b", "b.test")] {
        let p = pki.leaf(file, cn, &[name], Key::EcdsaP256);
        std::fs::rename(&p, dir.join(file)).expect("move");
    }
    std::fs::write(dir.join("README.txt"), "not a certificate").expect("write");
    let backend = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n",
        backend.addr,
        toml_path(&dir)
    ));
    for (sni, cn) in [("a.test", "dir-a"), ("b.test", "dir-b")] {
        let (ok, out) = s_client(&pki, shuck.addr(), Some(sni), &[]);
        assert!(ok, "{out}");
        assert!(out.contains(&format!("CN = {cn}")), "{sni}: {out}");
    }
}

#[test]
fn sighup_reloads_certificates_and_tls_settings_and_keeps_tickets() {
    let pki = Pki::new();
    let path = pki.leaf("site.pem", "before", &["reload.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let config = |alpn: &str| {
        format!(
            "workers = 2\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\nalpn = [\"{alpn}\"]\n",
            backend.addr,
            toml_path(&path)
        )
    };
    let mut shuck = Shuck::start(&config("http/1.1"));
    let sess = pki.path("reload.sess");
    let sess = sess.to_str().expect("utf-8");
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("reload.test"),
        &["-tls1_3", "-alpn", "h2,http/1.1", "-sess_out", sess],
    );
    assert!(ok, "{out}");
    assert!(out.contains("CN = before"), "{out}");
    assert_eq!(field(&out, "ALPN protocol:"), Some("http/1.1"), "{out}");

    // New certificate at the same path, new ALPN list, then SIGHUP.
    let fresh = pki.leaf("fresh.pem", "after", &["reload.test"], Key::EcdsaP256);
    std::fs::rename(&fresh, &path).expect("replace certificate");
    std::fs::write(shuck.config_path(), config("h2")).expect("rewrite config");
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates");
    // A session from before the reload still resumes: the ticket key was kept.
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("reload.test"),
        &["-tls1_3", "-sess_in", sess],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("\nReused, TLSv1.3"),
        "ticket from before the reload: {out}"
    );
    for _ in 0..4 {
        // Several connections, so both workers are seen to have the new configuration.
        let (ok, out) = s_client(
            &pki,
            shuck.addr(),
            Some("reload.test"),
            &["-alpn", "h2,http/1.1"],
        );
        assert!(ok, "{out}");
        assert!(out.contains("CN = after"), "{out}");
        assert_eq!(field(&out, "ALPN protocol:"), Some("h2"), "{out}");
    }

    // A broken certificate on reload: the error is logged and the old one keeps serving.
    std::fs::write(&path, "garbage").expect("break certificate");
    shuck.signal("HUP");
    let log = shuck.wait_log("reload failed");
    assert!(log.contains("site.pem"), "the failing file is named: {log}");
    let (ok, out) = s_client(&pki, shuck.addr(), Some("reload.test"), &[]);
    assert!(ok, "{out}");
    assert!(out.contains("CN = after"), "{out}");

    // What needs the sockets or the workers is reported as needing a restart, on every reload
    // until then; a timeout is simply applied.
    let good = pki.leaf("good-again.pem", "after", &["reload.test"], Key::EcdsaP256);
    std::fs::rename(&good, &path).expect("restore certificate");
    let other = config("h2").replace("workers = 2", "workers = 3")
        + "idle_timeout = \"9s\"\nbacklog = 77\n";
    std::fs::write(shuck.config_path(), &other).expect("rewrite config");
    shuck.signal("HUP");
    shuck.wait_log_count("reloaded certificates", 2);
    shuck.signal("HUP");
    let log = shuck.wait_log_count("reloaded certificates", 3);
    assert_eq!(
        log.matches("workers changed; restart to apply it").count(),
        2,
        "{log}"
    );
    // The new backlog reaches the addresses kept, so nothing is said of it.
    assert!(!log.contains("backlog changed"), "{log}");
    assert!(!log.contains("timeout changed"), "{log}");

    // The frontend moves to another address (matched by name): the new one serves the new
    // certificate, the old one is closed, and sessions from before still resume there.
    let moved = pki.leaf("moved.pem", "moved", &["reload.test"], Key::EcdsaP256);
    std::fs::rename(&moved, &path).expect("new certificate");
    let port = shuck_test_support::ports::tcp();
    std::fs::write(
        shuck.config_path(),
        config("h2").replace("127.0.0.1:0", &format!("127.0.0.1:{port}")),
    )
    .expect("rewrite config");
    shuck.signal("HUP");
    shuck.wait_log_count("reloaded certificates", 4);
    let new_addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let (ok, out) = s_client(
        &pki,
        new_addr,
        Some("reload.test"),
        &["-tls1_3", "-sess_in", sess],
    );
    assert!(ok, "{out}");
    assert!(out.contains("\nReused, TLSv1.3"), "{out}");
    let (ok, out) = s_client(&pki, new_addr, Some("reload.test"), &[]);
    assert!(ok, "{out}");
    assert!(out.contains("CN = moved"), "{out}");
    assert!(
        std::net::TcpStream::connect(shuck.addr()).is_err(),
        "the old address still accepts"
    );
    shuck.assert_alive();
}

#[test]
fn session_cache_survives_a_reload() {
    let pki = Pki::new();
    let path = pki.leaf("cache.pem", "cache", &["cache.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    // Tickets off: TLS 1.2 resumption rests on the per-worker session-ID cache alone.
    let shuck = Shuck::start(&format!(
        "workers = 1\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\nsession_tickets = false\n",
        backend.addr,
        toml_path(&path)
    ));
    let sess = pki.path("cache.sess");
    let sess = sess.to_str().expect("utf-8");
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("cache.test"),
        &["-tls1_2", "-sess_out", sess],
    );
    assert!(ok, "{out}");
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("cache.test"),
        &["-tls1_2", "-sess_in", sess],
    );
    assert!(
        ok && out.contains("\nReused, TLSv1.2"),
        "resumed from the cache: {out}"
    );
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates");
    let (ok, out) = s_client(
        &pki,
        shuck.addr(),
        Some("cache.test"),
        &["-tls1_2", "-sess_in", sess],
    );
    assert!(
        ok && out.contains("\nReused, TLSv1.2"),
        "the reload kept the session cache: {out}"
    );
}

/// TLS records that reading the client makes (here the no_renegotiation warning that answers a
/// TLS 1.2 renegotiation attempt) go out at once, not when the backend next sends something:
/// with a backend that never answers, the client would otherwise wait for its own timeout.
#[test]
fn tls_answers_made_while_reading_are_sent_at_once() {
    let pki = Pki::new();
    let cert = pki.leaf("r.pem", "r", &["r.test"], Key::EcdsaP256);
    // Connections complete in the kernel's backlog; nothing ever reads or writes them.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n",
        silent.local_addr().expect("addr"),
        toml_path(&cert)
    ));
    // "R" on a line of its own, once the handshake is done: s_client asks to renegotiate. Its
    // stdin stays open long enough for an answer to arrive. Without one, s_client would wait for
    // the end of its renegotiation until `timeout` stops it.
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg(format!(
        "(sleep 1; echo R; sleep 3) | timeout 8 openssl s_client -connect {} -servername r.test -tls1_2 -msg 2>&1",
        shuck.addr()
    ));
    let out = run_bounded(&mut c, b"", 10);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("RENEGOTIATING") && text.contains("warning no_renegotiation"),
        "{text}"
    );
}

/// A configuration error on reload is one log line, whatever the parser's message looks like
/// (TOML's show the offending line and a caret on lines of their own), so log collectors keep it
/// whole; the old configuration keeps serving.
#[test]
fn a_reload_error_is_one_log_line() {
    let pki = Pki::new();
    let cert = pki.leaf("one.pem", "one", &["one.test"], Key::EcdsaP256);
    let shuck = Shuck::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    ));
    std::fs::write(
        shuck.config_path(),
        "[[frontend]]\nlisten = [\"127.0.0.1:0\"\n",
    )
    .expect("break config");
    shuck.signal("HUP");
    let log = shuck.wait_log("reload failed");
    let line = log
        .lines()
        .find(|l| l.contains("reload failed"))
        .expect("line");
    assert!(
        line.contains("TOML parse error"),
        "the parser's words: {line}"
    );
    assert!(
        log.lines().all(|l| l.starts_with("20")),
        "every line starts with its timestamp: {log}"
    );
    let (_, out) = s_client(&pki, shuck.addr(), Some("one.test"), &[]);
    assert!(out.contains("shuck demo backend"), "{out}");
}

/// Refusals use the alerts OpenSSL servers send and scanners expect: a client whose cipher
/// suites leave no certificate usable gets handshake_failure (40; rustls says access_denied,
/// 49, which reads as a policy refusal), a client that speaks only TLS 1.0 or 1.1 gets
/// protocol_version (70). Each is counted by its reason.
#[test]
fn refusals_use_the_standard_alerts() {
    let pki = Pki::new();
    let cert = pki.leaf("std.pem", "std", &["std.test"], Key::EcdsaP256);
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    ));
    let refused = |args: &[&str], alert: &str| {
        let (ok, out) = s_client(&pki, shuck.addr(), Some("std.test"), args);
        assert!(!ok, "{args:?}: {out}");
        assert!(out.contains(alert), "{args:?} wants {alert}: {out}");
    };
    // A TLS 1.2 suite without ECDHE: rustls has none, so no signature scheme is left either.
    refused(
        &["-tls1_2", "-cipher", "AES128-GCM-SHA256"],
        "SSL alert number 40",
    );
    for old in ["-tls1", "-tls1_1"] {
        refused(
            &[old, "-cipher", "DEFAULT@SECLEVEL=0"],
            "SSL alert number 70",
        );
    }
    let metrics = shuck_test_support::clients::wait_metric(
        shuck.addrs[1],
        "shuck_handshake_failures_total",
        &["reason=\"incompatible\""],
        2,
    );
    let failed = |reason: &str| shuck_test_support::clients::handshake_failures(&metrics, reason);
    assert_eq!(failed("incompatible"), 2, "{metrics}");
    assert_eq!(failed("no_certificate"), 1, "{metrics}");
}
