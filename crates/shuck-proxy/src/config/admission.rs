//! Who may connect and how much: `allow`, `deny`, `deny_ja4`, the frontend's own
//! `max_connections`, and `per_client` limits (concurrent connections and the rate of full
//! handshakes per address or prefix) with their table's size, `per_client_table`.

use std::net::IpAddr;
use std::time::Duration;

use serde::Deserialize;

use super::section::{OnChange, Section};
use super::{key_err, KeyError, RawFrontend};

/// The admission section of a frontend.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct Admission {
    /// Networks a client must be in (empty: any).
    pub allow: NetList,
    /// Networks refused, whatever `allow` says.
    pub deny: NetList,
    /// JA4 fingerprints refused after the ClientHello.
    pub deny_ja4: Vec<String>,
    /// The frontend's own cap on open connections, beside the process's.
    pub max_connections: Option<usize>,
    pub per_client: Option<PerClient>,
}

impl Section for Admission {
    const KEY: &'static str = "admission";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

impl Admission {
    /// Whether any rule asks for the client's address to be checked.
    pub fn checks_address(&self) -> bool {
        !self.allow.is_empty() || !self.deny.is_empty()
    }

    /// The prefix lengths (IPv4, IPv6) that make one client: `per_client`'s, or its defaults.
    pub fn client_prefixes(&self) -> (u8, u8) {
        self.per_client
            .map_or((DEFAULT_IPV4_PREFIX, DEFAULT_IPV6_PREFIX), |p| {
                (p.ipv4_prefix, p.ipv6_prefix)
            })
    }
}

/// `per_client = { … }`: what one client (an address, or the prefix it is in) may hold and do.
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerClient {
    /// Open connections at once; `None`: no cap.
    pub connections: Option<u32>,
    /// Full handshakes: one per `interval` on average, `burst` at once.
    pub handshakes: Option<HandshakeRate>,
    pub ipv4_prefix: u8,
    pub ipv6_prefix: u8,
    /// Entries in each row of the table the counts are kept in (a power of two).
    pub table: usize,
}

/// A rate of full handshakes with its burst.
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeRate {
    /// The time one handshake's worth of budget takes to come back.
    #[serde(serialize_with = "super::ser::duration")]
    pub interval: Duration,
    pub burst: u32,
}

/// A client is one IPv4 address, or one IPv6 /64 (what one host or subscriber is usually given).
const DEFAULT_IPV4_PREFIX: u8 = 32;
const DEFAULT_IPV6_PREFIX: u8 = 64;

/// Table entries by default: 65,536 per row, 2 rows of 16 bytes each, 2 MiB per frontend.
const PER_CLIENT_TABLE: usize = 65_536;
const PER_CLIENT_TABLE_RANGE: (usize, usize) = (1024, 1 << 24);

/// `per_client = { … }` as written.
#[derive(Deserialize, Debug, Clone, Default)]
#[serde(deny_unknown_fields)]
pub struct RawPerClient {
    pub connections: Option<u32>,
    pub handshakes: Option<String>,
    pub burst: Option<u32>,
    pub ipv4_prefix: Option<u8>,
    pub ipv6_prefix: Option<u8>,
}

impl RawFrontend {
    pub(super) fn validate_admission(&self) -> Result<Admission, KeyError> {
        let per_client = match &self.per_client {
            Some(raw) => Some(per_client(raw, self.per_client_table)?),
            None if self.per_client_table.is_some() => {
                return Err(key_err(
                    "per_client_table",
                    "has no effect without per_client",
                ))
            }
            None => None,
        };
        if self.max_connections == Some(0) {
            return Err(key_err("max_connections", "must be at least 1"));
        }
        // Fingerprints are lowercase hex: an entry written in capitals still matches.
        let deny_ja4: Vec<String> = (self.deny_ja4.iter().flatten())
            .map(|j| j.to_ascii_lowercase())
            .collect();
        for j in &deny_ja4 {
            check_ja4(j)?;
        }
        Ok(Admission {
            allow: NetList::parse("allow", self.allow.as_deref().unwrap_or_default())?,
            deny: NetList::parse("deny", self.deny.as_deref().unwrap_or_default())?,
            deny_ja4,
            max_connections: self.max_connections,
            per_client,
        })
    }
}

fn per_client(raw: &RawPerClient, table: Option<usize>) -> Result<PerClient, KeyError> {
    let err = |what: &str, m: String| key_err(&format!("per_client.{what}"), m);
    if raw.connections == Some(0) {
        return Err(err("connections", "must be at least 1".into()));
    }
    let handshakes = match &raw.handshakes {
        Some(s) => {
            let per = parse_rate(s).map_err(|m| err("handshakes", m))?;
            let burst = raw.burst.unwrap_or(per.1.max(1));
            if burst == 0 {
                return Err(err("burst", "must be at least 1".into()));
            }
            Some(HandshakeRate {
                interval: per.0,
                burst,
            })
        }
        None if raw.burst.is_some() => {
            return Err(err("burst", "has no effect without handshakes".into()))
        }
        None => None,
    };
    if raw.connections.is_none() && handshakes.is_none() {
        return Err(key_err(
            "per_client",
            "limits nothing: give connections, handshakes or both",
        ));
    }
    let ipv4_prefix = raw.ipv4_prefix.unwrap_or(DEFAULT_IPV4_PREFIX);
    let ipv6_prefix = raw.ipv6_prefix.unwrap_or(DEFAULT_IPV6_PREFIX);
    if !(1..=32).contains(&ipv4_prefix) {
        return Err(err("ipv4_prefix", format!("{ipv4_prefix} is not 1 to 32")));
    }
    if !(1..=128).contains(&ipv6_prefix) {
        return Err(err("ipv6_prefix", format!("{ipv6_prefix} is not 1 to 128")));
    }
    let table = table.unwrap_or(PER_CLIENT_TABLE);
    let (lo, hi) = PER_CLIENT_TABLE_RANGE;
    if !(lo..=hi).contains(&table) {
        return Err(key_err(
            "per_client_table",
            format!("{table} is not {lo} to {hi} entries"),
        ));
    }
    Ok(PerClient {
        connections: raw.connections,
        handshakes,
        ipv4_prefix,
        ipv6_prefix,
        table: table.next_power_of_two(),
    })
}

/// `"20/s"`, `"600/m"`, `"3000/h"`: the interval between handshakes and the count per unit.
fn parse_rate(s: &str) -> Result<(Duration, u32), String> {
    let bad = || format!("{s:?} is not a rate (\"20/s\", \"600/m\", \"3000/h\")");
    let (n, unit) = s.trim().split_once('/').ok_or_else(bad)?;
    let n: u32 = n.trim().parse().map_err(|_| bad())?;
    let unit = match unit.trim() {
        "s" | "sec" | "second" => Duration::from_secs(1),
        "m" | "min" | "minute" => Duration::from_secs(60),
        "h" | "hour" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    if n == 0 || n > 1_000_000 {
        return Err(format!("{s:?}: the count must be 1 to 1000000"));
    }
    Ok((unit / n, n))
}

/// A JA4 fingerprint: `a_b_c`, the first part 10 characters, the hashes 12 hex digits.
fn check_ja4(s: &str) -> Result<(), KeyError> {
    let parts: Vec<&str> = s.split('_').collect();
    let hex12 = |p: &str| p.len() == 12 && p.bytes().all(|b| b.is_ascii_hexdigit());
    let ok = parts.len() == 3
        && parts[0].len() == 10
        && parts[0].is_ascii()
        && hex12(parts[1])
        && hex12(parts[2]);
    if ok {
        Ok(())
    } else {
        Err(key_err(
            "deny_ja4",
            format!("{s:?} is not a JA4 fingerprint (t13d1516h2_8daaf6152771_02713d6af862)"),
        ))
    }
}

/// Networks, kept as sorted, merged ranges of IPv6 numbers (IPv4 as `::ffff:a.b.c.d`), so a
/// list of thousands costs a binary search per connection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetList {
    /// As written (truncated to their network), for `shuck check` and `running.toml`.
    nets: Vec<ipnet::IpNet>,
    ranges: Vec<(u128, u128)>,
}

impl serde::Serialize for NetList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.nets.iter().map(ToString::to_string))
    }
}

