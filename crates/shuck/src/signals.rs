//! Signals while serving: TERM and INT stop (the second at once), HUP reloads, USR2 upgrades
//! the binary; with the pid file and the successor an upgrade starts.

use shuck_proxy::bindings::Bindings;
use shuck_proxy::notify;
use shuck_proxy::server::{CertificateUpdates, Reloader};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use crate::cli::ServeArgs;
use crate::{load_config, logging};

/// `--pid-file`: written once the sockets are bound, removed at exit unless another process (a
/// newer shuck) has written its own since.
pub(crate) struct PidFile(pub(crate) std::path::PathBuf);

impl PidFile {
    pub(crate) fn write(path: &std::path::Path, pid: u32) -> Result<PidFile, String> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{pid}\n"))
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| format!("cannot write pid file {}: {e}", path.display()))?;
        Ok(PidFile(path.to_path_buf()))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.0)
            .is_ok_and(|s| s.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

pub(crate) struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr2: Signal,
}

/// What `kill -USR2` starts: the binary at the path this one was started from (a new version
/// installed there), with the same arguments and every listening socket.
pub(crate) struct Successor {
    /// Rewritten with the new process's ID once it listens.
    pub(crate) pid_file: Option<std::path::PathBuf>,
    /// The metrics endpoint, answered by the new process once it listens.
    pub(crate) metrics: shuck_proxy::server::MetricsHandover,
    /// The listening sockets as they are when the upgrade starts (a reload may change them).
    pub(crate) bindings: std::sync::Arc<std::sync::Mutex<Bindings>>,
    pub(crate) exe: std::path::PathBuf,
    pub(crate) args: Vec<std::ffi::OsString>,
}

impl Successor {
    /// How long the new process may take to listen before it is given up.
    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

    /// Starts the new process and waits until it listens; true when this one should now stop
    /// accepting and drain.
    async fn take_over(&self) -> bool {
        tracing::info!(binary = %self.exe.display(), "upgrade: starting the new binary with the listening sockets");
        let handover = self
            .bindings
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .handover();
        let started = match handover.and_then(|h| h.spawn(&self.exe, &self.args)) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "upgrade failed: cannot start the new binary; still serving");
                return false;
            }
        };
        match started.ready(Self::PATIENCE).await {
            Ok(pid) => {
                tracing::info!(
                    pid,
                    "upgrade: the new process is listening; this one stops accepting and drains"
                );
                notify::handed_over();
                if let Some(path) = &self.pid_file {
                    if let Err(e) = PidFile::write(path, pid) {
                        tracing::warn!(error = %e, "upgrade: the pid file still names this process");
                    }
                }
                // After the pid file: whoever sees the old endpoint go finds the new process named.
                self.metrics.hand_over();
                true
            }
            Err(e) => {
                tracing::error!(error = %e, "upgrade failed; still serving");
                false
            }
        }
    }
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    /// Counts SIGTERM/SIGINT into `stops` (the first drains, the second exits at once) and
    /// reloads certificates and TLS settings on SIGHUP.
    pub(crate) async fn handle(
        mut self,
        args: ServeArgs,
        reloader: Reloader,
        mut updates: Option<CertificateUpdates>,
        successor: Successor,
        stops: watch::Sender<u32>,
    ) {
        let mut reloader = Some(reloader);
        let mut upgraded = false;
        let mut successor = Some(successor);
        let mut upgrading: Option<tokio::task::JoinHandle<(Successor, bool)>> = None;
        let mut deferred_reload = false;
        loop {
            tokio::select! {
                _ = self.usr2.recv() => {
                    if upgraded {
                        tracing::warn!("SIGUSR2 ignored: this process has already handed over");
                    } else if upgrading.is_some() {
                        tracing::warn!("SIGUSR2 ignored: an upgrade is under way");
                    } else if let Some(s) = successor.take() {
                        // Off the loop: SIGTERM and SIGHUP are still handled while it waits.
                        upgrading = Some(tokio::spawn(async move {
                            let ok = s.take_over().await;
                            (s, ok)
                        }));
                    }
                }
                Some(done) = finished(&mut upgrading) => {
                    match done {
                        Ok((s, true)) => {
                            upgraded = true;
                            // Its copies of the listening sockets, now the new process's.
                            s.bindings
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner)
                                .release();
                            // Drain, unless a stop is already under way.
                            stops.send_if_modified(|n| {
                                let start = *n == 0;
                                if start {
                                    *n = 1;
                                }
                                start
                            });
                        }
                        Ok((s, false)) => {
                            successor = Some(s);
                            if std::mem::take(&mut deferred_reload) {
                                tracing::info!("applying the reload deferred during the failed upgrade");
                                reloader = reload_off_runtime(&args, reloader).await;
                            }
                        }
                        Err(e) => tracing::error!(error = %e, "upgrade task lost; SIGUSR2 is ignored from now on"),
                    }
                }
                _ = self.term.recv() => { stops.send_modify(|n| *n += 1); }
                _ = self.int.recv() => { stops.send_modify(|n| *n += 1); }
                Some(frontend) = next_update(&mut updates) => {
                    let Some(mut r) = reloader.take() else { continue };
                    let task = tokio::task::spawn_blocking(move || {
                        match r.refresh(&frontend) {
                            Ok(()) => tracing::info!(frontend, "loaded a renewed certificate or OCSP staple"),
                            Err(e) => tracing::error!(frontend, error = %e, "renewed certificate or staple not loaded; still serving the previous ones"),
                        }
                        r
                    });
                    match task.await {
                        Ok(r) => reloader = Some(r),
                        Err(e) => tracing::error!(error = %e, "certificate refresh lost; further SIGHUPs are ignored"),
                    }
                }
                _ = self.hup.recv() => {
                    if upgraded {
                        tracing::warn!("SIGHUP ignored: this process has handed over to a new one and is draining");
                    } else if upgrading.is_some() {
                        // The new process reads the configuration itself; a reload here would
                        // change sockets it has already been handed.
                        tracing::warn!("SIGHUP deferred: an upgrade is under way (applied if it fails)");
                        deferred_reload = true;
                    } else {
                        reloader = reload_off_runtime(&args, reloader).await;
                    }
                }
            }
        }
    }
}

