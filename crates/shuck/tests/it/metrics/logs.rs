//! What reaches the log from real traffic: a flood of bad handshakes counted in full but logged
//! sparingly, library lines kept out, the access log in fields or HAProxy's style (read by
//! `halog`), switched on by a reload, and lines lost to a closed pipe counted.

use super::*;

#[test]
fn a_flood_of_bad_handshakes_is_counted_in_full_but_logged_sparingly() {
    let pki = Pki::new();
    let cert = pki.leaf("f.pem", "f", &["f.test"], Key::EcdsaP256);
    let shuck = Shuck::start(&format!(
        "workers = 1\nmetrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    ));
    let garbage = || {
        let mut g = TcpStream::connect(shuck.addrs[0]).expect("connect");
        g.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("write");
        let _ = read_all_bounded(&mut g);
    };
    let started = std::time::Instant::now();
    for _ in 0..200 {
        garbage();
    }
    let flood_secs = started.elapsed().as_secs() + 1;
    // A second later (the log budget's window, a time and not an event), one more: the worker
    // reports how many lines it left out.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    garbage();
    let log = shuck.wait_log("per-connection warnings were left out");
    let lines = log.matches("TLS handshake failed").count();
    let budget = 20 * (flood_secs as usize + 2);
    assert!(
        lines <= budget,
        "{lines} lines for 201 failures in {flood_secs}s: {log}"
    );
    let m = wait_metric(
        shuck.addrs[1],
        "shuck_handshake_failures_total",
        &["reason=\"malformed\""],
        201,
    );
    assert_eq!(
        sum(
            &m,
            "shuck_handshake_failures_total",
            &["reason=\"malformed\""]
        ),
        201,
        "{m}"
    );
}

/// rustls logs a warning for every client that sends an IP address as SNI (`openssl s_client
/// -servername 127.0.0.1` does): a client could write a line per connection at will, without
/// frontend or client in it. At the default level those lines are not written at all; at debug
/// they are, within the per-worker rate limit.
#[test]
fn library_lines_a_client_can_trigger_stay_out_of_the_log() {
    let pki = Pki::new();
    let cert = pki.leaf("s.pem", "s", &["s.test"], Key::EcdsaP256);
    let ip_sni = |shuck: &Shuck, n: usize| {
        for i in 0..n {
            let (_, out) = s_client(&pki, shuck.addrs[0], Some("127.0.0.1"), &[]);
            assert!(
                out.contains("shuck demo backend"),
                "connection {i} with an IP as SNI is still served: {out}"
            );
        }
    };
    let config = |level: &str| {
        format!(
            "workers = 1\nlog_level = \"{level}\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
            toml_path(&cert)
        )
    };
    let shuck = Shuck::start(&config("info"));
    ip_sni(&shuck, 10);
    // A failure of our own after them: once its line is there, theirs would be too.
    let mut g = TcpStream::connect(shuck.addrs[0]).expect("connect");
    g.write_all(b"GET / HTTP/1.0\r\n\r\n").expect("write");
    let _ = read_all_bounded(&mut g);
    let log = shuck.wait_log("TLS handshake failed");
    assert!(!log.contains("Illegal SNI"), "{log}");

    let shuck = Shuck::start(&config("debug"));
    let started = std::time::Instant::now();
    ip_sni(&shuck, 30);
    let log = shuck.wait_log("Illegal SNI");
    let lines = log.matches("Illegal SNI").count();
    let budget = 20 * (started.elapsed().as_secs() as usize + 2);
    assert!(lines >= 1 && lines <= budget, "{lines} lines: {log}");
}

/// `log_connections`: one line per connection with what an access log needs: client, frontend,
/// backend, when the handshake was done and the backend connected (ms after accept), the total,
/// bytes each way, how it ended, TLS version, cipher, SNI, ALPN, resumption; as named fields, as
/// HAProxy's tcplog record, or as the operator's own template.
#[test]
fn log_connections_writes_an_access_log_in_fields_or_haproxy_style() {
    let pki = Pki::new();
    let cert = pki.leaf("a.pem", "a", &["access.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    for (format, needles) in [
        (
            "fields",
            vec![
                "handshake_ms=",
                "connect_ms=",
                "protocol=\"TLSv1.3\"",
                "sni=access.test",
                "alpn=http/1.1",
                "resumed=false",
            ],
        ),
        (
            "{client_ip} [{time}] {{{sni}}} {protocol} {reason} {resumed} {backend} {connect_ms}",
            vec![
                "127.0.0.1 [20",
                "] {access.test} TLSv1.3 - false 127.0.0.1:",
            ],
        ),
        (
            "haproxy",
            vec![
                "] frontend0~ default/",
                " -- ",
                "/0/0/0 0/0 TLSv1.3 TLS13_",
                " access.test",
            ],
        ),
    ] {
        let shuck = Shuck::start(&format!(
            "log_connections = true\nconnection_log_format = \"{format}\"\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\nalpn = [\"http/1.1\"]\n",
            backend.addr,
            toml_path(&cert)
        ));
        let out = curl_at(&pki, shuck.addr(), "access.test", "/logged", &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let log = shuck.wait_log("127.0.0.1:");
        let line = shuck
            .wait_log(&backend.addr.to_string())
            .lines()
            .find(|l| l.contains(&backend.addr.to_string()) && l.contains("access.test"))
            .map_or_else(|| panic!("{format}: {log}"), str::to_string);
        for n in needles {
            assert!(line.contains(n), "{format}: {n:?} not in {line}");
        }
        if format == "haproxy" {
            tcplog_is_read_by_halog(&line, &backend.addr.to_string());
        }
        if format.starts_with('{') {
            // The connect time, a number, ends the line.
            let last = line.rsplit(' ').next().unwrap_or_default();
            assert!(last.parse::<u64>().is_ok(), "{line}");
        }
    }
}

/// HAProxy's own log tool reads the record: `halog -srv` (per-server statistics) parses it as
/// a `tcplog` line (behind the syslog header halog skips) and finds the server; and the fields
/// have tcplog's shapes.
fn tcplog_is_read_by_halog(line: &str, server: &str) {
    let record = &line[line.find("127.0.0.1:").expect("the record")..];
    let f: Vec<&str> = record.split(' ').collect();
    assert!(
        f[0].parse::<std::net::SocketAddr>().is_ok(),
        "client: {record}"
    );
    assert!(
        f[1].starts_with('[') && f[1].ends_with(']') && f[1].contains("/20"),
        "{record}"
    );
    let times: Vec<i64> = f[4]
        .split('/')
        .map(|t| t.parse().expect("Tw/Tc/Tt"))
        .collect();
    assert_eq!(times.len(), 3, "{record}");
    assert!(
        f[5].parse::<u64>().is_ok_and(|b| b > 0),
        "bytes read: {record}"
    );
    assert_eq!(f[6].len(), 2, "termination state: {record}");
    // halog reads HTTP logs first: a tcplog line counts as a "parsing error" for the HTTP
    // fields it lacks, and is still read for its server. So ours is read as HAProxy's own
    // example tcplog line (its configuration manual, 8.2.2) is.
    let halog = shuck_test_support::peers::require("halog", "haproxy");
    let srv = |record: &str| {
        let input = format!("Nov 28 06:52:03 localhost haproxy[1]: {record}\n");
        let out = run_bounded(
            std::process::Command::new(&halog).arg("-srv"),
            input.as_bytes(),
            10,
        );
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (reference, reference_err) =
        srv("10.0.1.2:33313 [06/Feb/2009:12:12:51.443] fnt bck/srv1 0/0/5007 212 -- 0/0/0/0/3 0/0");
    assert!(
        reference.contains("bck/srv1 "),
        "{reference}{reference_err}"
    );
    let (ours, ours_err) = srv(record);
    assert!(
        ours.contains(&format!("default/{server} ")),
        "{ours}{ours_err}"
    );
    assert_eq!(ours_err.trim(), reference_err.trim(), "{ours}");
}

/// The access log is switched on and its format changed by a reload, without a restart: no line
/// before, HAProxy-style lines after; `shutdown_grace` and `certificate_expiry_warning` are
/// applied too (nothing asks for a restart).
#[test]
fn a_reload_switches_the_access_log_on() {
    let pki = Pki::new();
    let cert = pki.leaf("a.pem", "a", &["access.test"], Key::EcdsaP256);
    let backend = HttpBackend::start();
    let config = |global: &str| {
        format!(
            "{global}\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\nalpn = [\"http/1.1\"]\n",
            backend.addr,
            toml_path(&cert)
        )
    };
    let metrics = "metrics_listen = \"127.0.0.1:0\"";
    let shuck = Shuck::start(&config(&format!("log_connections = false\n{metrics}")));
    let request = |path: &str| {
        let out = curl_at(&pki, shuck.addr(), "access.test", path, &[]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    request("/before");
    // Ended in shuck too (its line is decided then), before the reload.
    let text = wait_metric(shuck.addrs[1], "shuck_connections_active", &[], 0);
    assert_eq!(sum(&text, "shuck_connections_active", &[]), 0, "{text}");
    std::fs::write(
        shuck.config_path(),
        config(&format!(
            "log_connections = true\nconnection_log_format = \"haproxy\"\nshutdown_grace = \"3s\"\ncertificate_expiry_warning = \"20days\"\n{metrics}"
        )),
    )
    .unwrap();
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates");
    // Two, so the worker that took the first is not the only one seen to have switched.
    request("/after");
    request("/after");
    let log = shuck.wait_log_count(" 0/0 TLSv1.3 ", 2);
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&backend.addr.to_string()))
        .collect();
    assert_eq!(
        lines.len(),
        2,
        "one line per connection after the reload only: {log}"
    );
    assert!(lines.iter().all(|l| l.contains("] frontend0~ ")), "{log}");
    assert!(!log.contains("restart to apply"), "{log}");
}

/// Standard error closed by its reader (a log shipper that died): the lines shuck could not
/// write are counted in `shuck_log_lines_dropped_total`, and shuck keeps serving. (They were
/// once lost without a count.)
#[test]
fn lines_lost_to_a_closed_log_pipe_are_counted() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, ready) = (dir.path().join("shuck.toml"), dir.path().join("ready"));
    std::fs::write(
        &config,
        "metrics_listen = \"127.0.0.1:0\"\nlog_connections = true\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nself_signed = true\n",
    )
    .expect("config");
    let mut child = Command::new(&*shuck_test_support::process::SHUCK)
        .args(["serve", "--config"])
        .arg(&config)
        .args(shuck_test_support::process::as_root_allowed())
        .arg("--ready-file")
        .arg(&ready)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let addrs = shuck_test_support::process::wait_ready(&ready, 20, String::new);
    drop(child.stderr.take());
    // Each connection is one access log line, now written to a pipe nobody reads.
    for _ in 0..5 {
        let out = run_bounded(
            Command::new("curl")
                .args(["-sSk", "--max-time", "5"])
                .arg(format!("https://{}/", addrs[0])),
            b"",
            20,
        );
        assert!(out.status.success(), "{out:?}");
    }
    let dropped = || sum(&scrape(addrs[1]), "shuck_log_lines_dropped_total", &[]);
    shuck_test_support::clients::within(
        std::time::Duration::from_secs(10),
        "5 access log lines counted as dropped",
        || dropped() >= 5,
        || scrape(addrs[1]),
    );
    let _ = child.kill();
    let _ = child.wait();
}
