//! Wire formats shuck reads and writes itself: the PROXY protocol, TLS parameter names.

pub mod proxy_protocol;
pub(crate) mod tls_params;
