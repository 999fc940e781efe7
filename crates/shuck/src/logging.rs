//! The log subscriber: compact or JSON lines on standard error, the configured level (or
//! `RUST_LOG`), and libraries' lines only at debug and within their own budget
//! (`shuck_proxy::logging`).
//!
//! No thread that serves connections ever writes to standard error itself: a reader that lags
//! (journald under pressure, a blocking container log driver, a paused `tail`) would fill the
//! pipe and stop every worker in `write`. Lines go to a bounded queue (`log_queue_lines`) that one
//! writer thread empties; when it is full a line is dropped and counted
//! (`shuck_log_lines_dropped_total`), and [`LogQueue::report_drops`] says how many in one line
//! once lines get through again.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use shuck_proxy::config::{Config, LogFormat, LogTarget};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::filter::{FilterExt, LevelFilter};
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{fmt, reload, EnvFilter, Registry};

/// The log writer's queue: keep it for the life of the process (dropping it flushes what is
/// queued, waiting at most a second for a reader that lags).
pub(crate) struct LogQueue {
    _guard: WorkerGuard,
    dropped: ErrorCounter,
}

pub(crate) fn init(config: &Config) -> LogQueue {
    let from_env = EnvFilter::try_from_default_env().ok();
    let env_set = from_env.is_some();
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(&config.log_level));
    LIBRARIES_AT_DEBUG.store(at_debug(&filter), Ordering::Relaxed);
    let (filter, handle) = reload::Layer::new(filter);
    if !env_set {
        // RUST_LOG, when set, stays in charge: a reload does not override it.
        let _ = LEVEL.set(handle);
    }
    // Colours only on a terminal: journald and log files should not get escape codes.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let (sink, target_error) = target_writer(&config.log_target);
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(config.log_queue_lines)
        .thread_name("shuck-log")
        .finish(sink);
    let dropped = writer.error_counter();
    let layer = fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi && matches!(config.log_target, LogTarget::Stderr))
        .with_target(false);
    let layer = match (&config.log_target, config.log_format) {
        (LogTarget::Journald(_), _) if target_error.is_none() => layer
            .event_format(crate::log_targets::JournaldLines)
            .boxed(),
        (LogTarget::Syslog(address), _) if target_error.is_none() => {
            let hostname = crate::log_targets::hostname();
            let local = matches!(address, shuck_proxy::config::SyslogAddress::Unix(_));
            let lines = crate::log_targets::SyslogLines { hostname, local };
            layer.event_format(lines).boxed()
        }
        (_, LogFormat::Compact) => layer.compact().boxed(),
        (_, LogFormat::Json) => {
            crate::json_log::fatal_as_json(true);
            layer.event_format(crate::json_log::JsonLines).boxed()
        }
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter.and(LibraryLines)))
        .init();
    if let Some(e) = target_error {
        tracing::error!(target = %config.log_target, error = %e, "cannot log there: logging to standard error instead");
    }
    LogQueue {
        _guard: guard,
        dropped,
    }
}

impl LogQueue {
    /// Every second: counts lines the queue dropped into `shuck_log_lines_dropped_total` and,
    /// once lines get through again, says how many in one warning. The warning may itself be
    /// dropped while the reader still lags; then the next one covers it too.
    pub(crate) fn report_drops(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let dropped = self.dropped.clone();
        async move {
            let (mut counted, mut reported) = (0usize, 0usize);
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = dropped.dropped_lines();
                let new = now.saturating_sub(counted);
                shuck_proxy::logging::LINES_DROPPED.inc_by(new as u64);
                counted = now;
                if now == reported {
                    continue;
                }
                let lost = now - reported;
                tracing::warn!(
                    dropped = lost,
                    total = now,
                    "log lines were dropped: the reader of standard error fell behind (log_queue_lines)"
                );
                // Unchanged: the warning itself went into the queue, so the lines it counts
                // are told.
                if dropped.dropped_lines() == now {
                    reported = now;
                }
            }
        }
    }
}

