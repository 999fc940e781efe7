//! The PROXY protocol: the header sent to the backend (`proxy_protocol`, `proxy_protocol_tlvs`,
//! `proxy_client_cert_tlv`) and the one received from a load balancer in front (`accept_proxy`,
//! `accept_proxy_from`, `proxy_header_timeout`).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::section::{OnChange, Section};
use super::{defaults, duration_or, key_err, KeyError, RawFrontend};
use crate::proto::proxy_protocol::{tlv, Version};

/// `proxy_protocol` as written in the file or given as a flag; validated into
/// `Option<Version>` by [`ProxyProtocol::version`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProxyProtocol {
    #[default]
    None,
    V1,
    V2,
}

impl ProxyProtocol {
    /// The header version to send, or `None` for no header.
    pub fn version(self) -> Option<Version> {
        match self {
            ProxyProtocol::None => None,
            ProxyProtocol::V1 => Some(Version::V1),
            ProxyProtocol::V2 => Some(Version::V2),
        }
    }
}

impl fmt::Display for ProxyProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProxyProtocol::None => "none",
            ProxyProtocol::V1 => "v1",
            ProxyProtocol::V2 => "v2",
        })
    }
}

/// Which TLVs a v2 header to the backend carries.
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent on/off switches, one per TLV, as in the configuration"
)]
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyTlvs {
    pub alpn: bool,
    pub authority: bool,
    pub unique_id: bool,
    pub ssl: bool,
    /// The client certificate (DER) under this custom TLV type.
    pub client_cert: Option<u8>,
    pub crc32c: bool,
    /// The client's JA4 fingerprint, under type 0xE4.
    pub ja4: bool,
}

impl ProxyTlvs {
    /// Names accepted in `proxy_protocol_tlvs`.
    pub const NAMES: [&'static str; 7] = [
        "alpn",
        "authority",
        "unique_id",
        "ssl",
        "client_cert",
        "crc32c",
        "ja4",
    ];

    /// What a v2 header carries unless `proxy_protocol_tlvs` says otherwise: what hitch and
    /// HAProxy's `send-proxy-v2-ssl` send, and cheap to produce.
    pub const DEFAULT: ProxyTlvs = ProxyTlvs {
        alpn: true,
        authority: true,
        unique_id: false,
        ssl: true,
        client_cert: None,
        crc32c: false,
        ja4: false,
    };

    pub fn names(&self) -> Vec<&'static str> {
        let on = [
            self.alpn,
            self.authority,
            self.unique_id,
            self.ssl,
            self.client_cert.is_some(),
            self.crc32c,
            self.ja4,
        ];
        Self::NAMES
            .iter()
            .zip(on)
            .filter_map(|(n, on)| on.then_some(*n))
            .collect()
    }
}

/// Receiving PROXY headers from a load balancer in front of shuck.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct AcceptProxy {
    /// Peers allowed to connect (and so to send a header); empty means any.
    #[serde(serialize_with = "super::ser::shown")]
    pub from: Vec<ipnet::IpNet>,
    #[serde(serialize_with = "super::ser::duration")]
    pub timeout: Duration,
    /// The TLV type shuck uses for client certificates: never taken from a received header.
    pub cert_tlv: u8,
}

impl AcceptProxy {
    /// Received TLVs (unique ID, custom ones) are passed on only from named load balancers:
    /// with any peer allowed, anyone could put words in the backend's mouth.
    pub fn passes_tlvs(&self) -> bool {
        !self.from.is_empty()
    }
}

impl AcceptProxy {
    pub fn allows(&self, peer: std::net::IpAddr) -> bool {
        let peer = match peer {
            std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(peer, std::net::IpAddr::V4),
            v4 @ std::net::IpAddr::V4(_) => v4,
        };
        self.from.is_empty() || self.from.iter().any(|n| n.contains(&peer))
    }
}

/// `proxy_protocol`, `proxy_protocol_tlvs`, `proxy_client_cert_tlv`, `accept_proxy`,
/// `accept_proxy_from`, `proxy_header_timeout`: PROXY headers sent and accepted.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The header sent to the backend, if any.
    #[serde(serialize_with = "super::ser::version")]
    pub send: Option<Version>,
    /// TLVs of v2 headers to the backend (none for v1).
    pub tlvs: ProxyTlvs,
    pub accept: Option<AcceptProxy>,
}

