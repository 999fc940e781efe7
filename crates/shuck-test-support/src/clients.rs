//! Clients: curl and `openssl s_client` through shuck, a loop of requests that runs while a test
//! changes things, a request held open, reading a raw socket to its end, and the metrics
//! endpoint (scrape, sum a metric, wait for a value).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::pki::Pki;
use crate::process::{run_bounded, Shuck};

/// `curl` through shuck: `name` is resolved to shuck's address, verified against the test CA.
pub fn curl(pki: &Pki, shuck: &Shuck, name: &str, path: &str, extra: &[&str]) -> Output {
    curl_at(pki, shuck.addr(), name, path, extra)
}

/// `curl` to one of shuck's addresses.
pub fn curl_at(pki: &Pki, a: SocketAddr, name: &str, path: &str, extra: &[&str]) -> Output {
    let url_host = if a.is_ipv6() {
        format!("[{}]", a.ip())
    } else {
        a.ip().to_string()
    };
    let mut c = Command::new("curl");
    c.args(["-sS", "--max-time", "20", "--cacert"])
        .arg(pki.ca_path())
        .arg("--resolve")
        .arg(format!("{name}:{}:{url_host}", a.port()))
        .args(extra)
        .arg(format!("https://{name}:{}{path}", a.port()));
    run_bounded(&mut c, b"", 30)
}

/// `openssl s_client` through shuck with an HTTP/1.0 request; returns (success, stdout+stderr).
pub fn s_client(pki: &Pki, addr: SocketAddr, sni: Option<&str>, extra: &[&str]) -> (bool, String) {
    let mut c = Command::new("openssl");
    c.arg("s_client")
        .arg("-connect")
        .arg(addr.to_string())
        .arg("-CAfile")
        .arg(pki.ca_path())
        .args(["-verify_return_error", "-ign_eof"]);
    match sni {
        Some(n) => c.args(["-servername", n]),
        None => c.arg("-noservername"),
    };
    c.args(extra);
    let out = run_bounded(&mut c, b"GET /via-openssl HTTP/1.0\r\n\r\n", 30);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success() && text.contains("backend got:"), text)
}

/// The value after `key` on the first line that has it (`s_client` output).
pub fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(key).map(str::trim))
}

/// True when this CPU has AES-NI (so shuck's default prefers AES-128-GCM).
pub fn cpu_has_aes() -> bool {
    std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| {
        c.lines()
            .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "aes"))
    })
}

/// Reads whatever arrives until EOF or error, bounded.
pub fn read_all_bounded(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut v = Vec::new();
    let _ = s.read_to_end(&mut v);
    v
}

/// The Prometheus text from shuck's metrics endpoint.
pub fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("connect metrics");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("write");
    String::from_utf8(read_all_bounded(&mut s)).expect("utf-8")
}

/// Sum of every sample of `name` whose labels contain all of `labels`.
pub fn sum(text: &str, name: &str, labels: &[&str]) -> i64 {
    text.lines()
        // With labels (`name{…} v`) or without (`name v`).
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<i64>().ok())
        .sum()
}

/// `shuck_handshake_failures_total` for one reason, over frontends and workers.
pub fn handshake_failures(text: &str, reason: &str) -> i64 {
    sum(
        text,
        "shuck_handshake_failures_total",
        &[&format!("reason=\"{reason}\"")],
    )
}

/// Scrapes until the sum of `name` over samples with `labels` equals `want` (counters move on
/// shuck's worker threads, a little after the client saw the effect); bounded at 20 s.
pub fn wait_metric(addr: SocketAddr, name: &str, labels: &[&str], want: i64) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = scrape(addr);
        if sum(&text, name, labels) == want || Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Requests through shuck, one after another, until told to stop (at most 3,000 and 2 minutes):
/// how many, and what each failure said.
pub struct ClientLoop<'scope> {
    stop: Arc<AtomicBool>,
    thread: std::thread::ScopedJoinHandle<'scope, (usize, Vec<String>)>,
}

impl<'scope> ClientLoop<'scope> {
    pub fn start<'env>(
        scope: &'scope std::thread::Scope<'scope, 'env>,
        pki: &'env Pki,
        web: SocketAddr,
        name: &'static str,
    ) -> ClientLoop<'scope> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = scope.spawn(move || {
            let (mut done, mut failures) = (0, Vec::new());
            let deadline = Instant::now() + Duration::from_secs(120);
            while !flag.load(Ordering::Relaxed) && done < 3000 && Instant::now() < deadline {
                let out = curl_at(
                    pki,
                    web,
                    name,
                    &format!("/loop{done}"),
                    &["--max-time", "5"],
                );
                if !out.status.success() {
                    failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                }
                done += 1;
            }
            (done, failures)
        });
        ClientLoop { stop, thread }
    }

    pub fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("client loop")
    }
}

/// Waits (bounded) until `check` holds; how long that took.
pub fn within(
    limit: Duration,
    what: &str,
    mut check: impl FnMut() -> bool,
    context: impl Fn() -> String,
) -> Duration {
    let t = Instant::now();
    while !check() {
        assert!(
            t.elapsed() < limit,
            "{what} not within {limit:?}:\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    t.elapsed()
}

/// A connection held open to the backend it got: TLS up with `name`, the request line for `path`
/// sent; the test sends the rest of the request later (the backend answers after the headers).
pub fn held_request(
    pki: &Pki,
    web: SocketAddr,
    name: &str,
    path: &str,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let config = crate::pki::connector(pki).config().clone();
    let server = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
    let conn = rustls::ClientConnection::new(config, server).expect("client");
    let tcp = TcpStream::connect(web).expect("connect");
    tcp.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(format!("GET {path} HTTP/1.1\r\n").as_bytes())
        .expect("request line");
    tls.flush().expect("flush");
    tls
}
