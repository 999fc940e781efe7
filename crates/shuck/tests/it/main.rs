//! shuck's integration tests, one binary (one link of tokio, rustls and aws-lc instead of one per
//! area), a module per area. The helpers they share are the `shuck-test-support` crate.

mod accept_proxy;
mod acme;
mod admission;
mod backend_tls;
#[cfg(feature = "bench")]
mod bench;
mod cert_layouts;
mod cli;
mod ctl;
mod dns;
mod faults;
mod import;
mod ktls;
mod log_targets;
mod messages;
mod metrics;
mod metrics_series;
mod mtls;
mod ocsp;
mod peers;
mod pkcs11;
mod relay;
mod reliability;
mod robustness;
mod routes;
mod scanners;
mod sessions;
mod systemd;
mod tls;
