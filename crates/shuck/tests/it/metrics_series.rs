//! How many series a frontend costs: by default the workers are summed into one series per
//! frontend (`metrics_per_worker = false`), which a reload turns into one per worker; the sums
//! are the per-worker counts added up, and the count stays under a stated bound.

use shuck_test_support::clients::{curl, scrape, sum, wait_metric};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{HttpBackend, Shuck};

/// Series a frontend with one backend exports with the workers summed, whatever their number
/// (docs/configuration.md, `metrics_per_worker`).
const SERIES_PER_FRONTEND: usize = 130;

fn series_of(text: &str, frontend: &str) -> usize {
    let label = format!("frontend=\"{frontend}\"");
    text.lines()
        .filter(|l| l.starts_with("shuck_") && l.contains(&label))
        .count()
}

#[test]
fn workers_are_summed_by_default_and_apart_on_request() {
    let pki = Pki::new();
    let cert = pki.leaf("s.pem", "s", &["s.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let config = |per_worker: bool| {
        format!(
            "workers = 4\nmetrics_listen = \"127.0.0.1:0\"\nmetrics_per_worker = {per_worker}\n\
             [[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n",
            backend.addr,
            toml_path(&cert)
        )
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shuck.toml");
    std::fs::write(&path, config(false)).expect("config");
    let shuck = Shuck::with()
        .args(&["--config", path.to_str().expect("utf-8")])
        .run();
    for i in 0..24 {
        assert!(curl(&pki, &shuck, "s.test", &format!("/{i}"), &[])
            .status
            .success());
    }
    let metrics = *shuck.addrs.last().expect("metrics");
    let summed = wait_metric(metrics, "shuck_handshakes_total", &[], 24);
    assert!(!summed.contains("worker=\""), "{summed}");
    let accepted = sum(
        &summed,
        "shuck_connections_accepted_total",
        &["frontend=\"web\""],
    );
    assert_eq!(accepted, 24, "{summed}");
    let n = series_of(&summed, "web");
    assert!(
        n <= SERIES_PER_FRONTEND,
        "{n} series for one frontend:\n{summed}"
    );
    assert!(summed.contains("\nshuck_connections_limit "), "{summed}");
    // One series per worker after a reload asks for them; the same totals.
    std::fs::write(&path, config(true)).expect("config");
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates and configuration");
    let apart = scrape(metrics);
    let per_worker: Vec<i64> = (0..4)
        .map(|w| {
            let label = format!("worker=\"{w}\"");
            sum(
                &apart,
                "shuck_connections_accepted_total",
                &["frontend=\"web\"", &label],
            )
        })
        .collect();
    assert_eq!(
        per_worker.iter().sum::<i64>(),
        24,
        "{per_worker:?}\n{apart}"
    );
    assert!(series_of(&apart, "web") > 3 * n, "{apart}");
}

/// Backend errors name the backend: a connection that tried two dead backends counts one
/// failed connect for each; a route's own backends carry its name.
#[test]
fn backend_errors_name_each_backend_tried() {
    let pki = Pki::new();
    let cert = pki.leaf("b.pem", "b", &["b.test"], Key::EcdsaP256);
    // Nothing listens there: ports no bind(":0") can be handed.
    let dead = || std::net::SocketAddr::from(([127, 0, 0, 1], shuck_test_support::ports::tcp()));
    let (one, two) = (dead(), dead());
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
         backend = [\"{one}\", \"{two}\"]\ncertificates = {}\n",
        toml_path(&cert)
    ));
    assert!(!curl(&pki, &shuck, "b.test", "/", &[]).status.success());
    let metrics = *shuck.addrs.last().expect("metrics");
    let text = wait_metric(
        metrics,
        "shuck_backend_errors_total",
        &["kind=\"connect\""],
        2,
    );
    for b in [one, two] {
        let label = format!("backend=\"{b}\"");
        let n = sum(
            &text,
            "shuck_backend_errors_total",
            &["kind=\"connect\"", "route=\"default\"", &label],
        );
        assert_eq!(n, 1, "{b}: {text}");
    }
}

/// `GET /metrics` with `Accept`, raw: the Content-Type and the body.
fn fetch(metrics: std::net::SocketAddr, accept: Option<&str>) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(metrics).expect("connect");
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(s, "GET /metrics HTTP/1.1\r\nHost: m\r\n{accept}\r\n").expect("request");
    let mut answer = String::new();
    s.read_to_string(&mut answer).expect("answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .expect("Content-Type")
        .to_string();
    (content_type, body.to_string())
}

/// `/metrics` speaks the Prometheus text format 0.0.4 unless the scraper asks for OpenMetrics
/// (as Prometheus servers do); Debian's promtool, which cannot read OpenMetrics' `info` type,
/// accepts the first.
#[test]
fn metrics_are_negotiated_and_promtool_accepts_the_text_format() {
    let pki = Pki::new();
    let cert = pki.leaf("n.pem", "n", &["n.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\n\
         backend = \"{}\"\ncertificates = {}\n",
        backend.addr,
        toml_path(&cert)
    ));
    assert!(curl(&pki, &shuck, "n.test", "/", &[]).status.success());
    let metrics = *shuck.addrs.last().expect("metrics");
    let (content_type, text) = fetch(metrics, None);
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    assert!(
        !text.contains("# EOF") && !text.contains("# UNIT"),
        "{text}"
    );
    assert!(text.contains("# TYPE shuck_build_info gauge"), "{text}");
    let promtool = shuck_test_support::peers::require("promtool", "prometheus");
    let out = shuck_test_support::process::run_bounded(
        std::process::Command::new(promtool).args(["check", "metrics"]),
        text.as_bytes(),
        30,
    );
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let asked = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3";
    let (content_type, open) = fetch(metrics, Some(asked));
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(open.ends_with("# EOF\n"), "{open}");
    assert!(open.contains("# TYPE shuck_build info"), "{open}");
}
