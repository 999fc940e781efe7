//! shuck's engine: configuration, workers, TLS, relay to backends.
//!
//! Entry points: [`config::RawConfig`] (parsed from a file or built from flags) validated into
//! [`config::Config`], [`server::Server`]
//! (`prepare` binds and loads certificates, `run` serves until a shutdown future completes), and
//! [`check::report`] for `shuck check`.

mod backend;
mod certs;
pub mod config;
mod conn;
mod error;
mod mem;
mod metrics;
mod obs;
mod proto;
pub mod server;
mod sessions;
mod store;
mod sys;
mod tls;
mod worker;

// The lasting public paths, wherever the modules live.
pub use obs::logging;
pub use proto::{pkcs11_uri, proxy_protocol};
pub use server::{bindings, check, control, reload, running};
pub use sys::{access, notify, pid_file, upgrade};

/// What the fuzz targets in `crates/shuck-proxy/fuzz` call: not an API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::tls::stream::records::differential::{check, compare, Disagreement};
}

pub use error::{Error, Result};
pub use metrics::{set_build_info, BuildInfo};
/// A new random ticket key as a key file holds it (`shuck ticket-key`).
pub use sessions::ticket_keys::generate as new_ticket_key;
pub use tls::backend_tls::AnyServerCertificate;
pub use tls::pkcs11;
pub use tls::stream::ktls::kernel_has_tls;