/// Reloads off the main runtime: reading files and resolving backend names may block, and
/// metrics must keep answering meanwhile. `None` in, `None` out: an earlier reload was lost.
async fn reload_off_runtime(args: &ServeArgs, reloader: Option<Reloader>) -> Option<Reloader> {
    let Some(mut r) = reloader else {
        tracing::warn!("SIGHUP ignored: an earlier reload was lost");
        return None;
    };
    let args = args.clone();
    notify::reloading();
    let task = tokio::task::spawn_blocking(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            reload(&args, &mut r);
        }));
        notify::reloaded();
        if outcome.is_err() {
            tracing::error!("reload failed unexpectedly; still serving the previous configuration");
        }
        r
    });
    match task.await {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::error!(error = %e, "reload task lost; further SIGHUPs are ignored");
            None
        }
    }
}

fn reload(args: &ServeArgs, reloader: &mut Reloader) {
    let result = load_config(&args.config, Some(args)).and_then(|c| {
        let notes = reloader.reload(&c).map_err(|e| e.to_string())?;
        Ok((notes, c.log_level))
    });
    match result {
        Ok((notes, level)) => {
            for n in notes {
                tracing::warn!("{n}");
            }
            if logging::set_level(&level) {
                tracing::info!(log_level = %level, "log level changed");
            }
            tracing::info!("reloaded certificates and configuration");
        }
        Err(e) => {
            let error = one_line(&e);
            tracing::error!(
                error,
                "reload failed; still serving the previous configuration"
            );
        }
    }
}

/// The upgrade under way, once it is decided; pending forever when there is none.
async fn finished(
    upgrading: &mut Option<tokio::task::JoinHandle<(Successor, bool)>>,
) -> Option<Result<(Successor, bool), tokio::task::JoinError>> {
    let done = match upgrading {
        Some(task) => task.await,
        None => std::future::pending().await,
    };
    *upgrading = None;
    Some(done)
}

/// The next renewed certificate's frontend; pending forever without ACME.
async fn next_update(updates: &mut Option<CertificateUpdates>) -> Option<String> {
    match updates {
        Some(u) => u.next().await,
        None => std::future::pending().await,
    }
}

/// A message on one line, for logs: TOML's errors show the offending line and a caret under it,
/// on lines of their own.
fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
