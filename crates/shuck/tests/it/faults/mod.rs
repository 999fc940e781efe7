//! The process under faults (docs/reliability.md, "The process under faults"): a log reader that
//! stalls, every signal an operator may send, reloads stuck on I/O, upgrades whose new process
//! dies, and inputs without bounds. Each test drives the real binary on loopback, bounded in
//! time, and counts what a client would see.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shuck_test_support::clients::{scrape, sum};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{as_root_allowed, wait_ready, Shuck, SHUCK};

mod upgrades;

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
    let config = Arc::new(shuck_test_support::pki::client_config(pki));
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
        Self::start_from(Path::new(&*SHUCK), args, stderr, dir)
    }

    /// Started from the binary at `exe` (what `kill -USR2` starts again).
    fn start_from(exe: &Path, args: &[&str], stderr: Stdio, dir: &Path) -> Proc {
        let ready = dir.join(format!("ready-{}", unique()));
        let child = Command::new(exe)
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
    wait_for(needle, bound, || text.lock().expect("log text").clone())
}

/// Waits (bounded) until what `read` returns contains `needle`; returns it.
fn wait_for(needle: &str, bound: Duration, read: impl Fn() -> String) -> String {
    let deadline = Instant::now() + bound;
    loop {
        let t = read();
        if t.contains(needle) {
            return t;
        }
        assert!(Instant::now() < deadline, "never saw {needle:?} in: {t}");
        std::thread::sleep(Duration::from_millis(20));
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
    let dropped = || sum(&scrape(metrics), "shuck_log_lines_dropped_total", &[]);
    shuck_test_support::clients::within(
        Duration::from_secs(20),
        "dropped lines counted",
        || dropped() > 0,
        || scrape(metrics),
    );
    let dropped = dropped();
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

/// Sends `sig` (a name such as "HUP", or a number) to `pid`.
fn kill(sig: &str, pid: u32) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("kill");
    assert!(st.success(), "kill -{sig} {pid}");
}

/// The fields of /proc/PID/stat after the command name (which may hold spaces and ')').
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn alive(pid: u32) -> bool {
    // A zombie has exited: only its entry is left for its parent to reap.
    stat_fields(pid).is_some_and(|f| f.first().is_some_and(|state| state != "Z"))
}

/// Every signal an operator may send out of habit, in turn, to a serving process: none ends it
/// but a stop. USR1 is answered (nothing to reopen), the ones shuck has no use for are ignored
/// with a line each, and QUIT drains and exits like TERM.
#[test]
fn every_signal_is_answered_and_only_a_stop_ends_the_process() {
    let pki = Pki::new();
    let mut shuck = Shuck::start(&config_with(&pki, "", ""));
    let addr = shuck.addr();
    shuck.signal("USR1");
    shuck.wait_log("SIGUSR1: nothing to reopen");
    // Real-time signals by number: 34 is SIGRTMIN and 64 SIGRTMAX on Linux.
    let ignored = [
        "ALRM", "VTALRM", "PROF", "IO", "PWR", "STKFLT", "XCPU", "XFSZ", "34", "40", "64",
    ];
    for sig in ignored {
        shuck.signal(sig);
    }
    shuck.wait_log_count("signal ignored", ignored.len());
    shuck.assert_alive();
    assert_eq!(requests(&pki, addr, 5, 1), 0, "served after the signals");
    let t = Instant::now();
    shuck.signal("QUIT");
    let status = shuck
        .wait_exit(Duration::from_secs(10))
        .unwrap_or_else(|| panic!("QUIT did not stop shuck: {}", shuck.log_text()));
    assert!(status.success(), "{status}: {}", shuck.log_text());
    println!("QUIT: exited in {:?}", t.elapsed());
    let log = shuck.log_text();
    assert!(
        log.contains("signal=\"QUIT\"") || log.contains("signal=QUIT"),
        "{log}"
    );
}

/// Runs `shuck serve` in a mount namespace of its own whose /etc/resolv.conf names a DNS server
/// on 127.0.0.77 that never answers (a UDP socket the test holds and never reads): any backend
/// name shuck resolves waits for the resolver's timeout. Needs root (CI runs as root).
fn start_with_silent_dns(config: &Path, dir: &Path) -> (Child, Vec<SocketAddr>, PathBuf) {
    let resolv = dir.join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 127.0.0.77\noptions timeout:30 attempts:2\n",
    )
    .expect("resolv.conf");
    let ready = dir.join("ready-dns");
    let log = dir.join("shuck-dns.log");
    let script = "mount --bind \"$1\" /etc/resolv.conf && shift && exec \"$@\"";
    let mut child = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(&resolv)
        .arg(&*SHUCK)
        .args(["serve", "--config"])
        .arg(config)
        .args(as_root_allowed())
        .arg("--ready-file")
        .arg(&ready)
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("unshare");
    let addrs = wait_ready(&ready, 30, || {
        if let Some(st) = child.try_wait().expect("try_wait") {
            panic!("shuck exited early ({st}): {}", read(&log));
        }
        read(&log)
    });
    (child, addrs, log)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

fn wait_file(p: &Path, needle: &str, bound: Duration) -> String {
    wait_for(needle, bound, || read(p))
}

/// A reload that waits on a DNS server that never answers: past reload_timeout it is abandoned
/// with one line and the configuration in force serves on; a SIGHUP meanwhile waits its turn, a
/// SIGUSR2 waits until the reload is given up (a reload may change the sockets an upgrade hands
/// over); and TERM is acted on at once while the lookup still hangs.
#[test]
#[ignore = "needs root"]
fn a_reload_stuck_on_dns_is_abandoned_and_never_holds_a_stop() {
    // Root: for a mount namespace with its own resolv.conf.
    shuck_test_support::process::assert_root();
    let _silent = std::net::UdpSocket::bind("127.0.0.77:53").expect("bind the silent DNS server");
    let pki = Pki::new();
    let backend = shuck_test_support::process::HttpBackend::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("shuck.toml");
    let good = config_with(
        &pki,
        "reload_timeout = \"2s\"",
        &format!("backend = \"{}\"", backend.addr),
    );
    std::fs::write(&cfg, &good).expect("config");
    let (mut child, addrs, log) = start_with_silent_dns(&cfg, dir.path());
    let pid = child.id();
    std::fs::write(
        &cfg,
        good.replace(&backend.addr.to_string(), "backend.shuck-test:8080"),
    )
    .expect("stuck config");
    let t = Instant::now();
    kill("HUP", pid);
    // Nothing marks a reload's start (its one line comes at the end): a moment for the signal
    // loop to start it, so that the next HUP meets it under way.
    std::thread::sleep(Duration::from_millis(300));
    kill("HUP", pid);
    kill("USR2", pid);
    wait_file(
        &log,
        "the upgrade starts when it ends",
        Duration::from_secs(5),
    );
    assert!(!read(&log).contains("upgrade: starting"), "{}", read(&log));
    let text = wait_file(&log, "reload abandoned", Duration::from_secs(10));
    // Given up, the reload applies nothing: the upgrade waits no longer. (The new process reads
    // the same configuration and waits on the same DNS server; the TERM below stops it.)
    let text_after = wait_file(&log, "upgrade: starting", Duration::from_secs(5));
    assert!(
        text_after.find("reload abandoned") < text_after.find("upgrade: starting"),
        "{text_after}"
    );
    let abandoned_after = t.elapsed();
    assert!(
        abandoned_after >= Duration::from_secs(2),
        "{abandoned_after:?}"
    );
    assert!(
        text.contains("a reload is under way"),
        "the second HUP waits: {text}"
    );
    assert_eq!(
        requests(&pki, addrs[0], 5, 1),
        0,
        "the old configuration serves on"
    );
    let t = Instant::now();
    kill("TERM", pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "TERM not acted on: {}",
            read(&log)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let stopped = t.elapsed();
    println!("stuck reload: abandoned after {abandoned_after:?}; TERM during the hung lookup: exited in {stopped:?}");
    assert!(
        stopped < Duration::from_secs(1),
        "{stopped:?}: {}",
        read(&log)
    );
    let text = read(&log);
    assert_eq!(text.matches("reload abandoned").count(), 1, "{text}");
}

/// Files that are not regular files are refused at once, by `shuck check` and by a reload:
/// `/dev/zero` (read whole, it took 6 GB in 20 s) and a FIFO nobody writes (it held a reload,
/// and every signal with it, for as long as it stayed empty).
#[test]
fn devices_and_fifos_are_refused_at_once() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = dir.path().join("fifo.pem");
    let st = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(st.success());
    for (path, what) in [
        (Path::new("/dev/zero"), "character device"),
        (fifo.as_path(), "FIFO"),
    ] {
        let cfg = dir.path().join("check.toml");
        std::fs::write(
            &cfg,
            format!(
                "[[frontend]]\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
                toml_path(path)
            ),
        )
        .expect("config");
        let t = Instant::now();
        let out = shuck_test_support::process::run_bounded(
            Command::new(&*SHUCK).arg("check").arg("--config").arg(&cfg),
            b"",
            20,
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(what) && err.contains(&path.display().to_string()),
            "{err}"
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
    let shuck = Shuck::start(&config_with(&pki, "", ""));
    let good = std::fs::read_to_string(shuck.config_path()).expect("config");
    let cert_line = good
        .lines()
        .find(|l| l.starts_with("certificates"))
        .expect("certificates");
    std::fs::write(
        shuck.config_path(),
        good.replace(cert_line, &format!("certificates = {}", toml_path(&fifo))),
    )
    .expect("fifo config");
    shuck.signal("HUP");
    let log = shuck.wait_log_within("reload failed", Duration::from_secs(5));
    assert!(log.contains("FIFO"), "{log}");
    assert_eq!(requests(&pki, shuck.addr(), 3, 1), 0);
}

/// The certificate `--self-signed` serves, as `openssl s_client` prints it.
fn served_certificate(addr: SocketAddr) -> String {
    let out = shuck_test_support::process::run_bounded(
        Command::new("openssl")
            .args(["s_client", "-connect"])
            .arg(addr.to_string()),
        b"",
        20,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let begin = text
        .find("-----BEGIN CERTIFICATE-----")
        .expect("a certificate");
    let end = text.find("-----END CERTIFICATE-----").expect("its end");
    text[begin..end].to_string()
}

/// `--self-signed` serves the same certificate after a SIGHUP: a client that pinned it for a
/// test does not see a new one at every reload.
#[test]
fn the_self_signed_certificate_survives_a_reload() {
    let shuck = Shuck::with()
        .args(&["--self-signed", "--listen", "127.0.0.1:0"])
        .run();
    let before = served_certificate(shuck.addr());
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates and configuration");
    assert_eq!(served_certificate(shuck.addr()), before);
}

/// Health checks' sockets are kept back from `max_connections` with the connections' own: under
/// a low open-files limit, with 100 checked backends and more clients at once than connections
/// fit, no healthy backend is marked down for this host's shortage and no client fails. (Once
/// they were not: 32 of 256 healthy backends marked down with "connect: Too many open files",
/// blamed on the backends, and clients failed after their handshake.)
#[test]
fn health_check_sockets_are_in_the_descriptor_budget() {
    let pki = Pki::new();
    // One backend on every loopback address: 100 members, each its own address.
    let backend =
        shuck_test_support::process::HttpBackend::start_on("0.0.0.0:0".parse().expect("addr"))
            .expect("bind");
    let port = backend.addr.port();
    let members: Vec<String> = (1..=100)
        .map(|i| format!("\"127.0.1.{i}:{port}\""))
        .collect();
    let cfg = config_with(
        &pki,
        "",
        &format!(
            "backend = [{}]\nhealth_check = {{ interval = \"500ms\", timeout = \"500ms\", rise = 1, fall = 2 }}\n",
            members.join(", ")
        ),
    )
    .replace("workers = 2", "workers = 1");
    let shuck = Shuck::with().config(&cfg).nofile(320).run();
    let log = shuck.wait_log("starting");
    // 64 for the process, 5 for the worker and its listener, 100 for the checks: 75 connections.
    assert!(log.contains("max_connections=75"), "{log}");
    let metrics = shuck.addrs[1];
    let up = || sum(&scrape(metrics), "shuck_backend_up", &[]);
    shuck_test_support::clients::within(
        Duration::from_secs(10),
        "every backend up",
        || up() == 100,
        || shuck.log_text(),
    );
    let failed = requests(&pki, shuck.addrs[0], 3000, 120);
    let text = scrape(metrics);
    assert_eq!(failed, 0, "{text}\n{}", shuck.log_text());
    assert_eq!(up(), 100, "{}", shuck.log_text());
    let log = shuck.log_text();
    assert!(!log.contains("backend down"), "{log}");
    assert!(
        !log.contains("out of descriptors"),
        "checks went short: {log}"
    );
    assert_eq!(sum(&text, "shuck_resource_errors_total", &[]), 0, "{text}");
}
