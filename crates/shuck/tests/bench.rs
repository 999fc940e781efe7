//! `shuck bench` end to end: the real binary loads a real `shuck serve` relaying to the real
//! `shuck bench backend`, and we check the counts, the resumption ratio and the output files.

// Helpers outside #[test] functions too: a panic there is the test's failure report.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::pki::{Key, Pki};
use common::process::{run_bounded, Shuck, SHUCK};

/// `shuck bench backend` on port 0, killed on drop.
struct Backend {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Backend {
    fn start(size: u64) -> Backend {
        let dir = tempfile::tempdir().unwrap();
        let ready = dir.path().join("ready");
        let mut b = Backend {
            child: Command::new(SHUCK)
                .args(["bench", "backend", "--listen", "127.0.0.1:0", "--size"])
                .arg(size.to_string())
                .arg("--ready-file")
                .arg(&ready)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
            addr: String::new(),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(t) = std::fs::read_to_string(&ready) {
                if t.ends_with('\n') {
                    b.addr = t.trim().to_string();
                    return b;
                }
            }
            assert!(Instant::now() < deadline, "backend not ready");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `shuck <sub> args…`, bounded at `secs`: (success, stdout, stderr).
fn shuck_sub(sub: &str, args: &[&str], secs: u64) -> (bool, String, String) {
    let mut c = Command::new(SHUCK);
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
    let backend = Backend::start(1024);
    let shuck = Shuck::start_flags(&[
        "--cert",
        bundle.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--backend",
        &backend.addr,
        "--workers",
        "1",
    ]);
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

#[test]
fn speed_quick_measures_every_algorithm_and_predicts() {
    let pki = Pki::new();
    let rsa = pki.leaf("rsa.pem", "rsa.test", &["rsa.test"], Key::Rsa2048);
    let (ok, text, err) = speed(&["--quick", "--cores", "4", "--cert", rsa.to_str().unwrap()]);
    assert!(ok, "{err}");
    for row in [
        "sign      rsa2048",
        "sign      rsa3072",
        "sign      rsa4096",
        "sign      p256",
        "sign      p384",
        "sign      ed25519",
        "kx        x25519 ",
        "kx        p256",
        "kx        x25519mlkem768",
        "aead      aes-128-gcm",
        "aead      aes-256-gcm",
        "aead      chacha20-poly1305",
    ] {
        let line = text
            .lines()
            .find(|l| l.contains(row))
            .unwrap_or_else(|| panic!("no {row:?} in {text}"));
        let n: f64 = line.split_whitespace().nth(2).unwrap().parse().unwrap();
        assert!(n > 0.0, "{line}");
    }
    assert_eq!(text.matches(" at 1 KiB").count(), 3, "{text}");
    assert_eq!(text.matches(" at 16 KiB").count(), 3, "{text}");
    assert!(text.contains("prediction for key rsa2048"), "{text}");
    let full = text
        .lines()
        .find(|l| l.trim_start().starts_with("full handshakes/s"))
        .unwrap();
    let cols: Vec<f64> = full
        .split_whitespace()
        .skip(2)
        .map(|x| x.parse().unwrap())
        .collect();
    // Four cores predict four times one core.
    assert!((cols[1] / cols[0] - 4.0).abs() < 0.01, "{full}");
    assert!(text.contains("bulk MB/s"));
}

#[test]
fn tls12_session_id_and_ticket_resumption_in_a_closed_loop() {
    let backend = Backend::start(100);
    let shuck = Shuck::start_flags(&[
        "--self-signed",
        "--listen",
        "127.0.0.1:0",
        "--backend",
        &backend.addr,
        "--workers",
        "1",
    ]);
    let target = shuck.addr().to_string();
    for mode in ["session-id", "ticket"] {
        let v = json(&[
            &target,
            "--insecure",
            "--resume",
            mode,
            "-k",
            "3",
            "-c",
            "2",
            "--duration",
            "1",
            "--step-duration",
            "0.5",
            "--keepalive",
            "2",
            "--expect-size",
            "100",
            "--json",
            "--quiet",
        ]);
        let t = &v["totals"];
        assert_eq!(t["failed"], 0, "{mode}: {v:#}");
        assert!(t["successful"].as_u64().unwrap() >= 10, "{mode}: {v:#}");
        let ratio = t["resumption_ratio"].as_f64().unwrap();
        assert!(
            (ratio - 2.0 / 3.0).abs() < 0.1,
            "{mode}: resumption ratio {ratio}"
        );
        assert_eq!(v["settings"]["protocol"], "TLSv1.2", "{mode}");
        assert_eq!(v["settings"]["mode"], "closed");
        assert_eq!(v["steps"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn ipv6_target_with_alpn_and_sni() {
    let backend = Backend::start(64);
    let shuck = Shuck::start_flags(&[
        "--self-signed",
        "--listen",
        "[::1]:0",
        "--backend",
        &backend.addr,
        "--alpn",
        "http/1.1",
    ]);
    assert!(shuck.addr().is_ipv6());
    let target = format!("[::1]:{}", shuck.port());
    let v = json(&[
        &target,
        "--insecure",
        "--sni",
        "localhost",
        "--alpn",
        "http/1.1",
        "-c",
        "4",
        "--threads",
        "2",
        "--duration",
        "1",
        "--step-duration",
        "1",
        "--expect-size",
        "64",
        "--json",
        "--quiet",
    ]);
    assert_eq!(v["totals"]["failed"], 0, "{v:#}");
    assert!(v["totals"]["successful"].as_u64().unwrap() > 0);
    // Two load threads' histograms merged: one count per successful connection.
    assert_eq!(v["settings"]["threads"], 2);
    let step = &v["steps"][0];
    assert_eq!(step["successful"], v["totals"]["successful"]);
    assert!(
        step["latency_ms"]["max"].as_f64().unwrap() >= step["latency_ms"]["p99"].as_f64().unwrap()
    );
    assert_eq!(v["settings"]["target"], target);
    assert_eq!(v["settings"]["server_name"], "localhost");
    assert_eq!(v["settings"]["alpn"], "http/1.1");
}

#[test]
fn unreachable_or_untrusted_targets_fail_with_the_reason() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let (ok, _, err) = bench(&[&addr, "--insecure", "--duration", "1", "--quiet"]);
    assert!(!ok);
    assert!(
        err.contains("no connection to") && err.contains("connect"),
        "{err}"
    );

    let shuck = Shuck::start_flags(&["--self-signed", "--listen", "127.0.0.1:0"]);
    let pki = Pki::new();
    let (ok, _, err) = bench(&[
        &shuck.addr().to_string(),
        "--ca",
        pki.ca_path().to_str().unwrap(),
        "--duration",
        "1",
        "--quiet",
    ]);
    assert!(!ok);
    assert!(err.contains("handshake"), "{err}");

    let (ok, _, err) = bench(&["--insecure"]);
    assert!(!ok);
    assert!(err.contains("HOST:PORT"), "{err}");
}

/// Absurd numbers get an error naming the flag before any load starts, never a panic (a
/// 1e-20/s rate or a 1e19 s step used to overflow the schedule's clock arithmetic).
#[test]
fn out_of_range_numbers_are_refused_naming_their_flag() {
    for (args, flag) in [
        (
            &["--rate-start", "1e-20", "--rate-max", "1"][..],
            "--rate-start",
        ),
        (
            &["--rate-start", "2e9", "--rate-max", "2e9"][..],
            "--rate-start",
        ),
        (&["--step-duration", "1e19"][..], "--step-duration"),
        (&["--timeout", "1e19"][..], "--timeout"),
        (&["--max-failure-ratio", "0"][..], "--max-failure-ratio"),
        (&["--max-mean-ms", "nan"][..], "--max-mean-ms"),
    ] {
        let mut all = vec!["127.0.0.1:1", "--insecure"];
        all.extend_from_slice(args);
        let (ok, _, err) = bench(&all);
        assert!(!ok, "{args:?} accepted");
        assert!(
            err.contains(flag) && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
}

/// A step's failure ratio is that of its own arrivals: connections that time out seconds later
/// still count against the step that started them, not against whichever step was running
/// when they gave up (which would let an overloaded step pass on a later step's record).
#[test]
fn failures_count_in_the_step_that_started_them() {
    use std::io::{BufRead, BufReader, Write};
    // Answers the probe connection, then holds every later one without answering.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for (i, s) in l.incoming().enumerate() {
            let Ok(mut s) = s else { return };
            if i == 0 {
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut line = String::new();
                while r.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
            } else {
                held.push(s);
            }
        }
    });
    let shuck = Shuck::start_flags(&[
        "--self-signed",
        "--listen",
        "127.0.0.1:0",
        "--backend",
        &backend,
    ]);
    let target = shuck.addr().to_string();
    let v = json(&[
        &target,
        "--insecure",
        "--rate-start",
        "10",
        "--rate-step",
        "10",
        "--rate-max",
        "30",
        "--step-duration",
        "0.5",
        "--timeout",
        "1.2",
        "--json",
        "--quiet",
    ]);
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 3);
    for s in steps {
        assert!(s["attempted"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["failed"], s["attempted"], "{s}");
        assert_eq!(s["successful"], 0, "{s}");
        assert_eq!(s["passes"], false, "{s}");
    }
}
