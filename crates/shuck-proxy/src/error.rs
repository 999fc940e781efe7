//! The one error type of the engine. Every variant names the file, key or address involved so an
//! operator can act on the message without reading code.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read configuration file {path}: {source}")]
    ConfigRead { path: PathBuf, source: io::Error },

    #[error("{origin}: {message}")]
    ConfigSyntax { origin: String, message: String },

    #[error("{origin}: {key}: {message}")]
    ConfigValue {
        origin: String,
        key: String,
        message: String,
    },

    #[error("certificate {path}: cannot read: {source}")]
    CertRead { path: PathBuf, source: io::Error },

    #[error("certificate {path}: {message}")]
    Cert { path: PathBuf, message: String },

    #[error("ticket key file {path}: {message}")]
    TicketKeys { path: PathBuf, message: String },

    #[error("session store {url}: {message}")]
    SessionStore { url: String, message: String },

    #[error("frontend {frontend:?}: TLS settings rejected: {source}")]
    Tls {
        frontend: String,
        source: rustls::Error,
    },

    #[error("cannot listen on {addr} ({owner}): {source}")]
    Bind {
        addr: SocketAddr,
        owner: Listener,
        source: io::Error,
    },

    /// The address is taken: by another program, or by another shuck (which this one would
    /// otherwise share it with, the kernel splitting connections between them).
    #[error("cannot listen on {addr} ({owner}): another process already listens there; stop it or choose another address (`ss -ltnp 'sport = :{}'` names it). {}", addr.port(), owner.when_in_use())]
    AddressInUse { addr: SocketAddr, owner: Listener },

    #[error("the open-files limit ({fd_limit}) leaves no descriptors for connections: each takes 2 and shuck keeps {reserved} for itself; raise it (ulimit -n, LimitNOFILE= under systemd)")]
    FdLimit { fd_limit: u64, reserved: u64 },

    #[error("cannot start worker {worker}: {source}")]
    Worker { worker: usize, source: io::Error },

    #[error("cannot write ready file {path}: {source}")]
    ReadyFile { path: PathBuf, source: io::Error },

    #[error("state directory: {0}")]
    StateDir(String),

    /// `acme.dns_update.tsig_key_file` cannot be read or is not a key (never shows the secret).
    #[error("frontend {frontend:?}: acme.dns_update: {message}")]
    TsigKey { frontend: String, message: String },

    /// A reload that cannot be applied as a whole (nothing of it was).
    #[error("reload refused: {0}")]
    Reload(String),

    /// A reload abandoned while it loaded (past `reload_timeout`, or a stop came first): the
    /// signal loop has said so already.
    #[error(
        "reload abandoned (past reload_timeout, or a stop came first); nothing of it was applied"
    )]
    ReloadAbandoned,

    #[error("cannot generate the self-signed certificate: {0}")]
    SelfSigned(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What an address is listened on for, as messages name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listener {
    Frontend(String),
    Metrics,
    /// A `[[redirect]]` listener (plain HTTP).
    Redirect,
}

impl std::fmt::Display for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Listener::Frontend(name) => write!(f, "frontend {name:?}"),
            Listener::Metrics => f.write_str("metrics_listen"),
            Listener::Redirect => f.write_str("redirect.listen"),
        }
    }
}

impl Listener {
    /// What to do about an address in use, beyond stopping whoever has it.
    fn when_in_use(&self) -> &'static str {
        match self {
            Listener::Frontend(_) => "To replace a running shuck, send it SIGUSR2 (an upgrade in place), or start the new one with --takeover to share the address until the old one stops",
            Listener::Metrics => "metrics_listen is never shared, even with --takeover: give this instance another one, or stop the process that has it",
            Listener::Redirect => "a plain-HTTP port is never shared (a web server may have it): stop whoever listens there, or give [[redirect]] another address",
        }
    }
}

impl Error {
    /// A failed bind or listen on `addr`: [`Error::AddressInUse`] when the address is taken,
    /// [`Error::Bind`] otherwise.
    pub fn bind(addr: SocketAddr, owner: Listener, source: io::Error) -> Error {
        if source.kind() == io::ErrorKind::AddrInUse {
            Error::AddressInUse { addr, owner }
        } else {
            Error::Bind {
                addr,
                owner,
                source,
            }
        }
    }
}
