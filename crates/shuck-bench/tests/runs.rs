//! `shuck bench` and `shuck speed` through the library (`cli::load_report`, `cli::speed_report`):
//! closed-loop TLS 1.2 resumption, IPv6 with ALPN and SNI, failures per started step, errors that
//! name their cause or flag, and the crypto speed table. The server is the engine started
//! in-process (crates/shuck-test-support/src/harness.rs), the backend shuck-bench's own. The end-to-end
//! run through the `shuck` binary (plots, compare, --server-pid, speed --bench-json) is
//! crates/shuck/tests/it/bench.rs.

// Helpers outside #[test] functions too: a panic there is the test's failure report.
#![allow(clippy::unwrap_used)]

use shuck_test_support::harness;

use std::net::SocketAddr;

use clap::Parser;
use harness::Running;
use shuck_bench::cli::{load_report, speed_report, RunArgs, SpeedArgs};
use shuck_bench::speed;
use shuck_test_support::pki::{Key, Pki};

/// `shuck bench`'s arguments, parsed as the binary parses them.
#[derive(Parser)]
struct Bench {
    #[command(flatten)]
    args: RunArgs,
}

/// `shuck speed`'s arguments.
#[derive(Parser)]
struct Speed {
    #[command(flatten)]
    args: SpeedArgs,
}

/// `shuck bench ARGS` run by the library: the report as its JSON, or the error's message.
fn bench(args: &[&str]) -> Result<serde_json::Value, String> {
    let parsed = Bench::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    let report = load_report(&parsed.args).map_err(|e| e.to_string())?;
    Ok(serde_json::from_str(&report.json()).expect("the report's JSON"))
}

fn json(args: &[&str]) -> serde_json::Value {
    bench(args).unwrap_or_else(|e| panic!("shuck bench failed: {e}"))
}

/// The engine with one self-signed frontend on `listen` relaying to `backend`: `global` keys
/// first, `frontend` keys in the frontend.
fn self_signed(global: &str, listen: &str, backend: SocketAddr, frontend: &str) -> Running {
    Running::start(&format!(
        "{global}\n[[frontend]]\nlisten = \"{listen}\"\nbackend = \"{backend}\"\nself_signed = true\n{frontend}\n"
    ))
}

#[test]
fn speed_quick_measures_every_algorithm_and_predicts() {
    let pki = Pki::new();
    let rsa = pki.leaf("rsa.pem", "rsa.test", &["rsa.test"], Key::Rsa2048);
    let report = Speed::try_parse_from([
        "speed",
        "--quick",
        "--cores",
        "4",
        "--cert",
        rsa.to_str().unwrap(),
    ])
    .map(|s| speed_report(&s.args).map(|(r, _)| r))
    .expect("arguments")
    .expect("shuck speed");
    let text = speed::text(&report);
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
    let backend = shuck_bench::backend::spawn(100).expect("backend");
    let shuck = self_signed("workers = 1", "127.0.0.1:0", backend, "");
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
    let backend = shuck_bench::backend::spawn(64).expect("backend");
    let shuck = self_signed("", "[::1]:0", backend, "alpn = [\"http/1.1\"]");
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
    // Nothing listens there: a port no bind(":0") can be handed.
    let addr = format!("127.0.0.1:{}", shuck_test_support::ports::tcp());
    let err = bench(&[&addr, "--insecure", "--duration", "1", "--quiet"]).expect_err("no server");
    assert!(
        err.contains("no connection to") && err.contains("connect"),
        "{err}"
    );

    // No backend: the demo page would answer, but the handshake fails first.
    let shuck = Running::start("[[frontend]]\nlisten = \"127.0.0.1:0\"\nself_signed = true\n");
    let pki = Pki::new();
    let err = bench(&[
        &shuck.addr().to_string(),
        "--ca",
        pki.ca_path().to_str().unwrap(),
        "--duration",
        "1",
        "--quiet",
    ])
    .expect_err("a certificate the CA did not sign");
    assert!(err.contains("handshake"), "{err}");

    let err = bench(&["--insecure"]).expect_err("no target");
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
        // In-process, a panic would fail this test outright.
        let err = bench(&all).expect_err(&format!("{args:?} accepted"));
        assert!(err.contains(flag), "{args:?}: {err}");
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
    let backend = l.local_addr().unwrap();
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
    let shuck = self_signed("", "127.0.0.1:0", backend, "");
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
