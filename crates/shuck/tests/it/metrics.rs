//! The Prometheus endpoint: counters move with real traffic (curl, openssl, garbage), per worker;
//! the status page in Chromium, the Grafana dashboard's queries, the probes. What reaches the
//! log (the access log, the rate limit, lines lost to a closed pipe) in `logs`.

use std::io::Write;
use std::net::TcpStream;

use shuck_test_support::clients::{
    curl, curl_at, read_all_bounded, s_client, scrape, sum, wait_metric,
};
use shuck_test_support::pki::{connector, toml_path, Key, Pki};
use shuck_test_support::process::{run_bounded, HttpBackend, Shuck};

mod logs;

#[test]
fn counters_follow_real_traffic() {
    let pki = Pki::new();
    let cert = pki.leaf("m.pem", "m", &["m.test"], Key::EcdsaP256);
    let b = HttpBackend::start();
    // Nothing listens there: a port no bind(":0") can be handed.
    let dead = std::net::SocketAddr::from(([127, 0, 0, 1], shuck_test_support::ports::tcp()));
    let shuck = Shuck::start(&format!(
        "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\nmetrics_per_worker = true\n\
         [[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {c}\nunknown_sni = \"reject\"\n\
         [[frontend]]\nname = \"dead\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{dead}\"\ncertificates = {c}\n",
        b.addr,
        c = toml_path(&cert)
    ));
    let (web, dead_fe, metrics) = (shuck.addrs[0], shuck.addrs[1], shuck.addrs[2]);
    let before = scrape(metrics);
    assert!(before.contains("HTTP/1.1 200 OK"), "{before}");
    assert_eq!(sum(&before, "shuck_handshakes_total", &[]), 0, "{before}");

    for i in 0..10 {
        let out = curl(&pki, &shuck, "m.test", &format!("/{i}"), &[]);
        assert!(out.status.success());
    }
    let mut g = TcpStream::connect(web).expect("connect");
    g.write_all(b"GET / HTTP/1\r\n\r\n").expect("write");
    let _ = read_all_bounded(&mut g);
    let (ok, _) = s_client(&pki, web, Some("unknown.test"), &[]);
    assert!(!ok);
    let out = curl_at(&pki, dead_fe, "m.test", "/", &[]);
    assert!(!out.status.success());

    let after = scrape(metrics);
    let web_l = "frontend=\"web\"";
    assert_eq!(
        sum(&after, "shuck_handshakes_total", &[web_l, "kind=\"full\""]),
        10,
        "{after}"
    );
    assert_eq!(
        sum(
            &after,
            "shuck_handshake_failures_total",
            &[web_l, "reason=\"malformed\""]
        ),
        1,
        "{after}"
    );
    assert_eq!(
        sum(
            &after,
            "shuck_handshake_failures_total",
            &[web_l, "reason=\"no_certificate\""]
        ),
        1,
        "{after}"
    );
    assert_eq!(
        sum(
            &after,
            "shuck_backend_errors_total",
            &[
                "frontend=\"dead\"",
                "kind=\"connect\"",
                "route=\"default\"",
                &format!("backend=\"{dead}\"")
            ]
        ),
        1,
        "{after}"
    );
    assert_eq!(
        sum(&after, "shuck_connections_accepted_total", &[web_l]),
        12,
        "{after}"
    );
    // Requests went up and 1 KiB-ish answers came down.
    assert!(sum(&after, "shuck_bytes_total", &[web_l, "direction=\"up\""]) > 0);
    assert!(sum(&after, "shuck_bytes_total", &[web_l, "direction=\"down\""]) > 0);
    // Both workers served some of the 12 connections (per-worker labels).
    for w in ["worker=\"0\"", "worker=\"1\""] {
        assert!(
            sum(&after, "shuck_connections_accepted_total", &[web_l, w]) > 0,
            "{w}: {after}"
        );
    }
    // The gauge drops back to zero once connections are closed.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sum(&scrape(metrics), "shuck_connections_active", &[]) != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "active connections never reached 0"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let not_found = {
        let mut s = TcpStream::connect(metrics).expect("connect");
        s.write_all(b"GET /nope HTTP/1\r\n\r\n").expect("write");
        String::from_utf8(read_all_bounded(&mut s)).expect("utf-8")
    };
    assert!(not_found.starts_with("HTTP/1.1 404"), "{not_found}");
}

