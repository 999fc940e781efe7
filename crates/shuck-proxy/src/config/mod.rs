//! Configuration: the raw TOML/flags shape (`RawConfig`) and the validated form (`Config`) the
//! server runs from. Validation resolves every name (cipher suites, groups, durations, addresses)
//! here, so a typo is reported once, at start, with the key that holds it.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::crypto::SupportedKxGroup;
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};
use serde::Deserialize;

use crate::error::{Error, Result};
use crate::proxy_protocol::Version;
use crate::tls::params;

/// Where a configuration came from, for messages ("shuck.toml" or "command line").
#[derive(Debug, Clone)]
pub enum Origin {
    File(PathBuf),
    CommandLine,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::CommandLine => f.write_str("command line"),
        }
    }
}

/// A value given either alone or as a list: `listen = "[::]:443"` or `listen = ["a", "b"]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    pub fn into_vec(self) -> Vec<T> {
        match self {
            OneOrMany::One(t) => vec![t],
            OneOrMany::Many(v) => v,
        }
    }
}

/// The file as written. Every field is optional so defaults live in one place (`validate`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub workers: Option<usize>,
    pub pin_cpus: Option<bool>,
    pub max_connections: Option<usize>,
    pub shutdown_grace: Option<String>,
    pub log_format: Option<LogFormat>,
    pub log_level: Option<String>,
    pub log_connections: Option<bool>,
    pub metrics_listen: Option<String>,
    #[serde(default, rename = "frontend")]
    pub frontends: Vec<RawFrontend>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFrontend {
    pub name: Option<String>,
    pub listen: Option<OneOrMany<String>>,
    pub backend: Option<OneOrMany<String>>,
    pub certificates: Option<OneOrMany<PathBuf>>,
    pub self_signed: Option<bool>,
    pub default_certificate: Option<PathBuf>,
    pub unknown_sni: Option<SniFallback>,
    pub missing_sni: Option<SniFallback>,
    pub protocols: Option<Vec<String>>,
    pub ciphersuites: Option<Vec<String>>,
    pub groups: Option<Vec<String>>,
    pub alpn: Option<Vec<String>>,
    pub handshake_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub connect_timeout: Option<String>,
    pub backend_cooldown: Option<String>,
    pub backlog: Option<u32>,
    pub proxy_protocol: Option<ProxyProtocol>,
    pub proxy_protocol_tlvs: Option<Vec<String>>,
    pub proxy_client_cert_tlv: Option<u8>,
    pub accept_proxy: Option<bool>,
    pub accept_proxy_from: Option<Vec<String>>,
    pub proxy_header_timeout: Option<String>,
    pub client_auth: Option<ClientAuth>,
    pub client_ca: Option<PathBuf>,
    pub client_crl: Option<OneOrMany<PathBuf>>,
    pub session_cache_size: Option<usize>,
    pub session_tickets: Option<bool>,
    pub session_ticket_lifetime: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Compact,
    Json,
}

/// What to do with a client whose SNI matches no certificate (or that sends none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SniFallback {
    /// Serve the frontend's default certificate.
    Default,
    /// Abort the handshake with an alert.
    Reject,
}

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

mod proxy;
pub use proxy::{AcceptProxy, ClientAuth, ProxyTlvs};

/// Defaults, in one place so docs/configuration.md can be checked against them.
pub mod defaults {
    use std::time::Duration;
    pub const LISTEN: &str = "127.0.0.1:8443";
    pub const MAX_CONNECTIONS: usize = 8192;
    pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
    pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
    pub const BACKEND_COOLDOWN: Duration = Duration::from_secs(2);
    pub const BACKLOG: u32 = 1024;
    pub const SESSION_CACHE_SIZE: usize = 4096;
    pub const SESSION_TICKET_LIFETIME: Duration = Duration::from_secs(6 * 3600);
    pub const PROXY_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
    /// hitch's choice for the client certificate TLV.
    pub const PROXY_CLIENT_CERT_TLV: u8 = 0xE0;
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub origin: Origin,
    /// Worker threads; always >= 1 (0 in the file means "one per core").
    pub workers: usize,
    pub pin_cpus: bool,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    pub log_format: LogFormat,
    pub log_level: String,
    pub log_connections: bool,
    /// Where to serve Prometheus metrics (`GET /metrics`), if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    pub frontends: Vec<Frontend>,
}

