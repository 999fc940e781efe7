//! The stages of a connection that are not TLS: the PROXY header in (`proxy_in`), the header to
//! the backend (`backend_header`), the relay or the demo page, and how each stage's error is
//! classified (`conn_error`). The pipeline that runs them in order is `worker::connection`.

pub(crate) mod backend_header;
pub(crate) mod conn_error;
pub(crate) mod demo;
pub(crate) mod idle;
pub(crate) mod proxy_in;
pub(crate) mod relay;