/// The two latencies as histograms: every handshake (full and resumed) is timed once, under
/// its kind, and every connection that reached the backend has its connect timed, under that
/// backend; each histogram's buckets add up to its count.
#[test]
fn handshakes_and_backend_connects_are_timed_as_histograms() {
    let pki = Pki::new();
    let cert = pki.leaf("h.pem", "h", &["h.test"], Key::EcdsaP256);
    let b = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n",
        b.addr,
        toml_path(&cert)
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    for i in 0..5 {
        assert!(curl(&pki, &shuck, "h.test", &format!("/{i}"), &[])
            .status
            .success());
    }
    // One full handshake and five resumed ones (TLS 1.2, so the session ID resumes at once).
    let (_, out) = s_client(&pki, web, Some("h.test"), &["-reconnect", "-tls1_2"]);
    assert!(out.contains("Reused, TLSv1.2"), "{out}");
    let handshakes = |kind: &str| {
        sum(
            &wait_metric(
                metrics,
                "shuck_backend_connect_duration_seconds_count",
                &[],
                11,
            ),
            "shuck_handshakes_total",
            &[&format!("kind=\"{kind}\"")],
        )
    };
    let (full, resumed) = (handshakes("full"), handshakes("resumed"));
    assert!(full >= 6 && resumed >= 1, "full {full}, resumed {resumed}");
    let text = scrape(metrics);
    for kind in ["full", "resumed"] {
        let k = format!("kind=\"{kind}\"");
        let count = sum(&text, "shuck_handshake_duration_seconds_count", &[&k]);
        let want = if kind == "full" { full } else { resumed };
        assert_eq!(count, want, "{kind}: {text}");
        let inf = sum(
            &text,
            "shuck_handshake_duration_seconds_bucket",
            &[&k, "le=\"+Inf\""],
        );
        assert_eq!(inf, count, "{text}");
    }
    let backend = format!("backend=\"{}\"", b.addr);
    let connects = sum(
        &text,
        "shuck_backend_connect_duration_seconds_count",
        &[&backend],
    );
    assert_eq!(
        connects,
        full + resumed,
        "every connection reached the backend: {text}"
    );
    // A loopback connect is far under a second: the 1.024 s bucket holds them all.
    let fast = sum(
        &text,
        "shuck_backend_connect_duration_seconds_bucket",
        &[&backend, "le=\"1.024\""],
    );
    assert_eq!(fast, connects, "{text}");
}

/// Headless Chromium (Debian's `chromium`) with a profile of its own, bounded.
fn chromium(args: &[&str]) -> std::process::Output {
    let profile = tempfile::tempdir().expect("profile");
    let mut cmd = std::process::Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        &format!("--user-data-dir={}", profile.path().display()),
    ])
    .args(args);
    run_bounded(&mut cmd, b"", 90)
}

/// The status page at `/` of the metrics listener, as a browser renders it: the frontend's
/// listener, certificate, backend, handshakes by kind and version, resumption share and
/// connections, each the number `/metrics` gives; no external asset; and a screenshot
/// (target/tmp/status-page.png, shown in docs/configuration.md).
#[test]
fn the_status_page_renders_in_chromium_with_the_metrics_numbers() {
    let pki = Pki::new();
    let cert = pki.leaf("status.pem", "status", &["status.test"], Key::EcdsaP256);
    let b = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n",
        b.addr,
        toml_path(&cert)
    ));
    let (web, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    for i in 0..4 {
        assert!(curl(&pki, &shuck, "status.test", &format!("/{i}"), &[])
            .status
            .success());
    }
    let (_, out) = s_client(&pki, web, Some("status.test"), &["-reconnect", "-tls1_2"]);
    assert!(out.contains("Reused"), "{out}");
    let text = wait_metric(metrics, "shuck_connections_active", &[], 0);
    let url = format!("http://{metrics}/");
    let out = chromium(&["--dump-dom", &url]);
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        dom.contains("<h2>frontend web</h2>"),
        "{dom}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = |name: &str, labels: &[&str]| sum(&text, name, labels);
    let accepted = n("shuck_connections_accepted_total", &[]);
    assert!(
        dom.contains(&format!(
            "<b class=\"open\">0</b> open · {accepted} accepted"
        )),
        "{dom}"
    );
    for (kind, version) in [
        ("full", "TLSv1.2"),
        ("full", "TLSv1.3"),
        ("resumed", "TLSv1.2"),
    ] {
        let want = n(
            "shuck_handshakes_total",
            &[
                &format!("kind=\"{kind}\""),
                &format!("version=\"{version}\""),
            ],
        );
        assert!(want > 0, "{kind} {version}: {text}");
    }
    let row = |kind: &str| {
        format!(
            "<tr><th>{kind}</th><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
            n(
                "shuck_handshakes_total",
                &[&format!("kind=\"{kind}\""), "version=\"TLSv1.2\""]
            ),
            n(
                "shuck_handshakes_total",
                &[&format!("kind=\"{kind}\""), "version=\"TLSv1.3\""]
            ),
        )
    };
    assert!(
        dom.contains(&row("full")) && dom.contains(&row("resumed")),
        "{dom}"
    );
    let resumed = n("shuck_handshakes_total", &["kind=\"resumed\""]) as f64;
    let all = n("shuck_handshakes_total", &[]) as f64;
    assert!(
        dom.contains(&format!(
            "<b class=\"resumption\">{:.1}%</b>",
            100.0 * resumed / all
        )),
        "{dom}"
    );
    assert!(dom.contains(&format!("<li>{web}</li>")), "{dom}");
    assert!(
        dom.contains("status.test"),
        "the certificate's names: {dom}"
    );
    let connects = n("shuck_backend_connect_duration_seconds_count", &[]);
    assert!(
        dom.contains(&format!(
            "<tr><td>default</td><td>{}</td><td>enabled</td><td><span class=\"muted\">not checked</span></td><td class=\"num\">{connects}</td>",
            b.addr
        )),
        "{dom}"
    );
    assert!(!dom.contains("://"), "no external asset or link: {dom}");

    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1280,1200",
        &url,
    ]);
    let png = std::fs::read(&shot)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}

