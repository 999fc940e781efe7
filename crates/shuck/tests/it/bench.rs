//! `shuck bench` and `shuck speed` through the binary: their --help, and one run end to end (the
//! real binary loads a real `shuck serve` relaying to the real `shuck bench backend`; we check the
//! counts, the resumption ratio, the output files, `bench compare` and `speed --bench-json`).
//! What the library does on its own is tested in crates/shuck-bench/tests.

// Helpers outside #[test] functions too: a panic there is the test's failure report.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use shuck_test_support::pki::{Key, Pki};
use shuck_test_support::process::{run_bounded, BenchBackend, Shuck, SHUCK};

/// `shuck <sub> args…`, bounded at `secs`: (success, stdout, stderr).
fn shuck_sub(sub: &str, args: &[&str], secs: u64) -> (bool, String, String) {
    let mut c = Command::new(&*SHUCK);
    c.arg(sub).args(args);
    let out = run_bounded(&mut c, b"", secs);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn bench(args: &[&str]) -> (bool, String, String) {
    shuck_sub("bench", args, 90)
}

fn json(args: &[&str]) -> serde_json::Value {
    let (ok, out, err) = bench(args);
    assert!(ok, "shuck bench failed: {err}\n{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn check_png(p: &Path) {
    let bytes = std::fs::read(p).unwrap();
    assert_eq!(
        &bytes[..8],
        b"\x89PNG\r\n\x1a\n",
        "{} has no PNG signature",
        p.display()
    );
    let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
        .read_info()
        .unwrap();
    assert_eq!((reader.info().width, reader.info().height), (900, 500));
    let mut buf = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buf).unwrap();
    let px = &buf[..frame.buffer_size()];
    // Something was drawn: not a blank canvas.
    assert!(px.iter().any(|&b| b != px[0]), "{} is blank", p.display());
}

fn check_svg(p: &Path, axis: &str) {
    let text = std::fs::read_to_string(p).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: String = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .collect();
    assert!(
        texts.contains(axis),
        "axis label missing in {}",
        p.display()
    );
    assert!(
        doc.descendants().any(|n| n.has_tag_name("polyline")),
        "no series in {}",
        p.display()
    );
}

#[test]
fn open_loop_ramp_against_shuck_resumes_k_minus_1_of_k_and_writes_plots() {
    let pki = Pki::new();
    let bundle = pki.leaf("leaf.pem", "bench.test", &["bench.test"], Key::EcdsaP256);
    let backend = BenchBackend::start(1024);
    let shuck = Shuck::with()
        .args(&[
            "--cert",
            bundle.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--backend",
            &backend.addr.to_string(),
            "--workers",
            "1",
        ])
        .run();
    let out = tempfile::tempdir().unwrap();
    let target = shuck.addr().to_string();
    let pid = shuck.pid().to_string();
    let v = json(&[
        &target,
        "--ca",
        pki.ca_path().to_str().unwrap(),
        "--sni",
        "bench.test",
        "--rate-start",
        "20",
        "--rate-step",
        "20",
        "--rate-max",
        "60",
        "--step-duration",
        "1",
        "-k",
        "4",
        "--expect-size",
        "1024",
        "--server-pid",
        &pid,
        "--out",
        out.path().to_str().unwrap(),
        "--json",
        "--quiet",
    ]);
    let t = &v["totals"];
    assert_eq!(t["failed"], 0, "{v:#}");
    // 20+40+60 connections/s for 1 s each.
    let ok = t["successful"].as_u64().unwrap();
    assert!((110..=130).contains(&ok), "{ok} connections: {v:#}");
    let ratio = t["resumption_ratio"].as_f64().unwrap();
    // Sessions still open at the end of the run have fewer than K connections: allow for a few.
    assert!((ratio - 0.75).abs() < 0.06, "resumption ratio {ratio}");
    assert_eq!(v["steps"].as_array().unwrap().len(), 3);
    assert_eq!(v["settings"]["protocol"], "TLSv1.3");
    // At least the first step passes; which one is highest depends on how busy the machine is.
    assert!(
        v["verdict"]["max_tps"].as_f64().is_some_and(|t| t >= 19.0),
        "{v:#}"
    );
    assert!(t["server_cpu_us_per_conn"].as_f64().unwrap() > 0.0);
    assert!(v["steps"][2]["client_cpu_percent"].is_number(), "{v:#}");
    // 1024 body bytes plus a head per connection.
    assert!(t["bytes"].as_u64().unwrap() > ok * 1024);

    let csv = std::fs::read_to_string(out.path().join("steps.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap())
            .unwrap();
    assert_eq!(saved["totals"], v["totals"]);
    for name in ["tps", "latency"] {
        check_svg(&out.path().join(format!("{name}.svg")), "time (s)");
        check_png(&out.path().join(format!("{name}.png")));
    }

    // Side by side (the shootout's summary): a table row per run and the comparison plots.
    let (ok, table, err) = bench(&[
        "compare",
        "--out",
        out.path().to_str().unwrap(),
        &format!("one={}", out.path().join("results.json").display()),
        &format!("two={}", out.path().join("results.json").display()),
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("| one |") || l.starts_with("| two |"))
            .count(),
        2,
        "{table}"
    );
    for name in ["compare-tps", "compare-latency"] {
        check_svg(
            &out.path().join(format!("{name}.svg")),
            "offered rate (connections/s)",
        );
        check_png(&out.path().join(format!("{name}.png")));
    }

    // The capacity estimate reads the run back and sets K and the key exchange from it.
    let results = out.path().join("results.json");
    let (ok, text, err) = speed(&[
        "--quick",
        "--cores",
        "1",
        "--json",
        "--cert",
        bundle.to_str().unwrap(),
        "--bench-json",
        results.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    let s: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(s["prediction"]["requests_per_session"], 4);
    assert_eq!(s["prediction"]["kx"], "x25519mlkem768");
    assert_eq!(
        s["prediction"]["key"], "p256",
        "the key type comes from the bundle"
    );
    let c = &s["comparison"];
    let ratio = c["ratio"].as_f64().unwrap();
    let expected = v["verdict"]["max_tps"].as_f64().unwrap() / c["predicted_tps"].as_f64().unwrap();
    assert!((ratio - expected).abs() < 1e-9 && ratio > 0.0, "{s:#}");
    assert!(c["cpu_ratio"].as_f64().unwrap() > 0.0, "{s:#}");
}

fn speed(args: &[&str]) -> (bool, String, String) {
    shuck_sub("speed", args, 120)
}

/// A subcommand's entry in `shuck --help`.
fn lists(help: &str, sub: &str) -> bool {
    help.lines()
        .any(|l| l.trim_start().starts_with(&format!("{sub} ")))
}

#[test]
fn help_lists_bench_and_speed_and_their_flags() {
    let (ok, out, err) = shuck_sub("--help", &[], 30);
    assert!(ok, "{err}");
    assert!(lists(&out, "bench") && lists(&out, "speed"), "{out}");
    for (sub, flag) in [("bench", "--rate-start"), ("speed", "--bench-json")] {
        let (ok, out, err) = shuck_sub(sub, &["--help"], 30);
        assert!(ok, "{err}");
        assert!(out.contains(flag), "shuck {sub} --help lacks {flag}: {out}");
    }
}

/// A rustls client (`shuck bench`) resumes by TLS 1.2 session ID, TLS 1.2 ticket and TLS 1.3 PSK
/// on a four-worker shuck: every possible resumption (K-1 of K) resumes, whichever worker the
/// kernel picks. With a session cache far smaller than the sessions made, it stays within its
/// size: the evictions account for the rest.
#[test]
fn a_rustls_client_resumes_every_way_on_every_worker_and_the_cache_stays_bounded() {
    let pki = Pki::new();
    let bundle = pki.leaf("r.pem", "r.test", &["r.test"], Key::EcdsaP256);
    let backend = BenchBackend::start(1024);
    let config = format!(
        "workers = 4\nmetrics_listen = \"127.0.0.1:0\"\nmetrics_per_worker = true\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = \"{}\"\nsession_cache_size = 64\n",
        backend.addr,
        bundle.display()
    );
    let shuck = Shuck::start(&config);
    let target = shuck.addr().to_string();
    let ca = pki.ca_path();
    for (mode, tls) in [("session-id", "1.2"), ("ticket", "1.2"), ("psk", "1.3")] {
        let v = json(&[
            &target,
            "--ca",
            ca.to_str().unwrap(),
            "--sni",
            "r.test",
            "--resume",
            mode,
            "--tls",
            tls,
            "-c",
            "4",
            "--duration",
            "2",
            "--step-duration",
            "1",
            "-k",
            "4",
            "--json",
            "--quiet",
        ]);
        let t = &v["totals"];
        let ok = t["successful"].as_u64().unwrap();
        let resumed = t["resumed"].as_u64().unwrap();
        assert_eq!(t["failed"], 0, "{mode}: {v:#}");
        // Sessions still open when the run stops may have fewer than K connections.
        assert!(
            ok > 40 && resumed * 4 >= (ok - 16) * 3,
            "{mode}: {resumed} of {ok} resumed"
        );
    }
    let text = shuck_test_support::clients::scrape(shuck.addrs[1]);
    let sum = |name, labels: &[&str]| shuck_test_support::clients::sum(&text, name, labels);
    let id_full = sum(
        "shuck_handshakes_total",
        &["kind=\"full\"", "version=\"TLSv1.2\""],
    );
    let evicted = sum("shuck_session_cache_evictions_total", &[]);
    // The session-ID run stored one session per full TLS 1.2 handshake (tickets stored none).
    assert!(id_full > 64, "{text}");
    assert!(
        evicted > 0 && evicted >= id_full - 64 - 16,
        "{evicted} evictions of {id_full}: {text}"
    );
    for w in 0..4 {
        let label = format!("worker=\"{w}\"");
        assert!(
            sum("shuck_resumptions_total", &[&label]) > 0,
            "worker {w}: {text}"
        );
    }
}

/// `shuck bench` (closed loop) against `target` for `secs` seconds in the background.
fn load_in_background(
    target: &str,
    ca: &Path,
    secs: u32,
) -> std::thread::JoinHandle<serde_json::Value> {
    let args: Vec<String> = [
        target,
        "--ca",
        ca.to_str().unwrap(),
        "--sni",
        "r.test",
        "-c",
        "8",
        "-k",
        "4",
        "--duration",
        &secs.to_string(),
        "--step-duration",
        "1",
        "--expect-size",
        "1024",
        "--timeout",
        "5",
        "--json",
        "--quiet",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    std::thread::spawn(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        json(&args)
    })
}

/// Twenty reloads (SIGHUP, each swapping the certificate, a TLS setting, the backend and the
/// timeouts) while a closed-loop load runs: not one connection fails. After the last one the first
/// backend is stopped and connections still succeed: the new backend took over. Then SIGTERM under
/// load: shuck drains, and every connection that got an answer got all of it (the load generator
/// checks each answer's size).
#[test]
fn twenty_reloads_under_load_fail_no_connection_and_sigterm_drains() {
    let pki = Pki::new();
    let a = pki.leaf("a.pem", "a", &["r.test"], Key::EcdsaP256);
    let b = pki.leaf("b.pem", "b", &["r.test"], Key::Rsa2048);
    let first = BenchBackend::start(1024);
    let second = BenchBackend::start(1024);
    let config = |cert: &Path, alpn: &str, backend: std::net::SocketAddr, idle: &str| {
        format!(
            "workers = 2\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = \"{}\"\nalpn = [{alpn}]\nidle_timeout = \"{idle}\"\nconnect_timeout = \"{idle}\"\n",
            cert.display()
        )
    };
    let shuck = Shuck::start(&config(&a, "\"http/1.1\"", first.addr, "30s"));
    let target = shuck.addr().to_string();
    let load = load_in_background(&target, &pki.ca_path(), 6);
    for i in 0..20 {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let next = if i % 2 == 0 {
            config(&b, "\"h2\", \"http/1.1\"", second.addr, "20s")
        } else {
            config(&a, "\"http/1.1\"", first.addr, "30s")
        };
        // listen stays 127.0.0.1:0 in the file; the running port is kept (frontends match by name).
        std::fs::write(shuck.config_path(), next).unwrap();
        shuck.signal("HUP");
        shuck.wait_log_count("reloaded certificates", i + 1);
    }
    let v = load.join().unwrap();
    let t = &v["totals"];
    assert_eq!(t["failed"], 0, "connections failed during reloads: {v:#}");
    assert!(t["successful"].as_u64().unwrap() > 100, "{v:#}");
    assert!(
        !shuck.log_text().contains("restart to apply"),
        "backend and timeouts are applied: {}",
        shuck.log_text()
    );
    // The last reload moved the frontend to the second backend: the first may go.
    std::fs::write(
        shuck.config_path(),
        config(&b, "\"http/1.1\"", second.addr, "20s"),
    )
    .unwrap();
    shuck.signal("HUP");
    shuck.wait_log_count("reloaded certificates", 21);
    drop(first);
    let after = load_in_background(&target, &pki.ca_path(), 1)
        .join()
        .unwrap();
    assert_eq!(after["totals"]["failed"], 0, "{after:#}");

    // SIGTERM in the middle of a load: connections in flight finish whole.
    let load = load_in_background(&target, &pki.ca_path(), 4);
    // The load's progress shows only when it ends: 2 s of its 4 puts the stop in its middle.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (status, log) = shuck.stop();
    assert!(status.success(), "{log}");
    let v = load.join().unwrap();
    // After the stop, new connections are refused (failed to connect, or reset in the kernel's
    // accept queue: issue 12's zero-downtime work); what must not happen is an answer cut short
    // or wrong, which the generator counts by its size or status.
    let failures = |kind: &str| -> u64 {
        v["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["failures"][kind].as_u64())
            .sum()
    };
    // A cut answer shows as `size` (clean close mid-body) or `io` (a reset or EOF mid-body);
    // a stall as `timeout`. Only refusals (`connect`, `handshake`) may follow the stop.
    let cut = ["size", "status", "io", "timeout"].map(failures);
    assert_eq!(cut, [0; 4], "size/status/io/timeout failures: {v:#}");
    assert!(v["totals"]["successful"].as_u64().unwrap() > 0, "{v:#}");
    println!(
        "sigterm under load: {} served, refused after the stop: connect {}, handshake {}, io {}",
        v["totals"]["successful"],
        failures("connect"),
        failures("handshake"),
        failures("io")
    );
}

/// A process shuck started by itself (an upgrade's successor): stopped with SIGTERM on drop, and
/// waited for (bounded), so a failing test leaves nothing running.
struct Successor(u32);

impl Successor {
    fn alive(&self) -> bool {
        Path::new(&format!("/proc/{}", self.0)).exists()
    }
}

impl Drop for Successor {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg(self.0.to_string()).status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A shuck serving r.test (1 KiB answers) with a pid file, for `kill -USR2`.
struct Upgradable {
    pki: Pki,
    _backend: BenchBackend,
    dir: tempfile::TempDir,
    pid_file: std::path::PathBuf,
    shuck: Shuck,
}

impl Upgradable {
    /// Started with the global keys `global` before its one frontend.
    fn start(global: &str) -> Upgradable {
        let pki = Pki::new();
        let cert = pki.leaf("u.pem", "u", &["r.test"], Key::EcdsaP256);
        let backend = BenchBackend::start(1024);
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("shuck.pid");
        let config = format!(
            "{global}\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = \"{}\"\n",
            backend.addr,
            cert.display()
        );
        let shuck = Shuck::with()
            .config(&config)
            .args(&["--pid-file", pid_file.to_str().unwrap()])
            .run();
        Upgradable {
            pki,
            _backend: backend,
            dir,
            pid_file,
            shuck,
        }
    }
}

/// `kill -USR2` under a steady closed-loop load: the same binary is started with the listening
/// sockets, says it is ready, and only then does the old process stop accepting and drain. Not
/// one connection fails or is refused; the old process exits once drained; the new one has
/// rewritten the pid file and serves on.
#[test]
fn an_upgrade_under_load_fails_no_connection_and_the_old_process_drains() {
    let Upgradable {
        pki,
        _backend,
        dir: _dir,
        pid_file,
        mut shuck,
    } = Upgradable::start("workers = 2\nshutdown_grace = \"5s\"");
    let old = shuck.pid();
    let target = shuck.addr().to_string();
    let load = load_in_background(&target, &pki.ca_path(), 6);
    // The load's progress shows only when it ends: the upgrade goes in its first third.
    std::thread::sleep(std::time::Duration::from_secs(2));
    shuck.signal("USR2");
    let log = shuck.wait_log("the new process is listening");
    // The old process rewrites the pid file with the new one's ID right after that line.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let new: u32 = loop {
        let pid: u32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        if pid != old || std::time::Instant::now() > deadline {
            break pid;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let successor = Successor(new);
    assert_ne!(new, old, "{log}");
    let status = shuck
        .wait_exit(std::time::Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the old process did not exit: {}", shuck.log_text()));
    assert!(status.success(), "{}", shuck.log_text());
    let v = load.join().unwrap();
    let t = &v["totals"];
    assert_eq!(
        t["failed"], 0,
        "connections failed during the upgrade: {v:#}"
    );
    assert!(t["successful"].as_u64().unwrap() > 100, "{v:#}");
    // The new process serves on alone.
    assert!(successor.alive());
    let after = load_in_background(&target, &pki.ca_path(), 1)
        .join()
        .unwrap();
    assert_eq!(after["totals"]["failed"], 0, "{after:#}");
    assert!(
        after["totals"]["successful"].as_u64().unwrap() > 0,
        "{after:#}"
    );
}

/// After an upgrade's handover only the new process answers scrapes: both hold the same metrics
/// socket, and the old one, still draining a connection, stops its endpoint so counters do not
/// jump between two processes' values. The connection it drains is still answered.
#[test]
fn after_an_upgrade_only_the_new_process_answers_scrapes() {
    use shuck_test_support::clients::{scrape, sum, wait_metric};
    let Upgradable {
        pki,
        _backend,
        dir,
        pid_file,
        mut shuck,
    } = Upgradable::start(
        "workers = 1\nshutdown_grace = \"30s\"\nmetrics_listen = \"127.0.0.1:0\"",
    );
    let (old, metrics) = (shuck.pid(), shuck.addrs[1]);
    let open = OpenConnection::open(shuck.addr(), &pki.ca_path(), dir.path());
    let active = "shuck_connections_active";
    let text = wait_metric(metrics, active, &[], 1);
    assert_eq!(
        sum(&text, active, &[]),
        1,
        "the old process holds one: {text}"
    );
    shuck.signal("USR2");
    let log = shuck.wait_log("metrics endpoint handed over");
    let new: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _successor = Successor(new);
    assert_ne!(new, old, "{log}");
    for i in 0..20 {
        let text = scrape(metrics);
        assert_eq!(
            sum(&text, active, &[]),
            0,
            "scrape {i} answered by the draining process: {text}"
        );
    }
    let answer = open.request();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let status = shuck
        .wait_exit(std::time::Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the old process did not exit: {}", shuck.log_text()));
    assert!(status.success(), "{}", shuck.log_text());
}

/// Whether connecting to `addr` is refused within 2 s (workers close their sockets on their
/// own loops, just after the reload's log line).
fn refused_soon(addr: std::net::SocketAddr) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        if std::net::TcpStream::connect(addr).is_err() {
            return true;
        }
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A free port on 127.0.0.1 (bound, then let go).
fn free_port() -> u16 {
    shuck_test_support::ports::tcp()
}

/// `openssl s_client` connected (handshake done) and waiting for its request on stdin.
struct OpenConnection {
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl OpenConnection {
    fn open(addr: std::net::SocketAddr, ca: &Path, dir: &Path) -> OpenConnection {
        let out = dir.join(format!("s_client-{}.out", addr.port()));
        let child = Command::new("openssl")
            .args([
                "s_client",
                "-connect",
                &addr.to_string(),
                "-servername",
                "r.test",
            ])
            .arg("-CAfile")
            .arg(ca)
            .args(["-verify_return_error", "-ign_eof", "-quiet"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut c = OpenConnection { child, out };
        // -quiet prints the verification on stderr once the handshake is done.
        let mut err = c.child.stderr.take().unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while !String::from_utf8_lossy(&seen).contains("verify return:1") {
            let n = std::io::Read::read(&mut err, &mut buf).unwrap();
            assert!(n > 0, "s_client ended: {}", String::from_utf8_lossy(&seen));
            seen.extend_from_slice(&buf[..n]);
        }
        c
    }

    /// Sends a request now and returns what came back (bounded: the backend closes).
    fn request(mut self) -> String {
        std::io::Write::write_all(
            self.child.stdin.as_mut().unwrap(),
            b"GET / HTTP/1.1\r\nHost: r.test\r\nConnection: close\r\n\r\n",
        )
        .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(&self.out).unwrap()
    }
}

/// Reloads that add a listen address and a whole frontend, then remove them, five times, while a
/// closed-loop load runs on the address that stays: not one connection fails. Added addresses
/// serve their frontend's certificate; removed ones refuse new connections while a connection
/// opened on one before its removal is still answered. The ready file follows the addresses. A
/// reload that cannot bind an address (another process holds it) changes nothing and says why.
#[test]
fn reloads_add_and_remove_frontends_and_addresses_without_failing_a_connection() {
    let pki = Pki::new();
    let a = pki.leaf("a.pem", "a", &["r.test"], Key::EcdsaP256);
    let b = pki.leaf("b.pem", "b", &["b.test"], Key::EcdsaP256);
    let backend = BenchBackend::start(1024);
    let (p2, p3) = (free_port(), free_port());
    let frontend = |name: &str, listen: &str, cert: &Path| {
        format!(
            "[[frontend]]\nname = \"{name}\"\nlisten = [{listen}]\nbackend = \"{}\"\ncertificates = \"{}\"\n",
            backend.addr,
            cert.display()
        )
    };
    let first = format!("workers = 2\n{}", frontend("a", "\"127.0.0.1:0\"", &a));
    let shuck = Shuck::start(&first);
    let p1 = shuck.addr();
    let wider = format!(
        "workers = 2\n{}{}",
        frontend("a", &format!("\"{p1}\", \"127.0.0.1:{p2}\""), &a),
        frontend("b", &format!("\"127.0.0.1:{p3}\""), &b)
    );
    let narrow = format!("workers = 2\n{}", frontend("a", &format!("\"{p1}\""), &a));
    let (a2, a3) = (
        std::net::SocketAddr::from(([127, 0, 0, 1], p2)),
        std::net::SocketAddr::from(([127, 0, 0, 1], p3)),
    );
    let ready = shuck.config_path().with_file_name("ready");
    let load = load_in_background(&p1.to_string(), &pki.ca_path(), 8);
    let dir = tempfile::tempdir().unwrap();
    for round in 0..5 {
        std::fs::write(shuck.config_path(), &wider).unwrap();
        shuck.signal("HUP");
        shuck.wait_log_count("reloaded certificates", 2 * round + 1);
        let listed = std::fs::read_to_string(&ready).unwrap();
        assert_eq!(listed, format!("{p1}\n{a2}\n{a3}\n"), "round {round}");
        let on_a2 = shuck_test_support::clients::curl_at(&pki, a2, "r.test", "/", &[]);
        assert!(on_a2.status.success(), "{on_a2:?}");
        let on_b = shuck_test_support::clients::curl_at(&pki, a3, "b.test", "/", &[]);
        assert!(on_b.status.success(), "{on_b:?}");
        // b serves its own certificate, which does not name r.test.
        let wrong = shuck_test_support::clients::curl_at(&pki, a3, "r.test", "/", &[]);
        assert!(!wrong.status.success(), "{wrong:?}");
        let open = OpenConnection::open(a2, &pki.ca_path(), dir.path());

        std::fs::write(shuck.config_path(), &narrow).unwrap();
        shuck.signal("HUP");
        shuck.wait_log_count("reloaded certificates", 2 * round + 2);
        assert_eq!(std::fs::read_to_string(&ready).unwrap(), format!("{p1}\n"));
        for gone in [a2, a3] {
            assert!(refused_soon(gone), "{gone} still accepts after its removal");
        }
        let answer = open.request();
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "round {round}: {answer:?}"
        );
    }
    let v = load.join().unwrap();
    assert_eq!(v["totals"]["failed"], 0, "connections failed: {v:#}");
    assert!(v["totals"]["successful"].as_u64().unwrap() > 100, "{v:#}");

    // Another process holds b's address: nothing changes, not even a's address bound before.
    let squatter = std::net::TcpListener::bind(a3).unwrap();
    std::fs::write(shuck.config_path(), &wider).unwrap();
    shuck.signal("HUP");
    let log = shuck.wait_log("reload failed");
    let line = log.lines().find(|l| l.contains("reload failed")).unwrap();
    assert!(line.contains(&a3.to_string()), "{line}");
    assert!(refused_soon(a2), "a's new address was left open: {log}");
    assert_eq!(std::fs::read_to_string(&ready).unwrap(), format!("{p1}\n"));
    drop(squatter);
    let after = shuck_test_support::clients::curl_at(&pki, p1, "r.test", "/", &[]);
    assert!(after.status.success(), "{after:?}");
}

/// `--plain` loads a server without TLS (the shootout's TCP floor): against the plain bench
/// backend every answer arrives whole; the same target with TLS fails its handshakes.
#[test]
fn plain_mode_loads_a_server_without_tls() {
    let backend = BenchBackend::start(1024);
    let target = backend.addr.to_string();
    let common = [
        target.as_str(),
        "-c",
        "4",
        "--duration",
        "1",
        "--step-duration",
        "1",
        "--expect-size",
        "1024",
        "--json",
        "--quiet",
    ];
    let v = json(&[&common[..], &["--plain"]].concat());
    assert!(v["totals"]["successful"].as_u64().unwrap() > 10, "{v:#}");
    assert_eq!(v["totals"]["failed"], 0, "{v:#}");
    let (ok, out, err) = bench(&[&common[..], &["--insecure", "--timeout", "1"]].concat());
    assert!(
        !ok || out.contains("\"handshake\""),
        "TLS to a plain server: {out}{err}"
    );
}

/// A frontend that a reload keeps as it runs (it fetches OCSP responses: only a restart stops
/// that) still holds its address: a file that gives the address to another frontend is refused
/// whole, and the running frontend keeps serving it.
#[test]
fn a_reload_cannot_give_a_kept_frontends_address_to_another() {
    let pki = Pki::new();
    let cert = pki.leaf("k.pem", "k", &["r.test"], Key::EcdsaP256);
    let state = tempfile::tempdir().unwrap();
    let port = free_port();
    let frontend = |name: &str, extra: &str| {
        format!(
            "state_dir = \"{}\"\n[[frontend]]\nname = \"{name}\"\nlisten = \"127.0.0.1:{port}\"\ncertificates = \"{}\"\n{extra}",
            state.path().display(),
            cert.display()
        )
    };
    let shuck = Shuck::start(&frontend("fetching", "ocsp = \"fetch\"\n"));
    std::fs::write(shuck.config_path(), frontend("other", "")).unwrap();
    shuck.signal("HUP");
    let log = shuck.wait_log("reload failed");
    let line = log.lines().find(|l| l.contains("reload failed")).unwrap();
    for want in ["would be listened on by frontends", "fetching", "other"] {
        assert!(line.contains(want), "{want}: {line}");
    }
    let served = shuck_test_support::clients::curl_at(&pki, shuck.addr(), "r.test", "/", &[]);
    assert!(served.status.success(), "{served:?}");
}
