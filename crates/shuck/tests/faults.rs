//! The process under faults (docs/reliability.md, "The process under faults"): a log reader that
//! stalls, every signal an operator may send, reloads stuck on I/O, upgrades whose new process
//! dies, and inputs without bounds. Each test drives the real binary on loopback, bounded in
//! time, and counts what a client would see.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::clients::{sum, wait_metric};
use common::pki::{toml_path, Key, Pki};
use common::process::{as_root_allowed, wait_ready, SHUCK};

/// One request for the demo page with a rustls client; true when the answer came.
fn demo_request(config: &Arc<rustls::ClientConfig>, addr: SocketAddr) -> bool {
    let Ok(tcp) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) else {
        return false;
    };
    let _ = tcp.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = tcp.set_write_timeout(Some(Duration::from_secs(5)));
    let name = rustls::pki_types::ServerName::try_from("faults.test").expect("name");
    let conn = rustls::ClientConnection::new(config.clone(), name).expect("client");
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    if tls.write_all(b"GET / HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut answer = Vec::new();
    let _ = tls.read_to_end(&mut answer);
    answer.starts_with(b"HTTP/1.")
}

/// `n` demo requests from `threads` clients at once; how many failed.
fn requests(pki: &Pki, addr: SocketAddr, n: usize, threads: usize) -> usize {
    let config = Arc::new(common::pki::client_config(pki));
    let failed = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (config, failed, next) = (config.clone(), failed.clone(), next.clone());
            std::thread::spawn(move || {
                while next.fetch_add(1, Ordering::Relaxed) < n {
                    if !demo_request(&config, addr) {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("client thread");
    }
    failed.load(Ordering::Relaxed)
}

/// Connections that send plain text to the TLS port: each is a warning shuck writes (within its
/// rate limit).
fn garbage(addr: SocketAddr, n: usize) {
    for _ in 0..n {
        if let Ok(mut s) = TcpStream::connect(addr) {
            let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = s.read(&mut [0u8; 64]);
        }
    }
}

/// A `shuck serve` whose standard error goes where the test says, killed on drop.
struct Proc {
    child: Child,
    addrs: Vec<SocketAddr>,
}

impl Proc {
    fn start(args: &[&str], stderr: Stdio, dir: &Path) -> Proc {
        let ready = dir.join(format!("ready-{}", unique()));
        let child = Command::new(SHUCK)
            .arg("serve")
            .args(args)
            .args(as_root_allowed())
            .arg("--ready-file")
            .arg(&ready)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("spawn shuck");
        let mut p = Proc {
            child,
            addrs: Vec::new(),
        };
        p.addrs = wait_ready(&ready, 30, || {
            if let Some(st) = p.child.try_wait().expect("try_wait") {
                panic!("shuck exited early: {st}");
            }
            "shuck".into()
        });
        p
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unique() -> u64 {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed) as u64
}

fn config_with(pki: &Pki, extra_global: &str, extra_frontend: &str) -> String {
    let cert = pki.leaf("faults.pem", "faults", &["faults.test"], Key::EcdsaP256);
    format!(
        "workers = 2\nmetrics_listen = \"127.0.0.1:0\"\n{extra_global}\n[[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n{extra_frontend}\n",
        toml_path(&cert)
    )
}

/// Reads `reader` on a thread into a shared buffer (the reader resumes).
fn drain_into(mut reader: impl Read + Send + 'static) -> Arc<std::sync::Mutex<String>> {
    let text = Arc::new(std::sync::Mutex::new(String::new()));
    let t = text.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            t.lock()
                .expect("log text")
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

fn wait_text(text: &std::sync::Mutex<String>, needle: &str, bound: Duration) -> String {
    let deadline = Instant::now() + bound;
    loop {
        let t = text.lock().expect("log text").clone();
        if t.contains(needle) {
            return t;
        }
        assert!(Instant::now() < deadline, "never saw {needle:?} in: {t}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A reader of standard error that stops reading (a paused `tail`, journald under pressure)
/// must not stop the workers: 2,000 logged connections and a flood of garbage are all served,
/// the lines that did not fit are dropped and counted, and once the reader reads again the log
/// says how many were dropped and carries on.
#[test]
fn a_stalled_log_reader_never_blocks_a_connection() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("shuck.toml");
    std::fs::write(
        &cfg,
        config_with(&pki, "log_connections = true\nlog_queue_lines = 256", ""),
    )
    .expect("config");
    // The test holds the pipe's read end and does not read it: the 64 KiB pipe fills.
    let (reader, writer) = std::io::pipe().expect("pipe");
    let shuck = Proc::start(
        &["--config", cfg.to_str().expect("utf-8")],
        Stdio::from(writer),
        dir.path(),
    );
    let (addr, metrics) = (shuck.addrs[0], shuck.addrs[1]);
    let flood = std::thread::spawn(move || garbage(addr, 300));
    let failed = requests(&pki, addr, 2000, 4);
    flood.join().expect("garbage flood");
    assert_eq!(failed, 0, "connections failed while the log reader stalled");
    let text = wait_metric(metrics, "shuck_log_lines_dropped_total", &[], 1);
    let dropped = sum(&text, "shuck_log_lines_dropped_total", &[]);
    println!("stalled reader: 2000 logged connections and 300 garbage ones served, {dropped} lines dropped");
    // The reader resumes: the summary line comes, then new connections are logged again.
    let log = drain_into(reader);
    wait_text(&log, "log lines were dropped", Duration::from_secs(10));
    let before = log
        .lock()
        .expect("log")
        .matches("connection closed")
        .count();
    assert_eq!(requests(&pki, addr, 5, 1), 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    while log
        .lock()
        .expect("log")
        .matches("connection closed")
        .count()
        < before + 5
    {
        assert!(Instant::now() < deadline, "logging did not resume");
        std::thread::sleep(Duration::from_millis(50));
    }
}
