//! Reloads off the signal loop: a SIGHUP (or a renewed certificate) runs as a job on a blocking
//! thread, since reading files and resolving backend names may block, with a deadline
//! (`reload_timeout`). The loop meanwhile answers every other signal; a job past its deadline, or
//! overtaken by a stop, is abandoned and applies nothing even if its I/O comes back later.

use shuck_proxy::notify;
use shuck_proxy::reload::ApplyGate;
use shuck_proxy::server::Reloader;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cli::ServeArgs;
use crate::{load_config, logging};

/// What a job does.
#[derive(Debug, Clone)]
pub(crate) enum Work {
    /// Read the configuration again and apply it (SIGHUP).
    Reload,
    /// Load one frontend's certificates again (an ACME renewal, a new or lapsed staple).
    Refresh(String),
}

/// A reload or refresh under way; it holds the reloader until it ends.
pub(crate) struct Job {
    task: JoinHandle<Reloader>,
    gate: ApplyGate,
    deadline: Instant,
    abandoned: bool,
}

impl Job {
    /// Starts `work` with `reloader`, to be given up after `reloader`'s `reload_timeout`.
    pub(crate) fn start(work: Work, args: &ServeArgs, mut reloader: Reloader) -> Job {
        let deadline = Instant::now() + reloader.process_timeouts().reload;
        let gate = reloader.arm();
        let args = args.clone();
        if matches!(work, Work::Reload) {
            notify::reloading();
        }
        let task = tokio::task::spawn_blocking(move || {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &work {
                Work::Reload => reload(&args, &mut reloader),
                Work::Refresh(frontend) => refresh(frontend, &mut reloader),
            }));
            if outcome.is_err() {
                tracing::error!(
                    "reload failed unexpectedly; still serving the previous configuration"
                );
            }
            notify::reloaded();
            reloader
        });
        Job {
            task,
            gate,
            deadline,
            abandoned: false,
        }
    }

    /// When it is given up, unless it already was.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        (!self.abandoned).then_some(self.deadline)
    }

    /// Gives it up: past `reload_timeout` (`why`), or overtaken by a stop. Says so once.
    pub(crate) fn abandon(&mut self, why: &str) {
        if self.abandoned {
            return;
        }
        self.abandoned = true;
        if self.gate.abandon() {
            tracing::error!("reload abandoned ({why}); still serving the previous configuration");
            notify::reloaded();
        }
        // Otherwise it is applying (no I/O left): it ends in a moment, as it was.
    }

    /// Whether it was given up (it still holds the reloader until its I/O returns).
    pub(crate) fn abandoned(&self) -> bool {
        self.abandoned
    }

    /// The reloader back once the job ends; `None` if the task was lost.
    pub(crate) async fn finish(&mut self) -> Option<Reloader> {
        match (&mut self.task).await {
            Ok(r) => Some(r),
            Err(e) => {
                tracing::error!(error = %e, "reload task lost; further reloads are ignored");
                None
            }
        }
    }
}

fn reload(args: &ServeArgs, reloader: &mut Reloader) {
    let config = match load_config(&args.config, Some(args)) {
        Ok(c) => c,
        Err(e) => {
            let error = one_line(&e);
            tracing::error!(
                error,
                "reload failed; still serving the previous configuration"
            );
            return;
        }
    };
    match reloader.reload(&config) {
        Ok(notes) => {
            for n in notes {
                tracing::warn!("{n}");
            }
            if logging::set_level(&config.log_level) {
                tracing::info!(log_level = %config.log_level, "log level changed");
            }
            tracing::info!("reloaded certificates and configuration");
        }
        // The loop said so when it gave the reload up.
        Err(shuck_proxy::Error::ReloadAbandoned) => {}
        Err(e) => {
            let error = one_line(&e.to_string());
            tracing::error!(
                error,
                "reload failed; still serving the previous configuration"
            );
        }
    }
}

fn refresh(frontend: &str, reloader: &mut Reloader) {
    match reloader.refresh(frontend) {
        Ok(()) => tracing::info!(frontend, "loaded a renewed certificate or OCSP staple"),
        Err(shuck_proxy::Error::ReloadAbandoned) => {}
        Err(e) => {
            tracing::error!(frontend, error = %e, "renewed certificate or staple not loaded; still serving the previous ones");
        }
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
