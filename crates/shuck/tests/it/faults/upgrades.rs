//! Upgrades whose new process dies, never becomes ready, or is stopped: the old process takes
//! the service back, or stops too, and leaves no unmanaged process (docs/reliability.md).

use super::*;

/// A closed loop of demo requests from `threads` clients until stopped: what a balancer's
/// clients see during an upgrade.
struct Load {
    stop: Arc<std::sync::atomic::AtomicBool>,
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(pki: &Pki, addr: SocketAddr, threads: usize) -> Load {
        let config = Arc::new(shuck_test_support::pki::client_config(pki));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let threads = (0..threads)
            .map(|_| {
                let (config, stop, ok, failed) =
                    (config.clone(), stop.clone(), ok.clone(), failed.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let n = if demo_request(&config, addr) {
                            &ok
                        } else {
                            &failed
                        };
                        n.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Load {
            stop,
            ok,
            failed,
            threads,
        }
    }

    /// (served, failed) so far.
    fn counts(&self) -> (usize, usize) {
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    fn finish(mut self) -> (usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut self.threads) {
            t.join().expect("client thread");
        }
        self.counts()
    }
}

/// Kills a process left behind (a new process the test let loose) when dropped.
struct KillOnDrop(Option<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            let _ = Command::new("kill")
                .arg("-9")
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
    }
}

fn pid_in(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Waits (bounded) until the pid file names a process other than `old`.
fn wait_pid_other_than(path: &Path, old: u32, bound: Duration, log: &Path) -> u32 {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(p) = pid_in(path).filter(|p| *p != old) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "the pid file never named another process: {}",
            read(log)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every process ID in /proc.
fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The processes whose parent is `parent`.
fn children_of(parent: u32) -> Vec<u32> {
    let ppid = |pid| stat_fields(pid)?.get(1)?.parse::<u32>().ok();
    pids()
        .into_iter()
        .filter(|&pid| ppid(pid) == Some(parent))
        .collect()
}

fn wait_child(parent: u32, bound: Duration) -> u32 {
    let deadline = Instant::now() + bound;
    loop {
        if let Some(c) = children_of(parent).into_iter().next() {
            return c;
        }
        assert!(Instant::now() < deadline, "no new process was started");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Live processes whose command line names `needle` (this test's configuration file).
fn processes_naming(needle: &str) -> Vec<u32> {
    pids()
        .into_iter()
        .filter(|&pid| {
            alive(pid)
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

/// A shuck to upgrade: its configuration, pid file and log in `dir`, started from `exe`.
struct ToUpgrade {
    pki: Pki,
    proc: Proc,
    cfg: PathBuf,
    pid_file: PathBuf,
    log: PathBuf,
    dir: tempfile::TempDir,
}

impl ToUpgrade {
    /// Started from the test's binary with the global keys `global`.
    fn start(global: &str) -> ToUpgrade {
        Self::start_in(
            tempfile::tempdir().expect("tempdir"),
            Path::new(&*SHUCK),
            global,
        )
    }

    /// Started from `exe`, its files in `dir`.
    fn start_in(dir: tempfile::TempDir, exe: &Path, global: &str) -> ToUpgrade {
        let pki = Pki::new();
        let cfg = dir.path().join("upgrade.toml");
        std::fs::write(&cfg, config_with(&pki, global, "")).expect("config");
        let (pid_file, log) = (dir.path().join("shuck.pid"), dir.path().join("upgrade.log"));
        let proc = Proc::start_from(
            exe,
            &[
                "--config",
                cfg.to_str().expect("utf-8"),
                "--pid-file",
                pid_file.to_str().expect("utf-8"),
            ],
            Stdio::from(std::fs::File::create(&log).expect("log")),
            dir.path(),
        );
        ToUpgrade {
            pki,
            proc,
            cfg,
            pid_file,
            log,
            dir,
        }
    }

    fn pid(&self) -> u32 {
        self.proc.child.id()
    }
}

/// `kill -USR2`, then `kill -9` of the new process once the pid file names it: within
/// upgrade_confirm the old process takes the service back (it had kept its sockets and kept
/// accepting), names itself in the pid file and serves on. Only the requests the new process
/// held when it was killed fail (one per client at most); none after.
#[test]
fn a_new_process_that_dies_after_the_handover_is_rolled_back() {
    let mut old = ToUpgrade::start("upgrade_confirm = \"5s\"");
    let pki = &old.pki;
    let old_pid = old.pid();
    let load = Load::start(pki, old.proc.addrs[0], 2);
    shuck_test_support::process::wait_for("the load is served", Duration::from_secs(10), || {
        load.counts().0 >= 20
    });
    kill("USR2", old_pid);
    let new = wait_pid_other_than(&old.pid_file, old_pid, Duration::from_secs(30), &old.log);
    let _guard = KillOnDrop(Some(new));
    // After the handover: the old process has said so, and waits out upgrade_confirm.
    wait_file(
        &old.log,
        "the new process is listening",
        Duration::from_secs(10),
    );
    kill("KILL", new);
    let text = wait_file(&old.log, "upgrade rolled back", Duration::from_secs(10));
    assert_eq!(pid_in(&old.pid_file), Some(old_pid), "{text}");
    let (_, failed_at_rollback) = load.counts();
    // Past upgrade_confirm (5 s) with the load still running: what must not happen (a failure
    // after the rollback) has no event to wait on.
    std::thread::sleep(Duration::from_secs(6));
    let (ok, failed) = load.finish();
    println!("rolled back: {ok} served, {failed} failed ({failed_at_rollback} by the rollback)");
    assert!(
        failed_at_rollback <= 2,
        "{failed_at_rollback} failed: {text}"
    );
    assert_eq!(
        failed, failed_at_rollback,
        "requests failed after the rollback"
    );
    assert!(
        old.proc.child.try_wait().expect("try_wait").is_none(),
        "the old process left: {}",
        read(&old.log)
    );
    assert!(!alive(new), "the new process was not reaped");
    assert_eq!(requests(pki, old.proc.addrs[0], 5, 1), 0);
}

/// `kill -USR2` then `kill -TERM` to the old process 10 ms after the new one has started: never
/// two processes nobody manages. Either the stop came before the new process was ready, and it is stopped too, or
/// the handover completed and the pid file names the new process that serves.
#[test]
fn a_stop_right_after_usr2_leaves_no_unmanaged_process() {
    let mut old = ToUpgrade::start("");
    let pki = &old.pki;
    let old_pid = old.pid();
    kill("USR2", old_pid);
    wait_child(old_pid, Duration::from_secs(10));
    // The race under test: TERM a moment after the new process exists, before it is ready.
    std::thread::sleep(Duration::from_millis(10));
    kill("TERM", old_pid);
    let deadline = Instant::now() + Duration::from_secs(20);
    while old.proc.child.try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the old process did not stop: {}",
            read(&old.log)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let needle = old.cfg.to_str().expect("utf-8").to_string();
    // A new process told to stop drains and exits; one that completed the handover serves on.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let (running, named) = (processes_naming(&needle), pid_in(&old.pid_file));
        let cleanup: Vec<KillOnDrop> = running.iter().map(|p| KillOnDrop(Some(*p))).collect();
        let settled = match (running.as_slice(), named) {
            ([], None) => true,
            ([one], Some(p)) if *one == p && p != old_pid => {
                requests(pki, old.proc.addrs[0], 3, 1) == 0
            }
            _ => false,
        };
        if settled {
            println!("stop after USR2: running {running:?}, pid file {named:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "running {running:?} but the pid file names {named:?}: {}",
            read(&old.log)
        );
        std::mem::forget(cleanup);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `kill -9` of the old process once the new one has started: the new one cannot tell the old
/// it is ready, so it names itself in the pid file, and serves.
#[test]
fn a_new_process_whose_predecessor_died_names_itself_in_the_pid_file() {
    let mut old = ToUpgrade::start("");
    let pki = &old.pki;
    let old_pid = old.pid();
    kill("USR2", old_pid);
    let new = wait_child(old_pid, Duration::from_secs(10));
    let _guard = KillOnDrop(Some(new));
    kill("KILL", old_pid);
    let _ = old.proc.child.wait();
    let named = wait_pid_other_than(&old.pid_file, old_pid, Duration::from_secs(30), &old.log);
    assert_eq!(named, new, "{}", read(&old.log));
    assert_eq!(
        requests(pki, old.proc.addrs[0], 5, 1),
        0,
        "the new process serves"
    );
    assert!(alive(new));
}

/// A new binary that never says it is ready (it ignores SIGTERM, too): past upgrade_timeout it
/// is told to stop, killed 5 s later and reaped, and the old process serves on.
#[test]
fn a_new_binary_that_never_becomes_ready_is_killed_and_reaped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("shuck-bin");
    std::fs::copy(&*SHUCK, &exe).expect("copy the binary");
    let mut old = ToUpgrade::start_in(dir, &exe, "upgrade_timeout = \"1s\"");
    let (pki, dir) = (&old.pki, old.dir.path().to_path_buf());
    let old_pid = old.pid();
    // The "new version" installed at the same path: a script that never listens.
    let script = dir.join("stuck.sh");
    std::fs::write(&script, "#!/bin/sh\ntrap '' TERM\nexec sleep 60\n").expect("script");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::rename(&script, &exe).expect("install the new version");
    kill("USR2", old_pid);
    let new = wait_child(old_pid, Duration::from_secs(10));
    let _guard = KillOnDrop(Some(new));
    let t = Instant::now();
    wait_file(&old.log, "not ready within", Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(20);
    while Path::new(&format!("/proc/{new}")).exists() {
        assert!(
            Instant::now() < deadline,
            "the new process was not killed and reaped: {}",
            read(&old.log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "never ready: gone (reaped) {:?} after the upgrade timed out",
        t.elapsed()
    );
    assert!(read(&old.log).contains("killed"), "{}", read(&old.log));
    assert!(old.proc.child.try_wait().expect("try_wait").is_none());
    assert_eq!(pid_in(&old.pid_file), Some(old_pid));
    assert_eq!(requests(pki, old.proc.addrs[0], 5, 1), 0);
}

/// `kill $(cat PIDFILE)` right after an upgrade (the pid file names the new process): the
/// operator asked the service to stop, so within upgrade_confirm the old process stops too
/// instead of taking the service back, and the pid file goes with them.
#[test]
fn a_stop_of_the_new_process_within_upgrade_confirm_stops_the_service() {
    let mut old = ToUpgrade::start("upgrade_confirm = \"5s\"");
    let old_pid = old.pid();
    kill("USR2", old_pid);
    let new = wait_pid_other_than(&old.pid_file, old_pid, Duration::from_secs(30), &old.log);
    let _guard = KillOnDrop(Some(new));
    kill("TERM", new);
    let text = wait_file(&old.log, "this process stops too", Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(20);
    while old.proc.child.try_wait().expect("try_wait").is_none() {
        assert!(
            Instant::now() < deadline,
            "the old process did not stop: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(new));
    assert_eq!(pid_in(&old.pid_file), None, "{}", read(&old.log));
}

/// `kill -USR2`, then `kill -STOP` of the new process once it is ready: a process that hangs is
/// no better than one that died. Within upgrade_confirm the old process finds it no longer
/// answering (it says it is alive several times a second over the handover socket), takes the
/// service back, kills it, and serves on. (Once a hang was confirmed: the old process left, and
/// nothing answered until the new one was continued.)
#[test]
fn a_new_process_that_hangs_after_the_handover_is_rolled_back() {
    let mut old = ToUpgrade::start("upgrade_confirm = \"10s\"");
    let pki = &old.pki;
    let old_pid = old.pid();
    kill("USR2", old_pid);
    let new = wait_pid_other_than(&old.pid_file, old_pid, Duration::from_secs(30), &old.log);
    let _guard = KillOnDrop(Some(new));
    wait_file(
        &old.log,
        "the new process is listening",
        Duration::from_secs(10),
    );
    let t = Instant::now();
    kill("STOP", new);
    let text = wait_file(&old.log, "upgrade rolled back", Duration::from_secs(8));
    let took = t.elapsed();
    println!("a hung new process was rolled back {took:?} after it stopped");
    assert!(text.contains("stopped answering"), "{text}");
    assert_eq!(pid_in(&old.pid_file), Some(old_pid), "{text}");
    shuck_test_support::process::wait_for(
        "the hung process killed",
        Duration::from_secs(5),
        || !alive(new),
    );
    assert_eq!(
        requests(pki, old.proc.addrs[0], 20, 2),
        0,
        "{}",
        read(&old.log)
    );
    assert!(
        old.proc.child.try_wait().expect("try_wait").is_none(),
        "the old process left: {}",
        read(&old.log)
    );
}
