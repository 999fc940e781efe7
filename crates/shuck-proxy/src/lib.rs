//! shuck's engine: configuration, workers, TLS, relay to backends.
//!
//! Entry points: [`config::RawConfig`] (parsed from a file or built from flags) validated into
//! [`config::Config`], [`server::Server`]
//! (`prepare` binds and loads certificates, `run` serves until a shutdown future completes), and
//! [`check::report`] for `shuck check`.

mod accept;
mod acme;
mod backend;
pub mod bindings;
mod buf_pool;
mod buf_queue;
pub mod check;
mod clock;
pub mod config;
mod conn_error;
mod connection;
mod demo;
mod error;
mod files;
mod limits;
mod listener;
mod log_limit;
pub mod logging;
mod metrics;
pub mod notify;
mod ocsp;
pub mod pid_file;
mod proxy_in;
mod proxy_out;
pub mod proxy_protocol;
mod relay;
pub mod reload;
pub mod running;
mod sealing;
pub mod server;
mod session_store;
mod sockopt;
mod staple_refresh;
mod state_files;
mod tls;
mod tls_params;
pub mod upgrade;
mod worker;

/// What the fuzz targets in `crates/shuck-proxy/fuzz` call: not an API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::tls::records::differential::{check, compare, Disagreement};
}

pub use error::{Error, Result};
pub use metrics::{set_build_info, BuildInfo};
/// A new random ticket key as a key file holds it (`shuck ticket-key`).
pub use tls::ticket_keys::generate as new_ticket_key;
