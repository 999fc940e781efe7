//! Where decrypted connections go: the `backend` addresses, TCP or `unix:/path` sockets (or the
//! built-in demo page), how a
//! worker chooses among them (`backend_policy`) and how failed backends are avoided
//! (`backend_cooldown`).

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::section::{OnChange, Section};
use super::{defaults, duration_or, key_err, KeyError, OneOrMany, RawFrontend};

/// Backends per frontend; the backend pool's health snapshot is a 128-bit mask.
pub const MAX_BACKENDS: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The built-in page describing the connection.
    Demo,
    /// Backends, chosen by the frontend's `BackendPolicy`.
    Servers(Vec<BackendAddr>),
}

#[derive(Clone, PartialEq, Eq)]
pub struct BackendAddr {
    /// As written, for logs.
    pub name: String,
    pub addr: Target,
    /// Its share of new connections relative to the others (1 to [`MAX_WEIGHT`]).
    pub weight: u32,
}

/// The largest `weight`: a worker's round-robin schedule holds the sum of the weights.
pub const MAX_WEIGHT: u32 = 100;

/// A `backend` entry as written: an address, or a table with its weight.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum BackendEntry {
    Address(String),
    Weighted(WeightedBackend),
}

/// `{ address = "…", weight = 3 }`: a misspelt key is an error, not a weight of 1.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedBackend {
    pub address: String,
    pub weight: Option<u32>,
}

impl From<String> for BackendEntry {
    fn from(address: String) -> Self {
        BackendEntry::Address(address)
    }
}

/// Where a backend listens: a TCP address, or a Unix socket (`unix:/path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp(a) => write!(f, "{a}"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// The address, the name it was given when that was a host name, and its weight when not 1.
impl fmt::Debug for BackendAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.name == self.addr.to_string() {
            write!(f, "{}", self.addr)?;
        } else {
            write!(f, "{} ({})", self.name, self.addr)?;
        }
        if self.weight != 1 {
            write!(f, " weight {}", self.weight)?;
        }
        Ok(())
    }
}

/// How a worker picks the backend for a new connection. Backends in cooldown are tried last
/// whatever the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BackendPolicy {
    /// Each worker goes round the list in order.
    #[default]
    RoundRobin,
    /// Each worker picks the backend with the fewest connections it has open itself, ties
    /// broken round-robin.
    LeastConnections,
}

impl fmt::Display for BackendPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendPolicy::RoundRobin => "round_robin",
            BackendPolicy::LeastConnections => "least_connections",
        })
    }
}

/// `backend`, `backend_policy`, `connect_timeout`, `backend_cooldown`: what a frontend's
/// backend pool is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backends {
    pub target: Backend,
    pub policy: BackendPolicy,
    pub connect_timeout: Duration,
    pub cooldown: Duration,
    /// Active checks of these backends, if any.
    pub health_check: Option<super::HealthCheck>,
}

/// A new pool for new connections: its health and counts start afresh, so workers keep the old
/// pool while this section is unchanged (`server::worker`).
impl Section for Backends {
    const KEY: &'static str = "backend";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

impl RawFrontend {
    /// `base`: the configuration file's directory, which a relative `unix:` path is under.
    pub(super) fn validate_backend(&self, base: Option<&Path>) -> Result<Backends, KeyError> {
        let backend = match self.backend.clone().map(OneOrMany::into_vec) {
            None => Backend::Demo,
            Some(v) if v.is_empty() => Backend::Demo,
            Some(v) if v.len() > MAX_BACKENDS => {
                return Err(key_err(
                    "backend",
                    format!("{} addresses: at most {MAX_BACKENDS} per frontend", v.len()),
                ))
            }
            Some(v) => {
                let mut out = Vec::with_capacity(v.len());
                for entry in v {
                    let (name, weight) = match entry {
                        BackendEntry::Address(a) => (a, 1),
                        BackendEntry::Weighted(w) => (w.address, w.weight.unwrap_or(1)),
                    };
                    if !(1..=MAX_WEIGHT).contains(&weight) {
                        return Err(key_err(
                            "backend",
                            format!("{name:?}: weight {weight} is not in 1..={MAX_WEIGHT}"),
                        ));
                    }
                    let addr = match name.strip_prefix("unix:") {
                        Some("") => {
                            return Err(key_err(
                                "backend",
                                "\"unix:\" names no socket: write unix:/path/to/socket",
                            ))
                        }
                        Some(path) => Target::Unix(super::resolve_path(base, PathBuf::from(path))),
                        None => Target::Tcp(resolve(&name).map_err(|m| key_err("backend", m))?),
                    };
                    out.push(BackendAddr { name, addr, weight });
                }
                Backend::Servers(out)
            }
        };
        // Without a backend of its own, a frontend's backend keys are for its routes to inherit.
        let for_routes = !self.routes.is_empty();
        if self.backend_policy.is_some() && matches!(backend, Backend::Demo) && !for_routes {
            return Err(key_err(
                "backend_policy",
                "needs a backend: the built-in demo backend is a single page, there is nothing to choose between",
            ));
        }
        let cooldown = duration_or(
            "backend_cooldown",
            self.backend_cooldown.as_deref(),
            defaults::BACKEND_COOLDOWN,
        )?;
        let health_check = match &self.health_check {
            None => None,
            Some(_) if matches!(backend, Backend::Demo) && !for_routes => {
                return Err(key_err("health_check", "needs a backend to check"))
            }
            Some(_) if matches!(backend, Backend::Demo) => None,
            Some(raw) => Some(raw.validate()?),
        };
        Ok(Backends {
            target: backend,
            policy: self.backend_policy.unwrap_or_default(),
            connect_timeout: self.validate_connect_timeout()?,
            cooldown,
            health_check,
        })
    }
}

fn resolve(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    if !s.contains(':') {
        return Err(format!("{s:?} has no port: write host:port"));
    }
    // Hostnames are resolved once at start: a terminator should not depend on DNS per connection.
    let mut addrs = s
        .to_socket_addrs()
        .map_err(|e| format!("{s:?} cannot be resolved: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}