impl Section for Proxy {
    const KEY: &'static str = "proxy_protocol";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

/// The validated sending side: which header, if any, and its TLVs.
pub(super) struct SendProxy {
    pub version: Option<Version>,
    pub tlvs: ProxyTlvs,
}

impl RawFrontend {
    pub(super) fn validate_send_proxy(&self) -> Result<SendProxy, KeyError> {
        let version = self.proxy_protocol.unwrap_or_default().version();
        let cert_tlv = self.validate_client_cert_tlv()?;
        let tlvs = match &self.proxy_protocol_tlvs {
            None if version == Some(Version::V2) => ProxyTlvs::DEFAULT,
            None => ProxyTlvs::default(),
            Some(names) if version != Some(Version::V2) && !names.is_empty() => {
                return Err(key_err(
                    "proxy_protocol_tlvs",
                    "TLVs exist only in PROXY v2: set proxy_protocol = \"v2\"",
                ))
            }
            Some(names) => parse_tlv_names(names, cert_tlv)?,
        };
        Ok(SendProxy { version, tlvs })
    }

    /// The TLV type for client certificates, sent and received.
    fn validate_client_cert_tlv(&self) -> Result<u8, KeyError> {
        let t = self
            .proxy_client_cert_tlv
            .unwrap_or(defaults::PROXY_CLIENT_CERT_TLV);
        if !(tlv::CUSTOM_MIN..=tlv::CUSTOM_MAX).contains(&t) {
            return Err(key_err(
                "proxy_client_cert_tlv",
                format!("{t:#04x} is outside the custom range 0xE0..=0xEF the spec reserves for applications"),
            ));
        }
        Ok(t)
    }

    pub(super) fn validate_accept_proxy(&self) -> Result<Option<AcceptProxy>, KeyError> {
        let timeout = duration_or(
            "proxy_header_timeout",
            self.proxy_header_timeout.as_deref(),
            defaults::PROXY_HEADER_TIMEOUT,
        )?;
        if timeout.is_zero() {
            return Err(key_err("proxy_header_timeout", "must be longer than 0s"));
        }
        let from = parse_networks(
            "accept_proxy_from",
            self.accept_proxy_from.as_deref().unwrap_or_default(),
        )?;
        if !self.accept_proxy.unwrap_or(false) {
            let key = if self.accept_proxy_from.is_some() {
                "accept_proxy_from"
            } else if self.proxy_header_timeout.is_some() {
                "proxy_header_timeout"
            } else {
                return Ok(None);
            };
            return Err(key_err(key, "has no effect without accept_proxy = true"));
        }
        if self.accept_proxy_from.as_ref().is_some_and(Vec::is_empty) {
            return Err(key_err(
                "accept_proxy_from",
                "empty list: name the load balancers' networks, or leave the key out to accept any peer",
            ));
        }
        Ok(Some(AcceptProxy {
            from,
            timeout,
            cert_tlv: self.validate_client_cert_tlv()?,
        }))
    }
}

fn parse_tlv_names(names: &[String], cert_tlv: u8) -> Result<ProxyTlvs, KeyError> {
    let mut out = ProxyTlvs::default();
    for n in names {
        match n.as_str() {
            "alpn" => out.alpn = true,
            "authority" => out.authority = true,
            "unique_id" => out.unique_id = true,
            "ssl" => out.ssl = true,
            "client_cert" => out.client_cert = Some(cert_tlv),
            "crc32c" => out.crc32c = true,
            "ja4" if cert_tlv == tlv::JA4 => {
                return Err(key_err(
                    "proxy_protocol_tlvs",
                    format!("\"ja4\" is sent as type {:#04x}, which proxy_client_cert_tlv takes for client certificates: choose another for them", tlv::JA4),
                ))
            }
            "ja4" => out.ja4 = true,
            other => {
                return Err(key_err(
                    "proxy_protocol_tlvs",
                    format!(
                        "{other:?} is not a TLV name; known: {}",
                        ProxyTlvs::NAMES.join(", ")
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// `key`'s entries (`accept_proxy_from`, `allow`, `deny`): networks, or a bare address meaning
/// that one host; each truncated to its network.
pub(super) fn parse_networks(key: &str, list: &[String]) -> Result<Vec<ipnet::IpNet>, KeyError> {
    let mut from = Vec::with_capacity(list.len());
    for s in list {
        let net = s
            .parse::<ipnet::IpNet>()
            .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
            .map_err(|_| {
                key_err(
                    key,
                    format!(
                        "{s:?} is not an address or network (10.0.0.0/8, 2001:db8::/32, 192.0.2.7)"
                    ),
                )
            })?;
        from.push(net.trunc());
    }
    Ok(from)
}
