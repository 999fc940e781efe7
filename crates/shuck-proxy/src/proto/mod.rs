//! Wire formats shuck reads and writes itself: the PROXY protocol, the ClientHello fields rustls
//! does not expose and the JA4 fingerprint drawn from them, TLS parameter names.

pub(crate) mod hello_fields;
pub(crate) mod ja4;
pub mod pkcs11_uri;
pub mod proxy_protocol;
pub(crate) mod tls_params;
