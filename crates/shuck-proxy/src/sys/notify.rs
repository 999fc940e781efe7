//! What systemd is told (`Type=notify` / `Type=notify-reload`, sd_notify(3)): READY once every
//! listener is up, RELOADING with the monotonic time then READY around a reload, STOPPING when the
//! drain begins, and a STATUS line with the open connections. Nothing is sent without
//! `NOTIFY_SOCKET`; a failure to send is logged once and otherwise ignored (the service manager's
//! view is a convenience, never a reason to stop serving).

use std::sync::atomic::{AtomicBool, Ordering};

use sd_notify::NotifyState;

static FAILED_ONCE: AtomicBool = AtomicBool::new(false);
/// Set once a successor took over (an upgrade): it talks to the service manager from then on.
static HANDED_OVER: AtomicBool = AtomicBool::new(false);

fn send(states: &[NotifyState<'_>]) {
    if HANDED_OVER.load(Ordering::Relaxed) {
        return;
    }
    if let Err(e) = sd_notify::notify(states) {
        if !FAILED_ONCE.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, "cannot notify the service manager (NOTIFY_SOCKET)");
        }
    }
}

/// Listening: the service is up.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// A reload begins (systemd 253+ wants the monotonic time with it).
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(_) => send(&[NotifyState::Reloading]),
    }
}

/// The reload is over, applied or not: serving again.
pub fn reloaded() {
    send(&[NotifyState::Ready]);
}

/// The drain begins.
pub fn stopping() {
    send(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: draining connections"),
    ]);
}

/// A status line (`systemctl status` shows it).
pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

/// The new process of an upgrade died within `upgrade_confirm`: this one is the service again.
pub fn taken_back() {
    HANDED_OVER.store(false, Ordering::Relaxed);
    send(&[
        NotifyState::MainPid(std::process::id()),
        NotifyState::Ready,
        NotifyState::Status("serving again: the upgrade was rolled back"),
    ]);
}

/// This process is the service's main process now (it took over in an upgrade).
pub fn main_pid() {
    send(&[NotifyState::MainPid(std::process::id())]);
}

/// A successor took over: say nothing more (its READY and MAINPID stand).
pub fn handed_over() {
    HANDED_OVER.store(true, Ordering::Relaxed);
}
