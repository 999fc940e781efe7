//! Running under systemd: the sd_notify messages (a fake notify socket stands in for systemd).

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use shuck_test_support::configs::{Config, Frontend};
use shuck_test_support::process::Shuck;

/// Every message received within `bound` until one contains `until`, newline-joined.
fn receive_until(socket: &UnixDatagram, until: &str, bound: Duration) -> String {
    let deadline = Instant::now() + bound;
    let mut got = String::new();
    let mut buf = [0u8; 4096];
    while !got.contains(until) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "no {until:?} within {bound:?}; got: {got}");
        socket.set_read_timeout(Some(left)).expect("timeout");
        if let Ok(n) = socket.recv(&mut buf) {
            got.push_str(&String::from_utf8_lossy(&buf[..n]));
            got.push('\n');
        }
    }
    got
}

/// READY once listening (with a status line), RELOADING with MONOTONIC_USEC then READY around a
/// SIGHUP, STOPPING at SIGTERM: what `Type=notify-reload` needs.
#[test]
fn sd_notify_says_ready_reloading_and_stopping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind notify socket");
    let config = Config::new()
        .frontend(Frontend::new().self_signed())
        .to_string();
    let shuck = Shuck::with()
        .config(&config)
        .env("NOTIFY_SOCKET", path.to_str().expect("path"))
        .run();
    let ready = receive_until(&socket, "READY=1", Duration::from_secs(10));
    assert!(ready.contains("STATUS=listening on 1 addresses"), "{ready}");

    shuck.signal("HUP");
    let reload = receive_until(&socket, "READY=1", Duration::from_secs(10));
    let reloading = reload.find("RELOADING=1").expect("RELOADING before READY");
    assert!(
        reloading < reload.find("READY=1").expect("READY"),
        "{reload}"
    );
    let usec: u64 = reload
        .lines()
        .find_map(|l| l.strip_prefix("MONOTONIC_USEC="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("MONOTONIC_USEC with RELOADING: {reload}"));
    assert!(usec > 0);

    let (status, log) = shuck.stop();
    assert!(status.success(), "{log}");
    let stopping = receive_until(&socket, "STOPPING=1", Duration::from_secs(10));
    assert!(stopping.contains("STOPPING=1"), "{stopping}");
}

/// contrib/shuck.service passes `systemd-analyze verify` (with this build's binary in place of
/// /usr/bin/shuck; the man pages are the package's, not installed here).
#[test]
fn the_unit_file_verifies() {
    let analyze = shuck_test_support::peers::require("systemd-analyze", "systemd");
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../contrib/shuck.service"
    ))
    .expect("contrib/shuck.service");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shuck.service");
    let local = unit
        .replace("/usr/bin/shuck", &shuck_test_support::process::SHUCK)
        .replace("man:shuck(1) ", "")
        .replace("man:shuck-serve(1) ", "")
        .replace("man:shuck.toml(5) ", "");
    std::fs::write(&path, local).expect("write unit");
    let out = shuck_test_support::process::run_bounded(
        std::process::Command::new(analyze).arg("verify").arg(&path),
        b"",
        60,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("shuck.service:"), "warnings: {err}");
}
