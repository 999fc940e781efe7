//! Test harness, by job: `pki` (certificates generated at test time), `process` (the real `shuck`
//! binary on port 0, backends, bounded commands), `clients` (curl, `openssl s_client`, metrics),
//! `peers` (HAProxy and nginx) and `tlv_backend` (a raw PROXY v2 backend).
#![allow(dead_code)] // each test file uses a different part of the harness

pub mod clients;
pub mod peers;
// The same PKI as the engine's in-process tests.
#[path = "../../../shuck-proxy/tests/harness/pki.rs"]
pub mod pki;
pub mod process;
pub mod tlv_backend;