#[derive(Debug, Clone)]
pub enum Backend {
    /// The built-in page describing the connection.
    Demo,
    /// TCP backends, tried round-robin.
    Tcp(Vec<BackendAddr>),
}

#[derive(Debug, Clone)]
pub struct BackendAddr {
    /// As written, for logs.
    pub name: String,
    pub addr: SocketAddr,
}

#[derive(Debug, Clone)]
pub enum CertSource {
    SelfSigned,
    Files {
        paths: Vec<PathBuf>,
        default: Option<PathBuf>,
    },
}

#[derive(Debug, Clone)]
pub struct Frontend {
    pub name: String,
    pub listen: Vec<SocketAddr>,
    pub backend: Backend,
    pub certs: CertSource,
    pub unknown_sni: SniFallback,
    pub missing_sni: SniFallback,
    pub versions: Vec<&'static SupportedProtocolVersion>,
    pub ciphersuites: Vec<SupportedCipherSuite>,
    pub groups: Vec<&'static dyn SupportedKxGroup>,
    pub alpn: Vec<Vec<u8>>,
    pub handshake_timeout: Duration,
    pub idle_timeout: Duration,
    pub connect_timeout: Duration,
    pub backend_cooldown: Duration,
    pub backlog: u32,
    /// The PROXY header sent to the backend, if any.
    pub proxy_protocol: Option<Version>,
    /// TLVs of v2 headers to the backend (none for v1).
    pub proxy_tlvs: ProxyTlvs,
    pub accept_proxy: Option<AcceptProxy>,
    pub client_auth: ClientAuth,
    /// CA bundle that client certificates must chain to (set when `client_auth` is optional or
    /// required; may be absent with optional_no_ca, where every certificate then fails with 20).
    pub client_ca: Option<PathBuf>,
    pub client_crls: Vec<PathBuf>,
    pub session_cache_size: usize,
    pub session_tickets: bool,
    /// Ticket keys rotate this often; a ticket stays valid one to two lifetimes.
    pub session_ticket_lifetime: Duration,
}

