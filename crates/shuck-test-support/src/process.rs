//! Processes: the real `shuck` binary started on port 0 with a ready file (killed on drop), a
//! tiny HTTP backend on a thread, and `run_bounded` for any command with a time limit.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The `shuck` binary the tests drive: `SHUCK_BIN` if set, else the one cargo built beside the
/// running test (its executable is in `target/<profile>/deps/`, the binary in
/// `target/<profile>/`), what cargo's `CARGO_BIN_EXE_shuck` names, found at run time since a
/// library cannot read that. Checked to exist, so a different layout fails with its path.
pub static SHUCK: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let path = std::env::var_os("SHUCK_BIN").map_or_else(
        || {
            let exe = std::env::current_exe().expect("the test's own path");
            let dir = exe
                .parent()
                .and_then(Path::parent)
                .expect("target/<profile>/deps");
            dir.join("shuck")
        },
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "no shuck binary at {} (set SHUCK_BIN to its path)",
        path.display()
    );
    path.to_string_lossy().into_owned()
});

/// A running `shuck serve`, killed on drop.
pub struct Shuck {
    child: Child,
    pub addrs: Vec<SocketAddr>,
    pub log: PathBuf,
    dir: tempfile::TempDir,
}

/// How to start a shuck under test: a configuration file (or none: flags only), more
/// arguments, an open-files limit it cannot raise, environment variables. `Shuck::start` is
/// the common case.
#[derive(Debug, Default)]
pub struct Start {
    config: Option<String>,
    args: Vec<String>,
    nofile: Option<u32>,
    env: Vec<(String, String)>,
    /// Started as root, do not add `--allow-root` (the test sees what a root start does).
    as_root_does: bool,
    /// Started as this user and group instead (through `setpriv`), as an operator without root
    /// would.
    user: Option<(String, String)>,
}

impl Start {
    /// `--config` with this TOML, written to the test's directory.
    #[must_use]
    pub fn config(mut self, toml: &str) -> Start {
        self.config = Some(toml.to_string());
        self
    }

    /// More arguments to `shuck serve` (flags alone, without `config`, serve the one-frontend
    /// flags).
    #[must_use]
    pub fn args(mut self, args: &[&str]) -> Start {
        self.args.extend(args.iter().map(|a| (*a).to_string()));
        self
    }

    /// The open-files limit (soft and hard) set first, so shuck cannot raise it.
    #[must_use]
    pub fn nofile(mut self, n: u32) -> Start {
        self.nofile = Some(n);
        self
    }

    /// An environment variable for shuck.
    #[must_use]
    pub fn env(mut self, key: &str, value: &str) -> Start {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Without the `--allow-root` the tests add when they run as root: shuck does what it does
    /// when an operator starts it as root.
    #[must_use]
    pub fn as_root_does(mut self) -> Start {
        self.as_root_does = true;
        self
    }

    /// Started as `user` and `group` (no supplementary groups), through `setpriv`.
    #[must_use]
    pub fn as_user(mut self, user: &str, group: &str) -> Start {
        self.user = Some((user.to_string(), group.to_string()));
        self
    }

    /// Starts it and waits for the ready file.
    pub fn run(self) -> Shuck {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut args = Vec::new();
        if let Some(config) = &self.config {
            let cfg = dir.path().join("shuck.toml");
            std::fs::write(&cfg, config).expect("write config");
            args.push("--config".to_string());
            args.push(cfg.to_str().expect("utf-8 path").to_string());
        }
        args.extend(self.args);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let how = How {
            nofile: self.nofile,
            allow_root: !self.as_root_does && self.user.is_none(),
            user: self.user,
        };
        Shuck::spawn(dir, &args, &how, &env)
    }
}

/// How the process is started.
struct How {
    nofile: Option<u32>,
    allow_root: bool,
    user: Option<(String, String)>,
}

impl Shuck {
    /// Starts `shuck serve --config <toml>` and waits for the ready file.
    pub fn start(config: &str) -> Shuck {
        Shuck::with().config(config).run()
    }

    /// Any other start: `Shuck::with().args(..).nofile(..).run()`.
    pub fn with() -> Start {
        Start::default()
    }

