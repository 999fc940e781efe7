//! Where decrypted connections go: the `backend` addresses, TCP or `unix:/path` sockets (or the
//! built-in demo page), how a
//! worker chooses among them (`backend_policy`) and how failed backends are avoided
//! (`backend_cooldown`).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::section::{OnChange, Section};
use super::{defaults, duration_or, key_err, KeyError, OneOrMany, RawFrontend};

/// Backends per frontend; the backend pool's health snapshot is a 128-bit mask.
pub const MAX_BACKENDS: usize = 128;

#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// The built-in page describing the connection.
    Demo,
    /// Backends, chosen by the frontend's `BackendPolicy`.
    Servers(Vec<BackendAddr>),
}

#[derive(Clone, PartialEq, Eq, Hash)]
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

/// Where a backend listens: a TCP address, a Unix socket (`unix:/path`), or a host name whose
/// addresses DNS gives (each one a member of the pool, looked up again every `dns_refresh`).
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
    Name(HostPort),
}

/// A host name and a port, as `backend` gives them.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// Lower-case, without a trailing dot.
    pub host: String,
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Tcp(a) => write!(f, "{a}"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
            Target::Name(n) => write!(f, "{n}"),
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
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
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Backends {
    pub target: Backend,
    pub policy: BackendPolicy,
    #[serde(serialize_with = "super::ser::duration")]
    pub connect_timeout: Duration,
    #[serde(serialize_with = "super::ser::duration")]
    pub cooldown: Duration,
    /// Active checks of these backends, if any.
    pub health_check: Option<super::HealthCheck>,
    /// How often host names are looked up again; `None`: when the answer's TTL ends (kept
    /// between [`MIN_DNS_REFRESH`] and [`MAX_TTL_REFRESH`]).
    #[serde(serialize_with = "super::ser::opt_duration")]
    pub dns_refresh: Option<Duration>,
    /// TLS to these backends (`backend_tls`), if any.
    pub tls: Option<super::backend_tls::BackendTls>,
}

/// The shortest `dns_refresh`, and the floor under a TTL.
pub const MIN_DNS_REFRESH: Duration = Duration::from_secs(1);
/// The ceiling over a TTL when `dns_refresh` is not set.
pub const MAX_TTL_REFRESH: Duration = Duration::from_secs(300);
/// The longest `dns_refresh`.
const MAX_DNS_REFRESH: Duration = Duration::from_secs(3600);

impl Backends {
    /// The host names among the backends.
    pub fn names(&self) -> impl Iterator<Item = &HostPort> {
        let addrs = match &self.target {
            Backend::Servers(v) => v.as_slice(),
            Backend::Demo => &[],
        };
        addrs.iter().filter_map(|b| match &b.addr {
            Target::Name(n) => Some(n),
            _ => None,
        })
    }
}

/// A new pool for new connections: its health and counts start afresh, so workers keep the old
/// pool while this section is unchanged (`worker`).
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
                        None => host_or_address(&name).map_err(|m| key_err("backend", m))?,
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
        let tls = match &self.backend_tls {
            None => None,
            Some(raw) => Some(raw.validate(base)?),
        };
        Ok(Backends {
            target: backend,
            policy: self.backend_policy.unwrap_or_default(),
            connect_timeout: self.validate_connect_timeout()?,
            cooldown,
            health_check,
            dns_refresh: self.validate_dns_refresh()?,
            tls,
        })
    }

    fn validate_dns_refresh(&self) -> Result<Option<Duration>, KeyError> {
        let Some(text) = self.dns_refresh.as_deref() else {
            return Ok(None);
        };
        let d = duration_or("dns_refresh", Some(text), MIN_DNS_REFRESH)?;
        if !(MIN_DNS_REFRESH..=MAX_DNS_REFRESH).contains(&d) {
            return Err(key_err(
                "dns_refresh",
                format!("{text:?}: between 1s and 1h (leave it out to follow the answers' TTL)"),
            ));
        }
        Ok(Some(d))
    }
}

/// `ip:port`, or `host:port` with a host name DNS is asked about when the server runs (never
/// here: `shuck check` and a reload's validation do not wait on DNS).
fn host_or_address(s: &str) -> Result<Target, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(Target::Tcp(a));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("{s:?} has no port: write host:port"));
    };
    let port = port
        .parse::<u16>()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("{s:?}: the port is not a number from 1 to 65535"))?;
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    if !is_host_name(&host) {
        return Err(format!(
            "{s:?} is neither ip:port (IPv6 as [::1]:8080) nor host:port with a DNS name"
        ));
    }
    Ok(Target::Name(HostPort { host, port }))
}

/// Letters, digits and hyphens in dot-separated labels of 1 to 63 bytes, 253 at most in all
/// (underscores allowed: service names use them).
fn is_host_name(host: &str) -> bool {
    // An all-digit last label is a mistyped address (`10.0.0.300`), not a name.
    let numeric_tld = host
        .rsplit('.')
        .next()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()));
    !host.is_empty()
        && !numeric_tld
        && host.len() <= 253
        && host.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}