/// Every query string in a dashboard, wherever it sits.
fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

/// contrib/grafana/shuck.json queries only metrics a running shuck exports: each name in its
/// expressions is a sample or a family (by its TYPE line, which names a counter without
/// `_total` in OpenMetrics and with it in the text format 0.0.4) of the scrape.
#[test]
fn the_grafana_dashboard_queries_only_metrics_shuck_exports() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/grafana/shuck.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("JSON");
    let mut all = Vec::new();
    exprs(&dashboard, &mut all);
    assert!(all.len() >= 15, "{all:?}");
    let shuck = Shuck::start(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nself_signed = true\n",
    );
    let text = scrape(shuck.addrs[1]);
    let mut names: Vec<&str> = all
        .iter()
        .flat_map(|e| e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| w.starts_with("shuck_") || w.starts_with("process_"))
        .collect();
    names.sort_unstable();
    names.dedup();
    let missing: Vec<&&str> = names
        .iter()
        .filter(|n| {
            let base = ["_bucket", "_count", "_sum", "_total"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(n);
            !text.lines().any(|l| {
                l.starts_with(&format!("{n}{{"))
                    || l.starts_with(&format!("{n} "))
                    || l.starts_with(&format!("# TYPE {base} "))
                    || l.starts_with(&format!("# TYPE {n} "))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "queried but not exported: {missing:?}\n{text}"
    );
    assert!(names.len() >= 15, "{names:?}");
}

/// `curl` against the metrics listener: status code and body.
fn probe(addr: std::net::SocketAddr, extra: &[&str], path: &str) -> (String, String) {
    let out = run_bounded(
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "-o", "-", "-w", "\n%{http_code}"])
            .args(extra)
            .arg(format!("http://{addr}{path}")),
        b"",
        20,
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("a status code");
    if code == "000" {
        // No answer: what curl says is the only clue to why (it failed once under load).
        eprintln!(
            "curl {path}: no answer: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (code.to_string(), body.to_string())
}

/// What a balancer or a Kubernetes probe asks of the metrics listener: `/healthz` and
/// `/readyz` (503 once the process drains, while the endpoint still answers), `HEAD` and query
/// strings on `/metrics`; other methods and paths are refused with the usual codes.
#[test]
fn probes_answer_on_the_metrics_listener_and_readiness_ends_with_the_drain() {
    let pki = Pki::new();
    let cert = pki.leaf("p.pem", "p", &["p.test"], Key::EcdsaP256);
    let b = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        // The half-sent handshake below holds the drain for its handshake_timeout: long enough
        // for a loaded CI machine (it once took longer than the default 10 s to probe).
        "metrics_listen = \"127.0.0.1:0\"\nshutdown_grace = \"60s\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\nhandshake_timeout = \"60s\"\n",
        b.addr,
        toml_path(&cert)
    ));
    let m = shuck.addrs[1];
    assert_eq!(probe(m, &[], "/healthz"), ("200".into(), "ok\n".into()));
    assert_eq!(probe(m, &[], "/readyz"), ("200".into(), "ready\n".into()));
    let (code, body) = probe(m, &[], "/metrics?name[]=shuck_connections_accepted");
    assert_eq!(code, "200");
    assert!(body.contains("shuck_connections_accepted"), "{body}");
    let (code, body) = probe(m, &["-I"], "/metrics");
    assert_eq!(code, "200");
    assert!(
        body.contains("Content-Length:") && !body.contains("# TYPE"),
        "{body}"
    );
    assert_eq!(probe(m, &["-X", "POST"], "/readyz").0, "405");
    // The process metrics every exporter has, and the build, in the same scrape.
    let text = scrape(m);
    for name in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
        "process_cpu_seconds_total",
    ] {
        let value = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .and_then(|v| v.parse::<f64>().ok());
        assert!(value.is_some_and(|v| v >= 0.0), "{name}: {text}");
    }
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert_eq!(
        sum(&text, "shuck_build_info", &[&version, "rustls=\"0.23."]),
        1,
        "{text}"
    );
    // The text format 0.0.4 by default (no `# EOF`); OpenMetrics, with its one `# EOF`, asked for.
    assert_eq!(text.matches("# EOF").count(), 0, "{text}");
    let (_, open) = probe(
        m,
        &["-H", "Accept: application/openmetrics-text"],
        "/metrics",
    );
    assert_eq!(open.matches("# EOF").count(), 1, "{open}");
    assert_eq!(probe(m, &[], "/nothing").0, "404");
    // An open connection keeps the drain going; the endpoint still answers, not ready.
    let mut open = TcpStream::connect(shuck.addr()).expect("connect");
    open.write_all(b"\x16").expect("a first byte");
    shuck.signal("TERM");
    shuck.wait_log("shutting down");
    assert_eq!(
        probe(m, &[], "/readyz"),
        ("503".into(), "draining\n".into())
    );
    assert_eq!(probe(m, &[], "/healthz").0, "200");
}

/// Time for one `GET /healthz` on a fresh connection from 127.0.0.1, answered 200.
fn healthz_took(m: std::net::SocketAddr) -> std::time::Duration {
    use std::io::Read;
    let t = std::time::Instant::now();
    let mut s = TcpStream::connect(m).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    t.elapsed()
}

/// 200 connections that never send a request, from another address and then from the
/// prober's own, do not keep `/healthz` from answering at once: a liveness probe failing
/// there restarts a healthy process. (Slots were once taken before the request arrived: 200
/// silent connections made `/healthz` time out for 10 s.)
#[test]
fn silent_connections_do_not_keep_probes_out_of_the_metrics_listener() {
    let shuck = Shuck::start(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nself_signed = true\n",
    );
    let m = shuck.addrs[1];
    for source in [[127, 0, 0, 2], [127, 0, 0, 1]] {
        let silent: Vec<TcpStream> = (0..200)
            .map(|_| {
                let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                    .expect("socket");
                s.bind(&std::net::SocketAddr::from((source, 0)).into())
                    .expect("bind");
                s.connect(&m.into()).expect("connect");
                s.into()
            })
            .collect();
        let mut took: Vec<std::time::Duration> = (0..5).map(|_| healthz_took(m)).collect();
        took.sort();
        eprintln!("/healthz with 200 silent connections from {source:?}: {took:?}");
        assert!(
            took[2] < std::time::Duration::from_millis(100)
                && took[4] < std::time::Duration::from_secs(1),
            "with 200 silent connections from {source:?}: {took:?}"
        );
        drop(silent);
    }
    let (code, _) = probe(m, &[], "/metrics");
    assert_eq!(code, "200");
}

/// Byte counters move while a connection is open, not only when it closes: a long download
/// (or a WebSocket) must show up in throughput graphs as it happens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn byte_counters_move_while_the_connection_is_open() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let pki = Pki::new();
    let cert = pki.leaf("m.pem", "m", &["m.test"], Key::EcdsaP256);
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let backend = l.local_addr().expect("addr");
    let (done_tx, done) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.expect("accept");
        let mut req = [0u8; 5];
        s.read_exact(&mut req).await.expect("request");
        s.write_all(&vec![7u8; 64 * 1024]).await.expect("answer");
        // Hold the connection open until the test has scraped.
        let _ = done.await;
    });
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = {}\n",
        toml_path(&cert)
    ));
    let tcp = tokio::net::TcpStream::connect(shuck.addrs[0])
        .await
        .expect("connect");
    let mut tls = connector(&pki)
        .connect(
            rustls::pki_types::ServerName::try_from("m.test").expect("name"),
            tcp,
        )
        .await
        .expect("handshake");
    tls.write_all(b"hello").await.expect("write");
    let mut got = vec![0u8; 64 * 1024];
    tls.read_exact(&mut got)
        .await
        .expect("64 KiB through shuck");
    let metrics = shuck.addrs[1];
    let text = tokio::task::spawn_blocking(move || {
        wait_metric(
            metrics,
            "shuck_bytes_total",
            &["direction=\"down\""],
            65_536,
        )
    })
    .await
    .expect("scrape");
    assert_eq!(
        sum(&text, "shuck_bytes_total", &["direction=\"down\""]),
        65_536,
        "{text}"
    );
    assert_eq!(
        sum(&text, "shuck_bytes_total", &["direction=\"up\""]),
        5,
        "{text}"
    );
    let _ = done_tx.send(());
}
