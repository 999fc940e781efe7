//! The log subscriber: compact or JSON lines on standard error, the configured level (or
//! `RUST_LOG`), and libraries' lines only at debug and within their own budget
//! (`shuck_proxy::logging`).

use std::io::IsTerminal;

use shuck_proxy::config::{Config, LogFormat};
use tracing::subscriber::Interest;
use tracing::{Event, Metadata};
use tracing_subscriber::filter::{FilterExt, LevelFilter};
use tracing_subscriber::layer::{Context, Filter};
use tracing_subscriber::prelude::*;
use tracing_subscriber::{fmt, EnvFilter};

pub fn init(config: &Config) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&config.log_level));
    let libraries = LibraryLines {
        debug: filter
            .max_level_hint()
            .is_some_and(|l| l >= LevelFilter::DEBUG),
    };
    // Colours only on a terminal: journald and log files should not get escape codes.
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let layer = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false);
    let layer = match config.log_format {
        LogFormat::Compact => layer.compact().boxed(),
        LogFormat::Json => layer.json().flatten_event(true).boxed(),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter.and(libraries)))
        .init();
}

/// Lets shuck's own events through (the level filter decides) and libraries' only at debug,
/// spending their budget once per event, in `event_enabled` (the `log` bridge asks `enabled`
/// twice per line).
struct LibraryLines {
    debug: bool,
}

impl<S> Filter<S> for LibraryLines {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        self.debug || shuck_proxy::logging::is_ours(meta)
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.debug || shuck_proxy::logging::is_ours(meta) {
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
