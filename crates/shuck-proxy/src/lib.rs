//! shuck's engine: configuration, workers, TLS, relay to backends.
//!
//! Entry points: [`config::RawConfig`] (parsed from a file or built from flags) validated into
//! [`config::Config`], [`server::Server`]
//! (`prepare` binds and loads certificates, `run` serves until a shutdown future completes), and
//! [`check::report`] for `shuck check`.

pub mod backend;
pub(crate) mod buf_pool;
pub mod check;
pub mod config;
pub mod connection;
pub mod demo;
pub mod error;
pub mod limits;
pub mod listener;
pub mod log_limit;
pub mod metrics;
pub mod proxy_in;
pub mod proxy_out;
pub mod proxy_protocol;
pub mod relay;
pub mod server;
pub mod tls;
pub mod worker;

pub use error::{Error, Result};
