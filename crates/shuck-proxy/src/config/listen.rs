//! Where a frontend accepts connections: `listen`, the kernel queue behind it (`backlog`) and
//! how long the kernel keeps a silent connection from it (`defer_accept`).

use std::net::SocketAddr;
use std::time::Duration;

use super::section::{OnChange, Section};
use super::{defaults, duration_or, key_err, Frontend, KeyError, OneOrMany, RawFrontend};

/// The longest `defer_accept`: the kernel counts it in SYN-ACK retransmissions, and a client
/// that connects and says nothing for longer is better served by `handshake_timeout`.
const MAX_DEFER_ACCEPT: Duration = Duration::from_secs(60);

/// `listen`, `backlog`, `defer_accept`.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Listen {
    pub addrs: Vec<SocketAddr>,
    pub backlog: u32,
    #[serde(serialize_with = "super::ser::duration")]
    pub defer_accept: Duration,
}

/// Addresses added are bound and those removed closed; `backlog` and `defer_accept` are set
/// again on every address kept.
impl Section for Listen {
    const KEY: &'static str = "listen";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

impl RawFrontend {
    pub(super) fn validate_listen(&self) -> Result<Listen, KeyError> {
        let raw = self
            .listen
            .clone()
            .map_or_else(|| vec![defaults::LISTEN.to_string()], OneOrMany::into_vec);
        if raw.is_empty() {
            return Err(key_err("listen", "empty list: give at least one address"));
        }
        let mut addrs = Vec::with_capacity(raw.len());
        for l in &raw {
            for addr in listen_addresses(l)? {
                if addrs.contains(&addr) {
                    return Err(key_err("listen", format!("{addr} is listed twice")));
                }
                addrs.push(addr);
            }
        }
        let backlog = self.backlog.unwrap_or(defaults::BACKLOG);
        if backlog == 0 || backlog > 65535 {
            return Err(key_err("backlog", format!("{backlog} is not in 1..=65535")));
        }
        let defer_accept = duration_or(
            "defer_accept",
            self.defer_accept.as_deref(),
            defaults::DEFER_ACCEPT,
        )?;
        if defer_accept > MAX_DEFER_ACCEPT {
            return Err(key_err(
                "defer_accept",
                format!(
                    "at most {}s (\"0s\" turns it off)",
                    MAX_DEFER_ACCEPT.as_secs()
                ),
            ));
        }
        Ok(Listen {
            addrs,
            backlog,
            defer_accept,
        })
    }
}

/// No two frontends may listen on one address: SO_REUSEPORT would let both bind it and the
/// kernel would silently split clients between them. Port 0 picks a fresh port each time.
pub(super) fn check_not_shared(fe: &Frontend, earlier: &[Frontend]) -> Result<(), KeyError> {
    for addr in fe.listen.addrs.iter().filter(|a| a.port() != 0) {
        if let Some(other) = earlier.iter().find(|f| f.listen.addrs.contains(addr)) {
            return Err(key_err(
                "listen",
                format!("{addr} is already used by frontend {:?}", other.name),
            ));
        }
    }
    Ok(())
}

/// The addresses one `listen` entry stands for: an `IP:port`, or `*:port` and `:port` (as in
/// HAProxy's `bind`) for every address, IPv4's `0.0.0.0` and, where the host has IPv6,
/// `[::]` (IPv6 only, so the two do not clash).
pub(super) fn listen_addresses(entry: &str) -> Result<Vec<SocketAddr>, KeyError> {
    let bad = || {
        key_err(
            "listen",
            format!("{entry:?} is not an address: write IP:port (IPv6 as [::1]:443), or *:port for every address"),
        )
    };
    let Some(port) = entry.strip_prefix("*:").or_else(|| entry.strip_prefix(':')) else {
        return entry.parse().map(|a| vec![a]).map_err(|_| bad());
    };
    let port: u16 = port.parse().map_err(|_| bad())?;
    let mut all = vec![SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port))];
    if crate::sys::listener::host_has_ipv6() {
        all.push(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)));
    }
    Ok(all)
}
