//! Wire formats shuck reads and writes itself: the PROXY protocol, the ClientHello fields rustls
//! does not expose, TLS parameter names.

pub(crate) mod hello_fields;
pub mod proxy_protocol;
pub(crate) mod tls_params;
