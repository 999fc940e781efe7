//! `kill -USR2` from the old process's side: start the binary at our own path with every
//! listening socket, wait until it listens, name it in the pid file, then stay ready for
//! `upgrade_confirm` to take the service back should it die. Only then stop accepting and drain.
//! A stop asked before the new process is ready stops it too: never two processes that no one
//! manages.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shuck_proxy::bindings::Bindings;
use shuck_proxy::reload::ProcessTimeouts;
use shuck_proxy::server::MetricsHandover;
use shuck_proxy::upgrade::{NotReady, Successor, Watched};
use shuck_proxy::{notify, pid_file};
use tokio::sync::watch;

/// What `kill -USR2` starts: the binary at the path this one was started from (a new version
/// installed there), with the same arguments and every listening socket.
pub(crate) struct Upgrade {
    /// The admin socket, handed over whole, and what this process does once it has been.
    pub(crate) admin: Option<crate::admin::socket::ForUpgrade>,
    /// Names the new process once it listens; this one again if the upgrade is rolled back.
    pub(crate) pid_file: Option<std::path::PathBuf>,
    /// The metrics endpoint, answered by the new process once the upgrade is confirmed.
    pub(crate) metrics: MetricsHandover,
    /// The listening sockets as they are when the upgrade starts (a reload may change them).
    pub(crate) bindings: Arc<Mutex<Bindings>>,
    pub(crate) exe: std::path::PathBuf,
    pub(crate) args: Vec<std::ffi::OsString>,
    /// The new process while it starts (0: none), for a stop to reach at once.
    pub(crate) starting: Starting,
}

/// The PID of an upgrade's new process until it is ready (0: none). The signal loop sends it
/// SIGTERM itself when a stop comes, before this process may exit: the upgrade's own task
/// might not run again before it does.
#[derive(Debug, Clone, Default)]
pub(crate) struct Starting(Arc<std::sync::atomic::AtomicU32>);

impl Starting {
    fn set(&self, pid: u32) {
        self.0.store(pid, std::sync::atomic::Ordering::Relaxed);
    }

    /// Sends SIGTERM to the new process still starting, if any.
    pub(crate) fn stop(&self) {
        let pid = self.0.swap(0, std::sync::atomic::Ordering::Relaxed);
        shuck_proxy::upgrade::signal(pid, nix::sys::signal::Signal::SIGTERM);
    }
}

/// How an upgrade ended, for this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The new process serves; this one stops accepting and drains.
    HandedOver,
    /// The new process never became the service; this one serves on.
    Failed,
    /// The new process died within `upgrade_confirm`; this one took the service back.
    RolledBack,
    /// The new process stopped cleanly within `upgrade_confirm` (someone asked it to stop, as
    /// `kill $(cat PIDFILE)` does once the pid file names it): the service stops, this one too.
    Stopped,
}

/// How long a new process told to stop has before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

impl Upgrade {
    /// The new process serves the admin socket from now on: this one stops accepting on it
    /// and leaves its name at exit.
    pub(crate) fn admin_handed_over(&self) {
        if let Some((_, _, h)) = &self.admin {
            h.handed_over();
        }
    }

    /// Runs the upgrade to its end; `stops` counts the stop signals (a stop before the new
    /// process is ready cancels the upgrade; during the confirmation window it confirms it).
    pub(crate) async fn take_over(
        &self,
        stops: watch::Receiver<u32>,
        timeouts: ProcessTimeouts,
    ) -> Outcome {
        tracing::info!(binary = %self.exe.display(), "upgrade: starting the new binary with the listening sockets");
        let handover = self
            .bindings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .handover()
            .and_then(|mut h| {
                if let Some((admin, path, _)) = &self.admin {
                    h.add_admin(admin, path)?;
                }
                Ok(h)
            });
        let mut new = match handover.and_then(|h| h.spawn(&self.exe, &self.args)) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "upgrade failed: cannot start the new binary; still serving");
                return Outcome::Failed;
            }
        };
        self.starting.set(new.pid());
        let ready = tokio::select! {
            r = new.ready(timeouts.upgrade) => Some(r),
            () = stop_asked(stops.clone()) => None,
        };
        self.starting.set(0);
        match ready {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::error!(error = %e, "upgrade failed; still serving");
                if matches!(e, NotReady::TimedOut { .. }) {
                    new.stop(STOP_GRACE).await;
                }
                return Outcome::Failed;
            }
            None => {
                // The loop sent it SIGTERM when the stop came (`Starting::stop`); a second
                // would make it exit without draining what it may have accepted.
                tracing::warn!(
                    pid = new.pid(),
                    "upgrade cancelled: a stop came before the new process was ready; it is stopped too"
                );
                tokio::spawn(new.reap());
                return Outcome::Failed;
            }
        }
        self.confirm(new, stops, timeouts.upgrade_confirm).await
    }

    /// The new process listens: it becomes the service, unless it dies within `confirm`.
    async fn confirm(
        &self,
        mut new: Successor,
        stops: watch::Receiver<u32>,
        confirm: Duration,
    ) -> Outcome {
        let pid = new.pid();
        notify::handed_over();
        self.name_in_pid_file(pid);
        tracing::info!(
            pid,
            upgrade_confirm = ?confirm,
            "upgrade: the new process is listening; this one takes the service back if it exits within upgrade_confirm"
        );
        let watched = tokio::select! {
            w = new.watch_within(confirm) => w,
            // A stop now confirms the upgrade: the new process is the service.
            () = stop_asked(stops) => Watched::Lived,
        };
        if matches!(watched, Watched::Hung) {
            self.name_in_pid_file(std::process::id());
            notify::taken_back();
            tracing::error!(pid, "upgrade rolled back: the new process stopped answering within upgrade_confirm; it is killed and this process serves on");
            new.kill().await;
            return Outcome::RolledBack;
        }
        if let Watched::Exited(status) = watched {
            self.name_in_pid_file(std::process::id());
            notify::taken_back();
            if status.success() {
                tracing::warn!(pid, "the new process stopped cleanly within upgrade_confirm (it was asked to stop): this process stops too");
                return Outcome::Stopped;
            }
            tracing::error!(pid, %status, "upgrade rolled back: the new process exited within upgrade_confirm; this process serves on");
            return Outcome::RolledBack;
        }
        tracing::info!(
            pid,
            "upgrade confirmed: this process stops accepting and drains"
        );
        // After the pid file: whoever sees the old endpoint go finds the new process named.
        self.metrics.hand_over();
        tokio::spawn(new.reap());
        Outcome::HandedOver
    }

    fn name_in_pid_file(&self, pid: u32) {
        if let Some(path) = &self.pid_file {
            if let Err(e) = pid_file::name_in(path, pid) {
                tracing::warn!(error = %e, pid, "upgrade: the pid file could not be rewritten");
            }
        }
    }
}

/// Resolves once a stop signal has come (at once if one already has).
async fn stop_asked(mut stops: watch::Receiver<u32>) {
    if stops.wait_for(|n| *n >= 1).await.is_err() {
        std::future::pending::<()>().await;
    }
}