impl RawConfig {
    /// Reads and parses a TOML file, without validating values yet.
    pub fn from_file(path: &Path) -> Result<RawConfig> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        RawConfig::parse(&text, &Origin::File(path.to_path_buf()))
    }

    pub fn parse(text: &str, origin: &Origin) -> Result<RawConfig> {
        toml::from_str(text).map_err(|e| Error::ConfigSyntax {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    pub fn validate(self, origin: Origin, base: Option<&Path>) -> Result<Config> {
        let err = |key: String, message: String| Error::ConfigValue {
            origin: origin.to_string(),
            key,
            message,
        };
        if self.frontends.is_empty() {
            return Err(err(
                "frontend".into(),
                "no [[frontend]] section: nothing to serve".into(),
            ));
        }
        let workers = match self.workers.unwrap_or(0) {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            n if n > 1024 => return Err(err("workers".into(), format!("{n} is more than 1024"))),
            n => n,
        };
        let max_connections = self.max_connections.unwrap_or(defaults::MAX_CONNECTIONS);
        if !(1..=MAX_CONNECTIONS_LIMIT).contains(&max_connections) {
            return Err(err(
                "max_connections".into(),
                format!("{max_connections} is not in 1..={MAX_CONNECTIONS_LIMIT}"),
            ));
        }
        let shutdown_grace = match &self.shutdown_grace {
            Some(s) => parse_duration(s).map_err(|m| err("shutdown_grace".into(), m))?,
            None => defaults::SHUTDOWN_GRACE,
        };
        let log_level = self.log_level.clone().unwrap_or_else(|| "info".into());
        if log_level.parse::<tracing::Level>().is_err() {
            return Err(err(
                "log_level".into(),
                format!("{log_level:?} is not one of error, warn, info, debug, trace"),
            ));
        }
        let metrics_listen = match &self.metrics_listen {
            None => None,
            Some(a) => Some(a.parse::<SocketAddr>().map_err(|_| {
                err(
                    "metrics_listen".into(),
                    format!("{a:?} is not an IP:port address (IPv6 as [::1]:9100)"),
                )
            })?),
        };
        let mut frontends = Vec::with_capacity(self.frontends.len());
        for (i, raw) in self.frontends.into_iter().enumerate() {
            let name = raw.name.clone().unwrap_or_else(|| format!("frontend{i}"));
            if frontends.iter().any(|f: &Frontend| f.name == name) {
                return Err(err(
                    format!("frontend[{i}].name"),
                    format!("{name:?} is used twice"),
                ));
            }
            let fe = raw
                .validate(&name, base)
                .map_err(|(key, message)| err(format!("frontend {name:?}: {key}"), message))?;
            // SO_REUSEPORT would let two frontends bind the same address and the kernel would
            // silently split clients between them.
            for addr in fe.listen.iter().filter(|a| a.port() != 0) {
                if let Some(other) = frontends.iter().find(|f| f.listen.contains(addr)) {
                    return Err(err(
                        format!("frontend {name:?}: listen"),
                        format!("{addr} is already used by frontend {:?}", other.name),
                    ));
                }
            }
            frontends.push(fe);
        }
        if let Some(m) = metrics_listen.filter(|m| m.port() != 0) {
            if let Some(fe) = frontends.iter().find(|f| f.listen.contains(&m)) {
                return Err(err(
                    "metrics_listen".into(),
                    format!("{m} is also a listen address of frontend {:?}", fe.name),
                ));
            }
        }
        Ok(Config {
            origin,
            workers,
            pin_cpus: self.pin_cpus.unwrap_or(false),
            max_connections,
            shutdown_grace,
            log_format: self.log_format.unwrap_or_default(),
            log_level,
            log_connections: self.log_connections.unwrap_or(false),
            metrics_listen,
            frontends,
        })
    }
}

type KeyError = (String, String);

fn key_err(key: &str, message: impl Into<String>) -> KeyError {
    (key.to_string(), message.into())
}

impl RawFrontend {
    fn validate(self, name: &str, base: Option<&Path>) -> Result<Frontend, KeyError> {
        let proxy_protocol = self.proxy_protocol.unwrap_or_default().version();
        let proxy_tlvs = self.proxy_tlvs(proxy_protocol)?;
        let accept_proxy = self.accept_proxy()?;
        let listen_raw = self
            .listen
            .map_or_else(|| vec![defaults::LISTEN.to_string()], OneOrMany::into_vec);
        if listen_raw.is_empty() {
            return Err(key_err("listen", "empty list: give at least one address"));
        }
        let mut listen = Vec::new();
        for l in &listen_raw {
            let addr: SocketAddr = l.parse().map_err(|_| {
                key_err(
                    "listen",
                    format!("{l:?} is not an IP:port address (IPv6 as [::1]:443)"),
                )
            })?;
            if listen.contains(&addr) {
                return Err(key_err("listen", format!("{addr} is listed twice")));
            }
            listen.push(addr);
        }

        let backend = match self.backend.map(OneOrMany::into_vec) {
            None => Backend::Demo,
            Some(v) if v.is_empty() => Backend::Demo,
            Some(v) if v.len() > crate::backend::MAX_BACKENDS => {
                return Err(key_err(
                    "backend",
                    format!(
                        "{} addresses: at most {} per frontend",
                        v.len(),
                        crate::backend::MAX_BACKENDS
                    ),
                ))
            }
            Some(v) => {
                let mut out = Vec::with_capacity(v.len());
                for b in v {
                    let addr = resolve_backend(&b).map_err(|m| key_err("backend", m))?;
                    out.push(BackendAddr { name: b, addr });
                }
                Backend::Tcp(out)
            }
        };

        let resolve = |p: PathBuf| match base {
            Some(b) if p.is_relative() => b.join(p),
            _ => p,
        };
        let self_signed = self.self_signed.unwrap_or(false);
        let paths: Vec<PathBuf> = self
            .certificates
            .map(OneOrMany::into_vec)
            .unwrap_or_default()
            .into_iter()
            .map(resolve)
            .collect();
        let certs =
            match (self_signed, paths.is_empty()) {
                (true, true) => CertSource::SelfSigned,
                (true, false) => {
                    return Err(key_err(
                        "self_signed",
                        "cannot be combined with certificates: choose one",
                    ))
                }
                (false, true) => return Err(key_err(
                    "certificates",
                    "missing: give PEM files or directories (chain + key), or self_signed = true",
                )),
                (false, false) => CertSource::Files {
                    paths,
                    default: self.default_certificate.map(resolve),
                },
            };

        let versions = match &self.protocols {
            None => params::default_versions(),
            Some(list) => params::parse_versions(list).map_err(|m| key_err("protocols", m))?,
        };
        let ciphersuites = match &self.ciphersuites {
            None => params::default_ciphersuites(),
            Some(list) => {
                params::parse_ciphersuites(list).map_err(|m| key_err("ciphersuites", m))?
            }
        };
        params::check_suites_cover_versions(&ciphersuites, &versions)
            .map_err(|m| key_err("ciphersuites", m))?;
        let groups = match &self.groups {
            None => params::default_groups(),
            Some(list) => params::parse_groups(list).map_err(|m| key_err("groups", m))?,
        };
        params::check_groups_cover_versions(&groups, &versions)
            .map_err(|m| key_err("groups", m))?;
        let alpn = match self.alpn {
            // The demo backend speaks HTTP/1.x only; advertising h2 would break browsers.
            None if matches!(backend, Backend::Demo) => vec![b"http/1.1".to_vec()],
            None => Vec::new(),
            Some(list) => {
                let mut out = Vec::with_capacity(list.len());
                for p in list {
                    if p.is_empty() || p.len() > 255 {
                        return Err(key_err(
                            "alpn",
                            format!("{p:?}: a protocol name is 1 to 255 bytes"),
                        ));
                    }
                    out.push(p.into_bytes());
                }
                out
            }
        };
        let duration = |key: &str, v: &Option<String>, d: Duration| match v {
            None => Ok(d),
            Some(s) => parse_duration(s).map_err(|m| key_err(key, m)),
        };
        let backlog = self.backlog.unwrap_or(defaults::BACKLOG);
        if backlog == 0 || backlog > 65535 {
            return Err(key_err("backlog", format!("{backlog} is not in 1..=65535")));
        }
        let handshake_timeout = duration(
            "handshake_timeout",
            &self.handshake_timeout,
            defaults::HANDSHAKE_TIMEOUT,
        )?;
        let idle_timeout = duration("idle_timeout", &self.idle_timeout, defaults::IDLE_TIMEOUT)?;
        let connect_timeout = duration(
            "connect_timeout",
            &self.connect_timeout,
            defaults::CONNECT_TIMEOUT,
        )?;
        let session_ticket_lifetime = duration(
            "session_ticket_lifetime",
            &self.session_ticket_lifetime,
            defaults::SESSION_TICKET_LIFETIME,
        )?;
        if session_ticket_lifetime < Duration::from_secs(60)
            || session_ticket_lifetime > Duration::from_secs(7 * 86_400)
        {
            return Err(key_err(
                "session_ticket_lifetime",
                "must be from 1m (shorter only costs full handshakes) to 7d (TLS 1.3's limit)",
            ));
        }
        let backend_cooldown = duration(
            "backend_cooldown",
            &self.backend_cooldown,
            defaults::BACKEND_COOLDOWN,
        )?;
        for (key, d) in [
            ("handshake_timeout", handshake_timeout),
            ("idle_timeout", idle_timeout),
            ("connect_timeout", connect_timeout),
        ] {
            if d.is_zero() {
                return Err(key_err(key, "must be longer than 0s"));
            }
        }
        if proxy_protocol.is_some() && matches!(backend, Backend::Demo) {
            return Err(key_err(
                "proxy_protocol",
                "needs a backend: the built-in demo backend reads the connection directly",
            ));
        }
        let client_ca = self.client_ca.map(resolve);
        let client_crls: Vec<PathBuf> = self
            .client_crl
            .map(OneOrMany::into_vec)
            .unwrap_or_default()
            .into_iter()
            .map(resolve)
            .collect();
        let client_auth = self.client_auth.unwrap_or_default();
        match (client_auth, &client_ca) {
            (ClientAuth::None, Some(_)) => {
                return Err(key_err(
                    "client_ca",
                    "is set but client_auth is \"none\": set client_auth = \"optional\" or \"required\"",
                ))
            }
            (ClientAuth::None | ClientAuth::OptionalNoCa, None) if !client_crls.is_empty() => {
                return Err(key_err("client_crl", "needs client_auth and client_ca"))
            }
            (ClientAuth::Optional | ClientAuth::Required, None) => {
                return Err(key_err(
                    "client_ca",
                    "missing: client_auth needs the CA bundle (PEM) client certificates chain to",
                ))
            }
            _ => {}
        }
        if client_auth == ClientAuth::OptionalNoCa
            && (proxy_protocol != Some(Version::V2) || !proxy_tlvs.ssl)
        {
            // Every client is served: only the backend can act on the result.
            return Err(key_err(
                "client_auth",
                "\"optional_no_ca\" passes unverified certificates on, so the backend must be told: \
                 set proxy_protocol = \"v2\" with \"ssl\" in proxy_protocol_tlvs (the verify result)",
            ));
        }
        if proxy_tlvs.client_cert.is_some() && client_auth == ClientAuth::None {
            return Err(key_err(
                "proxy_protocol_tlvs",
                "\"client_cert\" needs client_auth = \"optional\", \"required\" or \"optional_no_ca\"",
            ));
        }
        Ok(Frontend {
            name: name.to_string(),
            listen,
            backend,
            certs,
            unknown_sni: self.unknown_sni.unwrap_or(SniFallback::Default),
            missing_sni: self.missing_sni.unwrap_or(SniFallback::Default),
            versions,
            ciphersuites,
            groups,
            alpn,
            handshake_timeout,
            idle_timeout,
            connect_timeout,
            backend_cooldown,
            backlog,
            proxy_protocol,
            proxy_tlvs,
            accept_proxy,
            client_auth,
            client_ca,
            client_crls,
            session_cache_size: self
                .session_cache_size
                .unwrap_or(defaults::SESSION_CACHE_SIZE),
            session_tickets: self.session_tickets.unwrap_or(true),
            session_ticket_lifetime,
        })
    }
}

/// Far above any sane setting, far below where `Instant + Duration` could overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 86_400);
/// Far above what one machine's descriptors allow; keeps the per-worker semaphore in range.
pub const MAX_CONNECTIONS_LIMIT: usize = 1 << 24;

/// "10s", "5m", "1h 30m", "250ms"; at most 30 days.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like \"10s\", \"5m\" or \"250ms\": {e}"))?;
    if d > MAX_DURATION {
        return Err(format!("{s:?} is longer than 30 days"));
    }
    Ok(d)
}

fn resolve_backend(s: &str) -> Result<SocketAddr, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config> {
        RawConfig::parse(text, &Origin::CommandLine)?.validate(Origin::CommandLine, None)
    }

    #[test]
    fn unknown_key_is_an_error_naming_it() {
        let e = parse("[[frontend]]\nself_signed = true\nlisen = \"127.0.0.1:1\"\n").unwrap_err();
        assert!(e.to_string().contains("lisen"), "{e}");
    }

    #[test]
    fn durations_and_defaults() {
        let c = parse(
            "workers = 3\n[[frontend]]\nself_signed = true\nidle_timeout = \"5m\"\nlisten = [\"127.0.0.1:0\", \"[::1]:0\"]\n",
        )
        .unwrap();
        assert_eq!(c.workers, 3);
        let f = &c.frontends[0];
        assert_eq!(f.idle_timeout, Duration::from_secs(300));
        assert_eq!(f.handshake_timeout, defaults::HANDSHAKE_TIMEOUT);
        assert_eq!(f.listen.len(), 2);
        assert!(f.listen[1].is_ipv6());
        assert!(matches!(f.backend, Backend::Demo));
        assert_eq!(f.alpn, vec![b"http/1.1".to_vec()]);
    }

    #[test]
    fn bad_values_name_their_key() {
        for (text, key) in [
            (
                "[[frontend]]\nself_signed = true\nidle_timeout = \"soon\"\n",
                "idle_timeout",
            ),
            (
                "[[frontend]]\nself_signed = true\nlisten = \"localhost\"\n",
                "listen",
            ),
            (
                "[[frontend]]\nself_signed = true\nciphersuites = [\"RC4\"]\n",
                "ciphersuites",
            ),
            (
                "[[frontend]]\nself_signed = true\ngroups = [\"ffdhe1024\"]\n",
                "groups",
            ),
            (
                "[[frontend]]\nself_signed = true\nprotocols = [\"SSLv3\"]\n",
                "protocols",
            ),
            ("[[frontend]]\nlisten = \"127.0.0.1:1\"\n", "certificates"),
            (
                "[[frontend]]\nself_signed = true\nbackend = \"nohost\"\n",
                "backend",
            ),
            (
                "[[frontend]]\nself_signed = true\nproxy_protocol = \"v2\"\n",
                "proxy_protocol",
            ),
            (
                "[[frontend]]\nself_signed = true\nproxy_protocol = \"v3\"\n",
                "proxy_protocol",
            ),
            (
                "log_level = \"loud\"\n[[frontend]]\nself_signed = true\n",
                "log_level",
            ),
            (
                "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nproxy_protocol = \"v1\"\nproxy_protocol_tlvs = [\"alpn\"]\n",
                "proxy_protocol_tlvs",
            ),
            (
                "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"sni\"]\n",
                "proxy_protocol_tlvs",
            ),
            (
                "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"client_cert\"]\n",
                "proxy_protocol_tlvs",
            ),
            (
                "[[frontend]]\nself_signed = true\nproxy_client_cert_tlv = 0x20\n",
                "proxy_client_cert_tlv",
            ),
            (
                "[[frontend]]\nself_signed = true\naccept_proxy_from = [\"10.0.0.0/8\"]\n",
                "accept_proxy_from",
            ),
            (
                "[[frontend]]\nself_signed = true\naccept_proxy = true\naccept_proxy_from = [\"10.0.0.0/33\"]\n",
                "accept_proxy_from",
            ),
            (
                "[[frontend]]\nself_signed = true\naccept_proxy = true\nproxy_header_timeout = \"0s\"\n",
                "proxy_header_timeout",
            ),
            (
                "[[frontend]]\nself_signed = true\naccept_proxy = true\naccept_proxy_from = []\n",
                "accept_proxy_from",
            ),
            (
                "[[frontend]]\nself_signed = true\nclient_auth = \"required\"\n",
                "client_ca",
            ),
            (
                "[[frontend]]\nself_signed = true\nclient_ca = \"ca.pem\"\n",
                "client_ca",
            ),
            (
                "[[frontend]]\nself_signed = true\nclient_auth = \"optional_no_ca\"\nclient_crl = \"ca.crl\"\n",
                "client_crl",
            ),
            (
                "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nproxy_protocol = \"v2\"\n\
                 proxy_protocol_tlvs = [\"client_cert\"]\nclient_auth = \"optional_no_ca\"\n",
                "client_auth",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
        // optional_no_ca may go without a CA: every certificate is then passed on as unverified.
        let fe = &parse(
            "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nclient_auth = \"optional_no_ca\"\n\
             proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"ssl\"]\n",
        )
        .expect("optional_no_ca without client_ca")
        .frontends[0];
        assert_eq!(fe.client_auth, ClientAuth::OptionalNoCa);
        assert_eq!(fe.client_ca, None);
        assert!(parse("workers = 1\n")
            .unwrap_err()
            .to_string()
            .contains("frontend"));
    }

    #[test]
    fn tls13_only_suites_with_tls12_enabled_is_rejected() {
        let e = parse(
            "[[frontend]]\nself_signed = true\nciphersuites = [\"TLS13_AES_128_GCM_SHA256\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("TLS1.2"), "{e}");
    }
}
