//! What shuck's tests share, by job: `pki` (certificates generated at test time), `configs`
//! (configuration files key by key), `harness` (the
//! engine started in-process, for shuck-proxy's and shuck-bench's tests), `process` (the real
//! `shuck` binary on port 0, backends, bounded commands), `clients` (curl, `openssl s_client`,
//! metrics), `ports` (ports to name before a server starts), `peers` (HAProxy and nginx), `dns`
//! (dnsmasq), `redis` (servers and clusters) and
//! `tlv_backend` (a raw PROXY v2
//! backend).

pub mod clients;
pub mod configs;
pub mod dns;
pub mod harness;
pub mod peers;
pub mod pki;
pub mod ports;
pub mod process;
pub mod redis;
pub mod tlv_backend;
