//! `acme.dns_update`: where DNS-01 challenges are written, by RFC 2136 dynamic update signed
//! with TSIG (RFC 8945), the provider-neutral way BIND, Knot, PowerDNS and most DNS hosts accept.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{duration_or, key_err, resolve_path, KeyError};

/// `dns_update = { … }` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDnsUpdate {
    pub server: Option<String>,
    pub zone: Option<String>,
    pub tsig_key_file: Option<PathBuf>,
    /// The servers to see the record on before the CA is asked (else the zone's NS records).
    pub nameservers: Option<Vec<String>>,
    pub propagation_timeout: Option<String>,
}

/// Where and how TXT records for `_acme-challenge.<name>` are added and removed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DnsUpdate {
    /// The primary server that takes updates.
    pub server: SocketAddr,
    /// The zone the names are in, lower case, without the final dot.
    pub zone: String,
    /// The TSIG key in BIND's format (`key "name" { algorithm hmac-sha256; secret "…"; };`),
    /// read at each order (never logged or shown).
    pub tsig_key_file: PathBuf,
    /// Where the record must be seen before the CA is asked; empty: the zone's NS servers.
    pub nameservers: Vec<SocketAddr>,
    /// How long to wait for every one of them to answer with the record.
    pub propagation_timeout: Duration,
}

const PROPAGATION_TIMEOUT: Duration = Duration::from_secs(120);

impl RawDnsUpdate {
    pub(super) fn validate(&self, base: Option<&Path>) -> Result<DnsUpdate, KeyError> {
        let key = |k: &str| format!("acme.dns_update.{k}");
        let server = self
            .server
            .as_deref()
            .ok_or_else(|| key_err(&key("server"), "missing: the primary DNS server's IP:port"))?;
        let server = parse_server(server).map_err(|m| key_err(&key("server"), m))?;
        let zone = self
            .zone
            .as_deref()
            .ok_or_else(|| key_err(&key("zone"), "missing: the zone the names are in"))?
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if zone.is_empty()
            || zone
                .bytes()
                .any(|b| !(b.is_ascii_alphanumeric() || b == b'-' || b == b'.'))
        {
            return Err(key_err(
                &key("zone"),
                format!("{zone:?} is not a DNS zone name"),
            ));
        }
        let tsig_key_file = self
            .tsig_key_file
            .clone()
            .map(|p| resolve_path(base, p))
            .ok_or_else(|| {
                key_err(
                    &key("tsig_key_file"),
                    "missing: the TSIG key file (BIND's format, as tsig-keygen writes it)",
                )
            })?;
        let nameservers = self
            .nameservers
            .iter()
            .flatten()
            .map(|s| parse_server(s).map_err(|m| key_err(&key("nameservers"), m)))
            .collect::<Result<Vec<_>, _>>()?;
        let propagation_timeout = duration_or(
            &key("propagation_timeout"),
            self.propagation_timeout.as_deref(),
            PROPAGATION_TIMEOUT,
        )?;
        if propagation_timeout.is_zero() || propagation_timeout > Duration::from_secs(600) {
            return Err(key_err(
                &key("propagation_timeout"),
                "must be more than 0s and at most 10m",
            ));
        }
        Ok(DnsUpdate {
            server,
            zone,
            tsig_key_file,
            nameservers,
            propagation_timeout,
        })
    }
}

/// `IP:port`, or an IP alone for port 53.
fn parse_server(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.parse::<std::net::IpAddr>()
        .map(|ip| SocketAddr::new(ip, 53))
        .map_err(|_| format!("{s:?} is not an IP address or IP:port (IPv6 as [::1]:53)"))
}

/// Whether `name` (lower case) is `zone` or inside it.
pub(crate) fn in_zone(name: &str, zone: &str) -> bool {
    let name = name.strip_prefix("*.").unwrap_or(name);
    name == zone || name.ends_with(&format!(".{zone}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_default_to_port_53_and_zones_lose_their_final_dot() {
        let raw = RawDnsUpdate {
            server: Some("10.0.0.53".into()),
            zone: Some("Example.COM.".into()),
            tsig_key_file: Some("/etc/shuck/tsig.key".into()),
            nameservers: Some(vec!["[::1]:5353".into()]),
            propagation_timeout: None,
        };
        let d = raw.validate(None).unwrap();
        assert_eq!(d.server, "10.0.0.53:53".parse().unwrap());
        assert_eq!(d.zone, "example.com");
        assert_eq!(d.nameservers, vec!["[::1]:5353".parse().unwrap()]);
        assert!(in_zone("*.example.com", "example.com"));
        assert!(in_zone("a.b.example.com", "example.com"));
        assert!(!in_zone("badexample.com", "example.com"));
    }

    #[test]
    fn a_missing_key_file_or_a_bad_server_is_refused_by_key() {
        let raw = RawDnsUpdate {
            server: Some("ns1.example.com".into()),
            zone: Some("example.com".into()),
            tsig_key_file: None,
            nameservers: None,
            propagation_timeout: None,
        };
        assert!(raw.validate(None).unwrap_err().key.ends_with("server"));
        let raw = RawDnsUpdate {
            server: Some("127.0.0.1:53".into()),
            ..raw
        };
        assert!(raw
            .validate(None)
            .unwrap_err()
            .key
            .ends_with("tsig_key_file"));
    }
}
