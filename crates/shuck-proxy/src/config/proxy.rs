//! The PROXY protocol and client-certificate settings of a frontend: their validated types and
//! how the raw keys become them.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::{defaults, key_err, parse_duration, KeyError, RawFrontend};
use crate::proxy_protocol::Version;

/// Whether clients must present a certificate (mutual TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    #[default]
    None,
    /// Ask for a certificate; a client without one is served, one with an invalid one is not.
    Optional,
    /// Refuse clients without a valid certificate.
    Required,
    /// Ask for a certificate and serve every client; the verification result (0 or an OpenSSL
    /// `X509_V_ERR_*` code) goes to the backend in the SSL TLV, which decides (nginx's
    /// `optional_no_ca`, HAProxy's `verify optional` with `ca-ignore-err`/`crt-ignore-err all`).
    OptionalNoCa,
}

impl fmt::Display for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientAuth::None => "none",
            ClientAuth::Optional => "optional",
            ClientAuth::Required => "required",
            ClientAuth::OptionalNoCa => "optional_no_ca",
        })
    }
}

/// Which TLVs a v2 header to the backend carries.
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent on/off switches, one per TLV, as in the configuration"
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyTlvs {
    pub alpn: bool,
    pub authority: bool,
    pub unique_id: bool,
    pub ssl: bool,
    /// The client certificate (DER) under this custom TLV type.
    pub client_cert: Option<u8>,
    pub crc32c: bool,
}

impl ProxyTlvs {
    /// Names accepted in `proxy_protocol_tlvs`.
    pub const NAMES: [&'static str; 6] = [
        "alpn",
        "authority",
        "unique_id",
        "ssl",
        "client_cert",
        "crc32c",
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
    };

    pub fn names(&self) -> Vec<&'static str> {
        let on = [
            self.alpn,
            self.authority,
            self.unique_id,
            self.ssl,
            self.client_cert.is_some(),
            self.crc32c,
        ];
        Self::NAMES
            .iter()
            .zip(on)
            .filter_map(|(n, on)| on.then_some(*n))
            .collect()
    }
}

/// Receiving PROXY headers from a load balancer in front of shuck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptProxy {
    /// Peers allowed to connect (and so to send a header); empty means any.
    pub from: Vec<ipnet::IpNet>,
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

impl RawFrontend {
    pub(super) fn proxy_tlvs(&self, version: Option<Version>) -> Result<ProxyTlvs, KeyError> {
        let cert_type = self
            .proxy_client_cert_tlv
            .unwrap_or(defaults::PROXY_CLIENT_CERT_TLV);
        if !(crate::proxy_protocol::tlv::CUSTOM_MIN..=crate::proxy_protocol::tlv::CUSTOM_MAX)
            .contains(&cert_type)
        {
            return Err(key_err(
                "proxy_client_cert_tlv",
                format!("{cert_type:#04x} is outside the custom range 0xE0..=0xEF the spec reserves for applications"),
            ));
        }
        let Some(names) = &self.proxy_protocol_tlvs else {
            return Ok(if version == Some(Version::V2) {
                ProxyTlvs::DEFAULT
            } else {
                ProxyTlvs::default()
            });
        };
        if version != Some(Version::V2) && !names.is_empty() {
            return Err(key_err(
                "proxy_protocol_tlvs",
                "TLVs exist only in PROXY v2: set proxy_protocol = \"v2\"",
            ));
        }
        let mut out = ProxyTlvs::default();
        for n in names {
            match n.as_str() {
                "alpn" => out.alpn = true,
                "authority" => out.authority = true,
                "unique_id" => out.unique_id = true,
                "ssl" => out.ssl = true,
                "client_cert" => out.client_cert = Some(cert_type),
                "crc32c" => out.crc32c = true,
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

    pub(super) fn accept_proxy(&self) -> Result<Option<AcceptProxy>, KeyError> {
        let timeout = match &self.proxy_header_timeout {
            None => defaults::PROXY_HEADER_TIMEOUT,
            Some(s) => parse_duration(s).map_err(|m| key_err("proxy_header_timeout", m))?,
        };
        if timeout.is_zero() {
            return Err(key_err("proxy_header_timeout", "must be longer than 0s"));
        }
        let mut from = Vec::new();
        for s in self.accept_proxy_from.iter().flatten() {
            // A bare address means that one host.
            let net = s
                .parse::<ipnet::IpNet>()
                .or_else(|_| s.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    key_err(
                        "accept_proxy_from",
                        format!("{s:?} is not an address or network (10.0.0.0/8, 2001:db8::/32, 192.0.2.7)"),
                    )
                })?;
            from.push(net.trunc());
        }
        if !self.accept_proxy.unwrap_or(false) {
            if self.accept_proxy_from.is_some() || self.proxy_header_timeout.is_some() {
                let key = if self.accept_proxy_from.is_some() {
                    "accept_proxy_from"
                } else {
                    "proxy_header_timeout"
                };
                return Err(key_err(key, "has no effect without accept_proxy = true"));
            }
            return Ok(None);
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
            cert_tlv: self
                .proxy_client_cert_tlv
                .unwrap_or(defaults::PROXY_CLIENT_CERT_TLV),
        }))
    }
}
