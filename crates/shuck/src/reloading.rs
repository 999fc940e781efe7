//! Reloads off the signal loop: a SIGHUP (or a renewed certificate) runs as a job on a blocking
//! thread, since reading files and resolving backend names may block, with a deadline
//! (`reload_timeout`). The loop meanwhile answers every other signal; a job past its deadline, or
//! overtaken by a stop, is abandoned and applies nothing even if its I/O comes back later.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use shuck_proxy::notify;
use shuck_proxy::reload::ApplyGate;
use shuck_proxy::server::Reloader;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::admin::{exit, Reply};
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
    task: JoinHandle<(Reloader, Reply)>,
    gate: ApplyGate,
    deadline: Instant,
    abandoned: bool,
    /// The admin socket's requests this job answers (its report, once it ends).
    replies: Vec<oneshot::Sender<Reply>>,
}

impl Job {
    /// Starts `work` with `reloader`, to be given up after `reloader`'s `reload_timeout`; its
    /// report goes to `replies`.
    pub(crate) fn start(
        work: Work,
        args: &ServeArgs,
        mut reloader: Reloader,
        replies: Vec<oneshot::Sender<Reply>>,
    ) -> Job {
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
            let report = outcome.unwrap_or_else(|_| {
                let message =
                    "reload failed unexpectedly; still serving the previous configuration";
                tracing::error!("{message}");
                Reply::error(exit::FAILED, message)
            });
            notify::reloaded();
            (reloader, report)
        });
        Job {
            task,
            gate,
            deadline,
            abandoned: false,
            replies,
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
            let message =
                format!("reload abandoned ({why}); still serving the previous configuration");
            tracing::error!("{message}");
            notify::reloaded();
            for r in self.replies.drain(..) {
                let _ = r.send(Reply::error(exit::FAILED, &message));
            }
        }
        // Otherwise it is applying (no I/O left): it ends in a moment, as it was.
    }

    /// Whether it was given up (it still holds the reloader until its I/O returns).
    pub(crate) fn abandoned(&self) -> bool {
        self.abandoned
    }

    /// The reloader back once the job ends (its report sent to whoever asked); `None` if the
    /// task was lost.
    pub(crate) async fn finish(&mut self) -> Option<Reloader> {
        let (reloader, report) = match (&mut self.task).await {
            Ok(done) => (Some(done.0), done.1),
            Err(e) => {
                tracing::error!(error = %e, "reload task lost; further reloads are ignored");
                (
                    None,
                    Reply::error(
                        exit::FAILED,
                        "reload task lost; further reloads are ignored",
                    ),
                )
            }
        };
        for r in self.replies.drain(..) {
            let _ = r.send(report.clone());
        }
        reloader
    }
}

/// Reads the configuration again and applies it; the report says what changed, what needs a
/// restart, or why nothing was applied.
fn reload(args: &ServeArgs, reloader: &mut Reloader) -> Reply {
    let failed = |error: String| {
        tracing::error!(
            error,
            "reload failed; still serving the previous configuration"
        );
        Reply::error(
            exit::FAILED,
            &format!("nothing applied, still serving the previous configuration: {error}"),
        )
    };
    let config = match load_config(&args.config, Some(args)) {
        Ok(c) => c,
        Err(e) => return failed(one_line(&e)),
    };
    let before = reloader.in_force();
    match reloader.reload(&config) {
        Ok(notes) => {
            for n in &notes {
                tracing::warn!("{n}");
            }
            if logging::set_level(&config.log_level) {
                tracing::info!(log_level = %config.log_level, "log level changed");
            }
            tracing::info!("reloaded certificates and configuration");
            report(&before, &reloader.in_force(), &notes)
        }
        // The loop said so (and answered) when it gave the reload up.
        Err(shuck_proxy::Error::ReloadAbandoned) => Reply::error(
            exit::FAILED,
            "reload abandoned; still serving the previous configuration",
        ),
        Err(e) => failed(one_line(&e.to_string())),
    }
}

/// A reload's report: the settings that changed, and the notes (what was not applied).
fn report(
    before: &BTreeMap<String, toml::Value>,
    after: &BTreeMap<String, toml::Value>,
    notes: &[String],
) -> Reply {
    let changed: Vec<&String> = before
        .keys()
        .chain(after.keys().filter(|k| !before.contains_key(*k)))
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    let mut text = format!("reloaded: {} settings changed\n", changed.len());
    let none = toml::Value::String("none".into());
    for k in &changed {
        let (old, new) = (
            before.get(*k).unwrap_or(&none),
            after.get(*k).unwrap_or(&none),
        );
        for (field, was, now) in shuck_proxy::running::differing_fields(old, new) {
            let _ = writeln!(text, "  changed {k}{field}: {was} -> {now}");
        }
    }
    for n in notes {
        let _ = writeln!(text, "  not applied: {n}");
    }
    let data = serde_json::json!({ "changed": changed, "not_applied": notes });
    Reply {
        exit: if notes.is_empty() {
            exit::OK
        } else {
            exit::RESTART
        },
        text,
        data,
    }
}

/// Loads one frontend's certificates and staples again (a renewal, a new staple, the admin
/// socket's `cert` and `ocsp refresh`).
fn refresh(frontend: &str, reloader: &mut Reloader) -> Reply {
    match reloader.refresh(frontend) {
        Ok(()) => {
            tracing::info!(frontend, "loaded a renewed certificate or OCSP staple");
            Reply::ok(
                format!("frontend {frontend:?}: certificates and staples loaded again\n"),
                &serde_json::json!({ "frontend": frontend }),
            )
        }
        Err(shuck_proxy::Error::ReloadAbandoned) => Reply::error(
            exit::FAILED,
            "abandoned; still serving the previous certificates",
        ),
        Err(e) => {
            tracing::error!(frontend, error = %e, "renewed certificate or staple not loaded; still serving the previous ones");
            Reply::error(
                exit::FAILED,
                &format!(
                    "not loaded, still serving the previous certificates: {}",
                    one_line(&e.to_string())
                ),
            )
        }
    }
}

/// A message on one line, for logs: TOML's errors show the offending line and a caret under it,
/// on lines of their own.
pub(crate) fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
