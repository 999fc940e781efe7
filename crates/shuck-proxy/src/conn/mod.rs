//! One client connection's pipeline: the PROXY header in, the handshake, the header to the backend, the relay or the demo page, and how each error is classified.

pub(crate) mod backend_header;
pub(crate) mod conn_error;
pub(crate) mod connection;
pub(crate) mod demo;
pub(crate) mod proxy_in;
pub(crate) mod relay;
