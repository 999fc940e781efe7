//! Certificates from an ACME CA (RFC 8555): the challenge answered on the frontend's own
//! listener (TLS-ALPN-01, RFC 8737, in `challenge`), on port 80 (HTTP-01, `http01`, served by
//! `server::redirect`) or in the DNS (DNS-01 by dynamic update, `dns01`), the order (`order`), the state directory
//! (`state`) and the renewal schedule (`renewal`), which runs on the main thread's runtime and
//! says when a frontend's certificate changed, for the server to load it into every worker.

mod ari;
pub(crate) mod ask;
pub(crate) mod challenge;
pub(crate) mod dns01;
pub(crate) mod fleet;
pub(crate) mod http01;
pub(crate) mod on_demand;
mod order;
pub(crate) mod renewal;
pub(crate) mod state;

use std::path::PathBuf;

/// Why getting a certificate failed (or could not start).
#[derive(Debug, thiserror::Error)]
pub(crate) enum AcmeError {
    /// The CA answered with an error (its problem document) or could not be reached.
    #[error("{0}")]
    Ca(#[from] instant_acme::Error),
    /// The CA refused what was asked (an invalid authorization, no TLS-ALPN-01 challenge).
    #[error("{0}")]
    Refused(String),
    #[error("{}: {source}", path.display())]
    State {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: unreadable account: {message}", path.display())]
    Account { path: PathBuf, message: String },
    #[error("cannot make a key or request: {0}")]
    Key(#[from] rcgen::Error),
    /// A DNS server refused the update, did not answer, or never showed the record.
    #[error("DNS server {server}: {message}")]
    Dns {
        server: std::net::SocketAddr,
        message: String,
    },
    /// The DNS server answered the update with an error.
    #[error("DNS server {server}: the update was refused: {message}")]
    DnsRefused {
        server: std::net::SocketAddr,
        message: String,
        /// The answer says nothing was changed (so nothing is to be removed).
        nothing_added: bool,
    },
    /// The TSIG key file is not one (the message never holds the secret).
    #[error("{}: {message}", path.display())]
    TsigKey { path: PathBuf, message: String },
    #[error("cannot make the challenge certificate: {0}")]
    Challenge(String),
    #[error("{0}")]
    Internal(String),
}

impl AcmeError {
    /// Whether the CA said to slow down (RFC 8555 §6.6): the next attempt waits the longest.
    pub(crate) fn is_rate_limit(&self) -> bool {
        matches!(self, AcmeError::Ca(instant_acme::Error::Api(p))
            if p.r#type.as_deref() == Some("urn:ietf:params:acme:error:rateLimited"))
    }
}