    fn spawn(dir: tempfile::TempDir, args: &[&str], how: &How, env: &[(&str, &str)]) -> Shuck {
        if running_as_root() {
            // A shuck that drops root (`user`) writes its ready file as that user.
            use std::os::unix::fs::PermissionsExt;
            let open = std::fs::Permissions::from_mode(0o1777);
            std::fs::set_permissions(dir.path(), open).expect("chmod test dir");
        }
        let ready = dir.path().join("ready");
        let log = dir.path().join("shuck.log");
        let mut cmd = match (how.nofile, &how.user) {
            (None, None) => Command::new(&*SHUCK),
            (Some(n), None) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(&*SHUCK);
                c
            }
            (_, Some((user, group))) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={user}"),
                    &format!("--regid={group}"),
                    "--clear-groups",
                    "--",
                ])
                .arg(&*SHUCK);
                c
            }
        };
        let allow_root: &[&str] = if how.allow_root {
            as_root_allowed()
        } else {
            &[]
        };
        let child = cmd
            .arg("serve")
            .args(args)
            .args(allow_root)
            .arg("--ready-file")
            .arg(&ready)
            // The configuration's log_level decides (info unless a test sets it), not the
            // environment the tests run in.
            .env_remove("RUST_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn shuck");
        let mut s = Shuck {
            child,
            addrs: Vec::new(),
            log,
            dir,
        };
        s.addrs = wait_ready(&ready, 30, || {
            if let Some(status) = s.child.try_wait().expect("try_wait") {
                panic!("shuck exited early ({status}): {}", s.log_text());
            }
            format!("shuck: {}", s.log_text())
        });
        s
    }

    /// The configuration file `start` wrote (rewrite it, then `signal("HUP")` to reload).
    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("shuck.toml")
    }

    /// Sends a signal by name ("HUP", "TERM").
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(st.success());
    }

    /// Waits (bounded) until `needle` appears `n` times in the log.
    pub fn wait_log_count(&self, needle: &str, n: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let t = self.log_text();
            if t.matches(needle).count() >= n {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "log never had {n}x {needle:?}: {t}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits at most `bound` for the process to exit on its own; its status if it did.
    pub fn wait_exit(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + bound;
        while Instant::now() < deadline {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    pub fn port(&self) -> u16 {
        self.addrs[0].port()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().expect("try_wait").is_none(),
            "shuck died: {}",
            self.log_text()
        );
    }

    /// Waits (bounded) until the log contains `needle`.
    pub fn wait_log(&self, needle: &str) -> String {
        self.wait_log_within(needle, Duration::from_secs(20))
    }

    /// Waits at most `bound` until the log contains `needle`.
    pub fn wait_log_within(&self, needle: &str, bound: Duration) -> String {
        let deadline = Instant::now() + bound;
        loop {
            let t = self.log_text();
            if t.contains(needle) {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "log never contained {needle:?}: {t}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status and the log.
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                return (st, self.log_text());
            }
            assert!(Instant::now() < deadline, "shuck did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Shuck {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tiny HTTP/1.x backend on a thread: answers every request with `backend got: <request line>`
/// and closes. Stops when dropped.
pub struct HttpBackend {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    /// Requests answered so far.
    pub served: Arc<std::sync::atomic::AtomicUsize>,
}

impl HttpBackend {
    pub fn start() -> HttpBackend {
        HttpBackend::serve(TcpListener::bind("127.0.0.1:0").expect("bind backend"))
    }

    /// One on `addr`; `None` when it cannot be bound (the port is taken on that address).
    pub fn start_on(addr: SocketAddr) -> Option<HttpBackend> {
        TcpListener::bind(addr).ok().map(HttpBackend::serve)
    }

    fn serve(l: TcpListener) -> HttpBackend {
        let addr = l.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = served.clone();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let counter = counter.clone();
                std::thread::spawn(move || {
                    let mut r = BufReader::new(conn.try_clone().expect("clone"));
                    let mut first = String::new();
                    if r.read_line(&mut first).is_err() {
                        return;
                    }
                    loop {
                        let mut line = String::new();
                        match r.read_line(&mut line) {
                            Ok(0) | Err(_) => break,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let body = format!("backend got: {}", first.trim_end());
                    counter.fetch_add(1, Ordering::Relaxed);
                    let mut w = conn;
                    let _ = write!(
                        w,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                });
            }
        });
        HttpBackend { addr, stop, served }
    }
}

impl Drop for HttpBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

/// Polls the ready file `ready` until it holds whole lines of addresses (bounded at `secs`);
/// `check` runs between tries (panic there to fail early) and says what to report on timeout.
pub fn wait_ready(ready: &Path, secs: u64, mut check: impl FnMut() -> String) -> Vec<SocketAddr> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(text) = std::fs::read_to_string(ready) {
            if text.ends_with('\n') {
                return text
                    .lines()
                    .map(|l| l.parse().expect("ready file address"))
                    .collect();
            }
        }
        let context = check();
        assert!(
            Instant::now() < deadline,
            "not ready in {secs} s: {context}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs a command with a time bound, returning its output.
pub fn run_bounded(cmd: &mut Command, stdin: &[u8], secs: u64) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut si = child.stdin.take().expect("stdin");
    let data = stdin.to_vec();
    std::thread::spawn(move || {
        let _ = si.write_all(&data);
    });
    let pid = child.id();
    let done = Arc::new(AtomicBool::new(false));
    let done2 = done.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if done2.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().expect("wait");
    done.store(true, Ordering::Relaxed);
    out
}

/// Polls `done` every 10 ms until it holds; panics naming `what` if it does not within `bound`.
/// What a test waits on instead of a sleep.
pub fn wait_for(what: &str, bound: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + bound;
    while !done() {
        assert!(Instant::now() < deadline, "not within {bound:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// True when the tests run as root (CI does): shuck then refuses to serve without `--user` unless
/// told it may run as root.
pub fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|v| v.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// For the tests marked `#[ignore = "needs root"]`: run with `--ignored` as root (`.ci/run`
/// does), they fail rather than pass without having run.
pub fn assert_root() {
    assert!(
        running_as_root(),
        "needs root: run with --ignored as root (.ci/run does)"
    );
}

/// `--allow-root` when running as root, nothing otherwise.
pub fn as_root_allowed() -> &'static [&'static str] {
    if running_as_root() {
        &["--allow-root"]
    } else {
        &[]
    }
}

/// `shuck bench backend` on port 0, killed on drop.
pub struct BenchBackend {
    child: Child,
    pub addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl BenchBackend {
    pub fn start(size: u64) -> BenchBackend {
        let dir = tempfile::tempdir().expect("tempdir");
        let ready = dir.path().join("ready");
        let child = Command::new(&*SHUCK)
            .args(["bench", "backend", "--listen", "127.0.0.1:0", "--size"])
            .arg(size.to_string())
            .arg("--ready-file")
            .arg(&ready)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn shuck bench backend");
        let mut b = BenchBackend {
            child,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            _dir: dir,
        };
        b.addr = wait_ready(&ready, 20, || "shuck bench backend".into())[0];
        b
    }
}

impl Drop for BenchBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Resident memory of a process, KiB.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}
