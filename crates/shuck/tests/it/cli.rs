//! The command line: `shuck check` on good and broken configurations, start-up errors that name
//! the file or key (exit 1, no panic), help text, and a clean stop on SIGTERM.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use shuck_test_support::clients::{read_all_bounded, s_client, sum, wait_metric};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{run_bounded, Shuck, SHUCK};

fn shuck(args: &[&str]) -> (i32, String, String) {
    let out = run_bounded(Command::new(&*SHUCK).args(args), b"", 60);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn write(pki: &Pki, name: &str, text: &str) -> String {
    let p = pki.path(name);
    std::fs::write(&p, text).expect("write config");
    p.display().to_string()
}

#[test]
fn check_summarises_a_good_configuration() {
    let pki = Pki::new();
    let ecdsa = pki.leaf(
        "site-ecdsa.pem",
        "site",
        &["site.test", "www.site.test"],
        Key::EcdsaP384,
    );
    let rsa = pki.leaf("site-rsa.pem", "site", &["site.test"], Key::Rsa2048);
    let ed = pki.leaf("ed.pem", "ed", &["ed.test"], Key::Ed25519);
    let cfg = write(
        &pki,
        "good.toml",
        &format!(
            "workers = 2\n[[frontend]]\nname = \"web\"\nlisten = [\"127.0.0.1:8443\", \"[::1]:8443\"]\nbackend = [\"127.0.0.1:8080\", \"127.0.0.1:8081\"]\nbackend_policy = \"least_connections\"\ncertificates = [{}, {}, {}]\nalpn = [\"h2\", \"http/1.1\"]\n\
             proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"authority\", \"unique_id\"]\n\
             accept_proxy = true\naccept_proxy_from = [\"10.1.2.3\", \"2001:db8::/32\"]\n\
             client_auth = \"optional\"\nclient_ca = {}\n",
            toml_path(&ecdsa),
            toml_path(&rsa),
            toml_path(&ed),
            toml_path(&pki.ca_path())
        ),
    );
    let (code, out, err) = shuck(&["check", "--config", &cfg]);
    assert_eq!(code, 0, "{out}{err}");
    for want in [
        "frontend \"web\"",
        "listen: 127.0.0.1:8443, [::1]:8443",
        "backend: 127.0.0.1:8080, 127.0.0.1:8081 (least connections)",
        "[ECDSA P-384]",
        "[RSA 2048]",
        "[Ed25519]",
        "names: site.test www.site.test",
        "alpn: h2, http/1.1",
        "chain of 2",
        "proxy_protocol: v2 to the backend, TLVs: authority, unique_id",
        "accept_proxy: v1/v2 header required from 10.1.2.3/32, 2001:db8::/32",
        "client certificates: optional (CA ",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
}

#[test]
fn check_and_serve_reject_broken_configurations_naming_the_problem() {
    let pki = Pki::new();
    let good = pki.leaf("good.pem", "good", &["good.test"], Key::EcdsaP256);
    let mism = pki.mismatched("mismatch.pem");
    let fe = |extra: &str| format!("[[frontend]]\nlisten = \"127.0.0.1:0\"\n{extra}\n");
    let cases = [
        (
            "unknown-key.toml",
            fe(&format!(
                "certificates = {}\nbakend = \"x:1\"",
                toml_path(&good)
            )),
            "bakend",
        ),
        (
            "mismatch.toml",
            fe(&format!("certificates = {}", toml_path(&mism))),
            "mismatch.pem",
        ),
        (
            "missing.toml",
            fe("certificates = \"/nonexistent/cert.pem\""),
            "/nonexistent/cert.pem",
        ),
        (
            "duration.toml",
            fe(&format!(
                "certificates = {}\nidle_timeout = \"forever\"",
                toml_path(&good)
            )),
            "idle_timeout",
        ),
        ("syntax.toml", "[[frontend]\n".to_string(), "syntax.toml"),
    ];
    for (name, text, want) in cases {
        let cfg = write(&pki, name, &text);
        for cmd in ["check", "serve"] {
            let (code, out, err) = shuck(&[cmd, "--config", &cfg]);
            assert_eq!(code, 1, "{cmd} {name}: {out}{err}");
            assert!(
                err.contains(want),
                "{cmd} {name}: message should name {want:?}: {err}"
            );
            assert!(!err.contains("panicked"), "{cmd} {name}: {err}");
        }
    }
    let (code, _, err) = shuck(&["check", "--config", "/nonexistent.toml"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent.toml"), "{err}");
}

#[test]
fn check_warns_about_expiring_certificates() {
    let pki = Pki::new();
    // A certificate that expires in 10 days.
    let kp = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(vec!["soon.test".to_string()]).expect("params");
    p.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(10);
    let cert = p.self_signed(&kp).expect("cert");
    let path = pki.path("soon.pem");
    std::fs::write(&path, format!("{}{}", cert.pem(), kp.serialize_pem())).expect("write");
    let cfg = write(
        &pki,
        "soon.toml",
        &format!("[[frontend]]\ncertificates = {}\n", toml_path(&path)),
    );
    let (code, out, err) = shuck(&["check", "--config", &cfg]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        err.contains("expires in 9 days") || err.contains("expires in 10 days"),
        "{err}"
    );
}

#[test]
fn help_lists_every_flag() {
    let (code, out, _) = shuck(&["serve", "--help"]);
    assert_eq!(code, 0);
    for flag in [
        "--config",
        "--listen",
        "--backend",
        "--cert",
        "--self-signed",
        "--workers",
        "--proxy-protocol",
        "--alpn",
        "--pin-cpus",
        "--max-connections",
        "--ready-file",
        "--log-format",
        "--log-level",
        "--log-connections",
    ] {
        assert!(out.contains(flag), "serve --help lacks {flag}");
    }
    let (code, out, _) = shuck(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("serve") && out.contains("check"), "{out}");
    let (code, _, err) = shuck(&["serve"]);
    assert_eq!(code, 1);
    assert!(err.contains("--self-signed"), "{err}");
}

/// The terminator links none of the benchmark's plotting and histogram stack, with the `bench`
/// feature or without: `shuck bench` and `shuck speed` run the shuck-bench binary beside it,
/// which does (checked too, so a search that finds nothing cannot pass for a clean binary).
#[test]
fn the_terminator_links_no_plotting_stack() {
    let mentions = |bin: &std::path::Path, what: &str| {
        let out = run_bounded(Command::new("grep").args(["-c", what]).arg(bin), b"", 60);
        String::from_utf8_lossy(&out.stdout).trim() != "0"
    };
    let terminator = std::path::Path::new(&*SHUCK);
    for lib in ["plotters", "ab_glyph", "hdrhistogram", "shuck_bench"] {
        assert!(
            !mentions(terminator, lib),
            "{} links {lib}",
            terminator.display()
        );
    }
    if cfg!(feature = "bench") {
        let tool = terminator.with_file_name("shuck-bench");
        assert!(
            mentions(&tool, "plotters"),
            "{} has no plotters",
            tool.display()
        );
        let (code, out, err) = shuck(&["speed", "--help"]);
        assert_eq!(code, 0, "{err}");
        assert!(out.contains("Usage: shuck speed"), "{out}");
    }
}

#[test]
fn sigterm_stops_cleanly() {
    let pki = Pki::new();
    let cert = pki.leaf("c.pem", "c", &["c.test"], Key::EcdsaP256);
    let s = Shuck::start(&format!(
        "shutdown_grace = \"2s\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    ));
    let (status, text) = s.stop();
    assert!(status.success(), "{status}: {text}");
    assert!(
        !text.contains('\x1b'),
        "no colour escapes in a log file: {text:?}"
    );
    assert!(text.contains("shutting down"), "{text}");
}

#[test]
fn weak_rsa_keys_are_refused() {
    let pki = Pki::new();
    let dir = pki.path("weak");
    std::fs::create_dir(&dir).expect("mkdir");
    let (key, cert) = (dir.join("k.pem"), dir.join("c.pem"));
    let out = run_bounded(
        Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "rsa:1024",
                "-nodes",
                "-days",
                "30",
                "-subj",
                "/CN=weak.test",
                "-keyout",
            ])
            .arg(&key)
            .arg("-out")
            .arg(&cert),
        b"",
        60,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundle = pki.path("weak.pem");
    let text = format!(
        "{}{}",
        std::fs::read_to_string(&cert).expect("cert"),
        std::fs::read_to_string(&key).expect("key")
    );
    std::fs::write(&bundle, text).expect("bundle");
    let cfg = write(
        &pki,
        "weak.toml",
        &format!("[[frontend]]\ncertificates = {}\n", toml_path(&bundle)),
    );
    let (code, out, err) = shuck(&["check", "--config", &cfg]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("weak.pem") && err.contains("1024"), "{err}");
}

#[test]
fn json_logs_carry_the_failure_reason() {
    let pki = Pki::new();
    let cert = pki.leaf("j.pem", "j", &["j.test"], Key::EcdsaP256);
    let s = Shuck::with()
        .config(&format!(
            "[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
            toml_path(&cert)
        ))
        .args(&["--log-format", "json"])
        .run();
    let mut c = std::net::TcpStream::connect(s.addr()).expect("connect");
    std::io::Write::write_all(&mut c, b"not tls at all\r\n\r\n").expect("write");
    let _ = read_all_bounded(&mut c);
    let log = s.wait_log("TLS handshake failed");
    let line = log
        .lines()
        .find(|l| l.contains("TLS handshake failed"))
        .expect("line");
    assert!(
        line.starts_with('{') && line.ends_with('}'),
        "one JSON object per line: {line}"
    );
    // The fields at the top level, where log collectors look for them.
    let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
    assert_eq!(v["level"], "WARN", "{line}");
    assert_eq!(v["reason"], "handshake_malformed", "{line}");
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{line}");
    assert_eq!(v["frontend"], "frontend0", "{line}");
    // The address and the port apart, the port a number.
    assert_eq!(v["client"], "127.0.0.1", "{line}");
    assert!(v["client_port"].is_u64(), "{line}");
}

#[test]
fn pinned_workers_run_on_their_own_cpu() {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let pki = Pki::new();
    let cert = pki.leaf("p.pem", "p", &["p.test"], Key::EcdsaP256);
    let s = Shuck::start(&format!(
        "workers = 2\npin_cpus = true\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    ));
    let mut seen = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{}/task", s.pid()))
        .expect("tasks")
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if let Some(id) = comm.trim().strip_prefix("shuck-worker-") {
            let status = std::fs::read_to_string(task.path().join("status")).expect("status");
            let allowed = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .expect("Cpus_allowed_list")
                .trim()
                .to_string();
            seen.push((id.to_string(), allowed));
        }
    }
    seen.sort();
    let want: Vec<(String, String)> = (0..2)
        .map(|i| (i.to_string(), (i % cpus).to_string()))
        .collect();
    assert_eq!(seen, want);
}

#[test]
fn the_example_configuration_is_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/shuck.toml");
    let (code, out, err) = shuck(&["check", "--config", example]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("frontend \"www\"") && out.contains("frontend \"api\""),
        "{out}"
    );
}

/// The keys shuck accepts, as its own unknown-key error lists them (for a key with no near
/// one).
fn accepted_keys(pki: &Pki, text: &str) -> Vec<String> {
    let cfg = write(pki, "keys.toml", text);
    let (code, _, err) = shuck(&["check", "--config", &cfg]);
    assert_eq!(code, 1, "{err}");
    let list = err
        .split("its keys:")
        .nth(1)
        .expect("key list in the error");
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_key_is_documented() {
    let pki = Pki::new();
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ))
    .expect("docs/configuration.md");
    let global = accepted_keys(&pki, "no_such_key = 1\n");
    let frontend = accepted_keys(&pki, "[[frontend]]\nno_such_key = 1\n");
    assert!(
        global.len() > 5 && frontend.len() > 15,
        "{global:?} {frontend:?}"
    );
    for key in global.iter().chain(&frontend).filter(|k| *k != "frontend") {
        assert!(
            doc.contains(&format!("### `{key}`")),
            "docs/configuration.md lacks an entry for {key}"
        );
    }
    // A route's keys, under `route`.
    let route = accepted_keys(&pki, "[[frontend]]\n[[frontend.route]]\nno_such_key = 1\n");
    let section = doc
        .split("### `route`")
        .nth(1)
        .and_then(|s| s.split("\n### ").next())
        .expect("a route section");
    for key in &route {
        assert!(
            section.contains(&format!("#### `{key}`"))
                || section.contains(&format!("`{key}`,"))
                || section.contains(&format!(", `{key}`")),
            "the route section lacks an entry for {key}"
        );
    }
}

#[test]
fn a_second_sigterm_cuts_the_drain_short() {
    let pki = Pki::new();
    let cert = pki.leaf("d.pem", "d", &["d.test"], Key::EcdsaP256);
    let s = Shuck::start(&format!(
        "shutdown_grace = \"60s\"\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    ));
    // An open connection keeps the drain waiting (its handshake is pending for up to 10 s).
    let held = std::net::TcpStream::connect(s.addr()).expect("connect");
    std::io::Write::write_all(&mut &held, &[0x16, 0x03, 0x01]).expect("write");
    // Accepted by a worker, not just queued in the kernel: only then is there a drain to cut.
    let metrics = *s.addrs.last().expect("metrics addr");
    let text = wait_metric(metrics, "shuck_connections_active", &[], 1);
    assert_eq!(sum(&text, "shuck_connections_active", &[]), 1, "{text}");
    s.signal("TERM");
    s.wait_log("draining connections");
    let started = std::time::Instant::now();
    s.signal("TERM");
    let (status, log) = s.stop();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(8),
        "took {:?}: {log}",
        started.elapsed()
    );
    assert!(status.success(), "{status}: {log}");
    assert!(log.contains("second stop signal"), "{log}");
    drop(held);
}

/// `certificate_expiry_warning` sets how early a certificate's expiry is warned about, at start
/// (a log line), in `shuck check` and in the metrics (its not-after time, per certificate file).
#[test]
fn certificate_expiry_is_warned_about_as_configured_and_exported() {
    let pki = Pki::new();
    let (cert, not_after) = pki.leaf_expiring("soon.pem", &["soon.test"], 10);
    let config = |window: &str| {
        format!(
            "certificate_expiry_warning = \"{window}\"\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
            toml_path(&cert)
        )
    };
    let quiet = write(&pki, "quiet.toml", &config("5days"));
    let (code, _, err) = shuck(&["check", "--config", &quiet]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("expires in"), "{err}");
    let loud = write(&pki, "loud.toml", &config("30days"));
    let (code, _, err) = shuck(&["check", "--config", &loud]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("soon.pem (CN=soon.test) expires in"), "{err}");

    let shuck = Shuck::start(&config("30days"));
    let log = shuck.wait_log("soon.pem (CN=soon.test) expires in");
    assert!(log.contains("frontend0"), "{log}");
    let metrics = shuck_test_support::clients::scrape(shuck.addrs[1]);
    let line = metrics
        .lines()
        .find(|l| l.starts_with("shuck_certificate_not_after_timestamp_seconds{"))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(line.contains("soon.pem"), "{line}");
    let value: i64 = line
        .rsplit(' ')
        .next()
        .and_then(|v| v.parse().ok())
        .expect("value");
    assert_eq!(value, not_after, "{line}");
}

/// `--version` names the commit; `--pid-file` holds the process ID while it runs and is removed
/// at a clean exit.
#[test]
fn version_names_the_commit_and_the_pid_file_lives_as_long_as_the_process() {
    let (code, out, _) = shuck(&["--version"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("shuck ") && out.contains("(commit "),
        "{out}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("shuck.pid");
    let shuck = Shuck::with()
        .config("[[frontend]]\nlisten = \"127.0.0.1:0\"\nself_signed = true\n")
        .args(&["--pid-file", pid_file.to_str().expect("path")])
        .run();
    let written = std::fs::read_to_string(&pid_file).expect("pid file");
    assert_eq!(written.trim(), shuck.pid().to_string());
    let (status, log) = shuck.stop();
    assert!(status.success(), "{log}");
    assert!(!pid_file.exists(), "pid file left behind");
}

/// `log_level` is applied by a reload: a health-check connection (closed before a byte) is a
/// debug line, absent at info, present once the level is debug.
#[test]
fn a_reload_changes_the_log_level() {
    let config = |level: &str| {
        format!(
            "log_level = \"{level}\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nself_signed = true\n"
        )
    };
    let shuck = Shuck::start(&config("info"));
    let probe = || drop(std::net::TcpStream::connect(shuck.addr()).expect("connect"));
    probe();
    // A debug line that must not be written has no event: a moment for one to show.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!shuck.log_text().contains("DEBUG"), "{}", shuck.log_text());
    std::fs::write(shuck.config_path(), config("debug")).expect("rewrite");
    shuck.signal("HUP");
    let log = shuck.wait_log("log level changed");
    assert!(!log.contains("log_level changed; restart"), "{log}");
    probe();
    shuck.wait_log("DEBUG");
}

/// The uid of every thread of process `pid` (real, from /proc).
fn thread_uids(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("tasks")
        .flatten()
        .map(|t| std::fs::read_to_string(t.path().join("status")).unwrap_or_default())
        .filter_map(|s| {
            let line = s.lines().find(|l| l.starts_with("Uid:"))?;
            line.split_whitespace().nth(1).map(str::to_string)
        })
        .collect()
}

/// The demo page over HTTPS, certificate unchecked (self-signed): the HTTP status curl got.
fn demo_status(addr: std::net::SocketAddr) -> String {
    let out = run_bounded(
        Command::new("curl").args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &format!("https://{addr}/"),
        ]),
        b"",
        20,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The README's first command, `shuck serve --self-signed`, serves the demo page when started as
/// root and when started as an ordinary user. As root with no `user`, it does what nginx does:
/// the workers run unprivileged (the `shuck` system user when there is one, otherwise nobody),
/// said in one log line.
#[test]
#[ignore = "needs root"]
fn the_readme_command_serves_as_root_and_as_an_ordinary_user() {
    shuck_test_support::process::assert_root();
    let readme = ["--self-signed", "--listen", "127.0.0.1:0"];
    let (name, uid) = match nix_user("shuck") {
        Some(uid) => ("shuck", uid),
        None => ("nobody", "65534".to_string()),
    };
    let root = Shuck::with().args(&readme).as_root_does().run();
    let log = root.wait_log(&format!("the workers run as {name}"));
    assert_eq!(log.matches("started as root").count(), 1, "{log}");
    assert_eq!(
        log.matches("dropped privileges").count(),
        1,
        "one line: {log}"
    );
    let uids = thread_uids(root.pid());
    assert!(uids.len() >= 2, "main thread and workers: {uids:?}");
    assert!(uids.iter().all(|u| *u == uid), "{uids:?}\n{log}");
    assert_eq!(demo_status(root.addr()), "200", "{log}");

    let user = Shuck::with()
        .args(&readme)
        .as_user("nobody", "nogroup")
        .run();
    let uids = thread_uids(user.pid());
    assert!(uids.iter().all(|u| u == "65534"), "{uids:?}");
    assert_eq!(demo_status(user.addr()), "200", "{}", user.log_text());
    assert!(!user.log_text().contains("started as root"));
}

/// The uid of the user called `name`, if there is one (from `id`).
fn nix_user(name: &str) -> Option<String> {
    let out = run_bounded(Command::new("id").args(["-u", name]), b"", 10);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// As root with `user = "nobody"`: the workers run as nobody once the keys are read, the
/// certificate is served, and a reload that must read a file nobody cannot read is refused
/// cleanly while the old certificate keeps serving.
#[test]
#[ignore = "needs root"]
fn started_as_root_the_workers_run_as_the_configured_user() {
    shuck_test_support::process::assert_root();
    let pki = Pki::new();
    // Root's alone: nobody cannot read the bundle.
    let cert = pki.leaf("root-only.pem", "root-only", &["priv.test"], Key::EcdsaP256);
    std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let config = format!(
        "user = \"nobody\"\nworkers = 2\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    );
    // The configuration itself nobody may read: the reload below fails on the key, not on it.
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let cfg = dir.path().join("shuck.toml");
    std::fs::write(&cfg, &config).expect("config");
    let shuck = Shuck::with()
        .args(&["--config", cfg.to_str().expect("path")])
        .run();
    let log = shuck.wait_log("dropped privileges");
    let uids = thread_uids(shuck.pid());
    assert!(uids.len() >= 3, "main thread and two workers: {uids:?}");
    assert!(uids.iter().all(|u| u == "65534"), "{uids:?}\n{log}");
    let served = || {
        let (_, out) = s_client(&pki, shuck.addr(), Some("priv.test"), &[]);
        out.contains("CN = root-only") && out.contains("Verify return code: 0 (ok)")
    };
    assert!(served());
    // A reload reads the files as nobody: refused, the old certificate keeps serving.
    std::fs::write(&cfg, &config).expect("config");
    shuck.signal("HUP");
    let log = shuck.wait_log("reload failed");
    assert!(
        log.contains("root-only.pem") && log.contains("denied"),
        "{log}"
    );
    assert!(served(), "{log}");
}

/// `shuck check` compares the edited file with the settings the running shuck recorded in the
/// state directory: what a reload would apply, what would wait for a restart. After the reload
/// the record follows what runs: only the restart-only change is left.
#[test]
fn check_says_what_a_reload_would_change() {
    let state = tempfile::tempdir().unwrap();
    std::fs::set_permissions(state.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let config = |workers: u32, listen: &str, backend: &str| {
        format!(
            "workers = {workers}\nstate_dir = \"{}\"\n[[frontend]]\nname = \"web\"\nlisten = [{listen}]\nbackend = \"{backend}\"\nself_signed = true\n",
            state.path().display()
        )
    };
    let running = Shuck::start(&config(2, "\"127.0.0.1:0\"", "127.0.0.1:1"));
    let first = running.addr();
    let record = state.path().join("running.toml");
    let mode = std::fs::metadata(&record)
        .unwrap_or_else(|e| panic!("{e}: {}", running.log_text()))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let check = || {
        let (code, out, err) =
            shuck(&["check", "--config", running.config_path().to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        out
    };
    let out = check();
    assert!(
        out.contains("a reload changes no setting"),
        "unchanged file: {out}"
    );
    let free = std::net::SocketAddr::from(([127, 0, 0, 1], shuck_test_support::ports::tcp()));
    let edited = config(3, &format!("\"{first}\", \"{free}\""), "127.0.0.1:2");
    std::fs::write(running.config_path(), &edited).unwrap();
    let out = check();
    for want in [
        format!("pid {}", running.pid()),
        format!(
            "a reload applies: frontend \"web\" listen.addrs: [\"127.0.0.1:0\"] -> [\"{first}\", \"{free}\"]"
        ),
        "a reload applies: frontend \"web\" backend.target: { Servers = [\"127.0.0.1:1\"] } -> { Servers = [\"127.0.0.1:2\"] }"
            .into(),
        "needs a restart: workers: 2 -> 3".into(),
    ] {
        assert!(out.contains(&want), "missing {want:?}: {out}");
    }
    running.signal("HUP");
    running.wait_log("reloaded certificates");
    let out = check();
    assert!(out.contains("needs a restart: workers: 2 -> 3"), "{out}");
    assert!(!out.contains("a reload applies"), "{out}");
    // A record in another version's shape is not compared (every key would look changed).
    let text = std::fs::read_to_string(&record).unwrap();
    let mut older = String::new();
    for l in text.lines().filter(|l| !l.starts_with("format =")) {
        older.push_str(l);
        older.push('\n');
    }
    assert_ne!(older, text, "the record names its format: {text}");
    std::fs::write(&record, older).unwrap();
    let out = check();
    assert!(out.contains("written by another version of shuck"), "{out}");
    assert!(!out.contains("needs a restart"), "{out}");
}

/// `shuck version` is `shuck --version`; `--verbose` names what a bug report needs, each from
/// its source: the lock file's rustls, the features, and kTLS as the kernel lists its
/// upper-layer protocols.
#[test]
fn version_verbose_names_the_build_and_whether_the_kernel_has_ktls() {
    let run = |args: &[&str]| {
        let out = run_bounded(Command::new(&*SHUCK).args(args), b"", 30);
        assert!(out.status.success(), "{args:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let short = run(&["version"]);
    assert_eq!(short, run(&["--version"]));
    let verbose = run(&["version", "--verbose"]);
    assert!(verbose.starts_with(&short), "{verbose}");
    let field = |k: &str| {
        verbose
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}: ")))
            .unwrap_or_else(|| panic!("no {k}: {verbose}"))
            .to_string()
    };
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.lock"))
        .expect("Cargo.lock");
    let rustls = field("rustls");
    assert!(
        lock.contains(&format!("name = \"rustls\"\nversion = \"{rustls}\"")),
        "{rustls} is not the locked rustls"
    );
    assert_eq!(
        field("features").split(',').any(|f| f == "jemalloc"),
        cfg!(feature = "jemalloc")
    );
    assert_eq!(field("allocator") == "jemalloc", cfg!(feature = "jemalloc"));
    // After shuck's probe the kernel lists "tls" among its upper-layer protocols exactly when it
    // has kTLS (the probe loads the module if there is one).
    let ulps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
    assert_eq!(
        field("kTLS").starts_with("this kernel has it"),
        ulps.split_whitespace().any(|u| u == "tls"),
        "{verbose}\nulps: {ulps}"
    );
}