/// Where the log thread writes: standard error, or the configured target's socket (falling back
/// to standard error, with the reason, when that cannot be opened).
enum Output {
    Stderr(Stderr),
    Target(crate::log_targets::Sink),
}

impl std::io::Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Output::Stderr(s) => s.write(buf),
            Output::Target(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Output::Stderr(s) => s.flush(),
            Output::Target(t) => t.flush(),
        }
    }
}

fn target_writer(target: &LogTarget) -> (Output, Option<std::io::Error>) {
    use crate::log_targets::Sink;
    let sink = match target {
        LogTarget::Stderr => return (Output::Stderr(Stderr), None),
        LogTarget::Journald(path) => Sink::journald(path.clone()),
        LogTarget::Syslog(address) => Sink::syslog(address),
    };
    match sink {
        Ok(s) => (Output::Target(s), None),
        Err(e) => (Output::Stderr(Stderr), Some(e)),
    }
}

/// Standard error as the log thread writes it: a line that cannot be written (the reader closed
/// the pipe, a full disk behind a redirect) is lost, so it is counted in
/// `shuck_log_lines_dropped_total` as a dropped one is, and the thread goes on with the next.
/// (tracing-appender's writer thread ignores write errors, and `eprintln!` on a closed pipe
/// would panic.)
struct Stderr;

impl std::io::Write for Stderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::io::stderr().write(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Err(e),
            Err(_) => {
                shuck_proxy::logging::LINES_DROPPED.inc();
                Ok(buf.len())
            }
            written => written,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        // Standard error is unbuffered; a failed flush has nothing left to lose.
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// The level filter, replaceable on reload (`log_level`).
static LEVEL: OnceLock<reload::Handle<EnvFilter, Registry>> = OnceLock::new();
/// Whether libraries' lines (rustls') are wanted: only at debug or finer.
static LIBRARIES_AT_DEBUG: AtomicBool = AtomicBool::new(false);

fn at_debug(filter: &EnvFilter) -> bool {
    filter
        .max_level_hint()
        .is_some_and(|l| l >= LevelFilter::DEBUG)
}

/// Applies a reloaded `log_level` (unless RUST_LOG rules); says whether it changed anything.
pub(crate) fn set_level(level: &str) -> bool {
    let Some(handle) = LEVEL.get() else {
        return false;
    };
    let filter = EnvFilter::new(level);
    let debug = at_debug(&filter);
    let changed = handle
        .with_current(|f| f.to_string() != filter.to_string())
        .unwrap_or(false);
    if changed && handle.reload(filter).is_ok() {
        LIBRARIES_AT_DEBUG.store(debug, Ordering::Relaxed);
        // Callsites cached as never-enabled must be asked again.
        tracing::callsite::rebuild_interest_cache();
        return true;
    }
    false
}

/// Lets shuck's own events through (the level filter decides) and libraries' only at debug,
/// spending their budget once per event, in `event_enabled` (the `log` bridge asks `enabled`
/// twice per line).
struct LibraryLines;

impl LibraryLines {
    fn debug() -> bool {
        LIBRARIES_AT_DEBUG.load(Ordering::Relaxed)
    }
}

impl<S> Filter<S> for LibraryLines {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        Self::debug() || shuck_proxy::logging::is_ours(meta)
    }

    /// Cached per callsite; `set_level` has the cache rebuilt when the level changes.
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if Self::debug() || shuck_proxy::logging::is_ours(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn event_enabled(&self, event: &Event<'_>, _: &Context<'_, S>) -> bool {
        shuck_proxy::logging::is_ours(event.metadata())
            || shuck_proxy::logging::library_line_allowed()
    }

    /// No limit of its own: the level filter's hint stands (a missing hint would let every
    /// `log` call in rustls through to the filters).
    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::TRACE)
    }
}