impl NetList {
    /// `list` (networks, or bare addresses meaning one host) for `key`.
    fn parse(key: &str, list: &[String]) -> Result<NetList, KeyError> {
        Ok(NetList::of(super::proxy::parse_networks(key, list)?))
    }

    fn of(nets: Vec<ipnet::IpNet>) -> NetList {
        let mut ranges: Vec<(u128, u128)> = nets.iter().map(range).collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        NetList {
            nets,
            ranges: merged,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `ip` is in one of the networks (an IPv4-mapped IPv6 address counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let n = number(ip);
        let i = self.ranges.partition_point(|r| r.0 <= n);
        i > 0 && self.ranges[i - 1].1 >= n
    }
}

/// An address as a number in IPv6's space, IPv4 mapped.
fn number(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The first and last address of `net`, as numbers.
fn range(net: &ipnet::IpNet) -> (u128, u128) {
    (number(net.network()), number(net.broadcast()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(nets: &[&str]) -> NetList {
        let owned: Vec<String> = nets.iter().map(|s| (*s).to_string()).collect();
        NetList::parse("allow", &owned).expect("valid")
    }

    #[test]
    fn a_list_matches_its_networks_and_nothing_else() {
        let l = list(&["10.0.0.0/8", "10.1.0.0/16", "192.0.2.7", "2001:db8::/32"]);
        for ip in [
            "10.0.0.0",
            "10.255.255.255",
            "192.0.2.7",
            "2001:db8::1",
            "::ffff:10.2.3.4",
        ] {
            assert!(l.contains(ip.parse().expect("ip")), "{ip}");
        }
        for ip in [
            "11.0.0.0",
            "9.255.255.255",
            "192.0.2.8",
            "192.0.2.6",
            "2001:db9::",
            "::",
        ] {
            assert!(!l.contains(ip.parse().expect("ip")), "{ip}");
        }
        assert_eq!(l.ranges.len(), 3, "10.1/16 merged into 10/8");
        assert!(!NetList::default().contains("10.0.0.1".parse().expect("ip")));
    }

    #[test]
    fn rates_and_fingerprints_are_checked() {
        assert_eq!(parse_rate("20/s"), Ok((Duration::from_millis(50), 20)));
        assert_eq!(parse_rate("600/m"), Ok((Duration::from_millis(100), 600)));
        for bad in ["20", "0/s", "x/s", "20/d", "20/"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
        assert!(check_ja4("t13d1516h2_8daaf6152771_02713d6af862").is_ok());
        for bad in [
            "t13d1516h2_8daaf6152771",
            "t13d1516h2_8daaf615277_02713d6af862",
            "x",
        ] {
            assert!(check_ja4(bad).is_err(), "{bad}");
        }
    }
}
