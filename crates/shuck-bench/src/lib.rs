//! shuck-bench: the benchmark method of Vincent Bernat's TLS-termination articles (K connections per TLS session, an
//! offered-rate ramp, the latency-bounded maximum) as a library behind `shuck bench` and
//! `shuck speed`.
#![forbid(unsafe_code)]

pub mod error;
pub mod report;
pub mod stats;
pub mod verdict;

pub use error::BenchError;
pub mod backend;
pub mod cli;
pub mod compare;
pub mod http;
pub mod idle;
pub mod load;
pub mod plot;
pub mod procfs;
pub mod speed;
pub mod speed_token;
pub mod tls;
