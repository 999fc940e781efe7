//! Configuration: the raw TOML/flags shape (`RawConfig`) and the validated form (`Config`) the
//! server runs from. Validation resolves every name (cipher suites, groups, durations, addresses)
//! here, so a typo is reported once, at start, with the key that holds it.
//!
//! One file per section of a frontend, each with its keys' validated types and the function that
//! checks them (`frontend` puts them together and says how a change to each applies): `listen`, `backend`, `certificates`, `tls` (protocols, cipher suites, groups,
//! ALPN, resumption), `timeouts`, `client_auth`, `proxy` (sending and accepting PROXY headers).
//! `global` holds the keys outside `[[frontend]]`. Checks that span sections live in
//! [`check_section_combinations`].

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::proto::proxy_protocol::Version;
pub(crate) use sessions::url_without_password;
pub use sessions::{SessionStoreSettings, TicketKeyFiles, TicketKeyFormat};

mod acme;
mod admission;
pub mod backend;
pub mod backend_tls;
mod certificates;
mod client_auth;
mod dns_update;
pub mod frontend;
pub mod global;
pub mod health;
mod keys;
mod listen;
pub mod log_template;
mod on_demand;
mod proxy;
mod redirect;
pub mod routes;
mod section;
mod ser;
mod sessions;
mod timeouts;
mod tls;

pub use crate::proto::tls_params::OPENSSL_TLS12_SUITES;
pub use acme::{Acme, AcmeKey, AcmeStore, Challenge, Eab, UntilIssued};
pub use admission::{Admission, HandshakeRate, NetList, PerClient};
pub use backend::{Backend, BackendAddr, BackendPolicy, Backends, Target, MAX_BACKENDS};
pub use certificates::{
    CertEntry, CertFiles, CertPair, CertSource, Certificates, OcspMode, Pkcs11Settings, SniFallback,
};
pub use client_auth::{ClientAuth, ClientAuthSettings};
pub use dns_update::DnsUpdate;
pub use frontend::{AcmeSettings, Frontend, OnChange, Section, SectionChange};
pub use global::ConnectionLogFormat;
pub use global::{LogFormat, LogTarget, SyslogAddress, MAX_CONNECTIONS_LIMIT};
pub use health::HealthCheck;
pub use listen::Listen;
pub use on_demand::OnDemand;
pub use proxy::{AcceptProxy, Proxy, ProxyProtocol, ProxyTlvs};
pub use redirect::{Redirect, UnknownHost};
pub use routes::{name_matches, Route, RoutePolicy, Routes};
pub use sessions::Resumption;
pub use timeouts::{Timeouts, EVICTABLE_AFTER, PRESSURED_HANDSHAKE, PRESSURED_IDLE};
pub use tls::{Alpn, Groups, RecordLayer, RecordLayerSettings, Suites, Tls, Versions};

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
    pub reload_timeout: Option<String>,
    pub upgrade_confirm: Option<String>,
    pub upgrade_timeout: Option<String>,
    pub log_format: Option<LogFormat>,
    pub log_target: Option<String>,
    pub log_address: Option<String>,
    pub log_queue_lines: Option<usize>,
    pub log_level: Option<String>,
    pub log_connections: Option<bool>,
    pub connection_log_format: Option<String>,
    pub metrics_listen: Option<String>,
    pub certificate_expiry_warning: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub user: Option<String>,
    pub group: Option<String>,
    pub allow_root: Option<bool>,
    pub resolvers: Option<Vec<String>>,
    pub dns_allow_special_addresses: Option<bool>,
    pub overload_threshold: Option<f64>,
    pub watch_certificates: Option<bool>,
    pub metrics_per_worker: Option<bool>,
    pub admin_socket: Option<PathBuf>,
    pub admin_group: Option<String>,
    pub pkcs11_module: Option<PathBuf>,
    pub pkcs11_signers: Option<usize>,
    #[serde(default)]
    pub redirect: Vec<redirect::RawRedirect>,
    #[serde(default, rename = "frontend")]
    pub frontends: Vec<RawFrontend>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFrontend {
    pub name: Option<String>,
    pub listen: Option<OneOrMany<String>>,
    pub backend: Option<OneOrMany<backend::BackendEntry>>,
    pub backend_policy: Option<BackendPolicy>,
    pub certificates: Option<OneOrMany<CertEntry>>,
    pub self_signed: Option<bool>,
    pub acme: Option<acme::RawAcme>,
    pub on_demand: Option<on_demand::RawOnDemand>,
    pub ocsp: Option<OcspMode>,
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
    pub dns_refresh: Option<String>,
    pub health_check: Option<health::RawHealthCheck>,
    pub backlog: Option<u32>,
    pub defer_accept: Option<String>,
    pub ktls: Option<bool>,
    pub record_layer: Option<RecordLayer>,
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
    pub session_ticket_keys: Option<OneOrMany<PathBuf>>,
    pub session_ticket_key_format: Option<TicketKeyFormat>,
    pub session_store: Option<String>,
    pub session_store_timeout: Option<String>,
    pub session_store_key: Option<PathBuf>,
    pub acme_store: Option<String>,
    pub acme_store_key: Option<PathBuf>,
    pub allow: Option<Vec<String>>,
    pub deny: Option<Vec<String>>,
    pub deny_ja4: Option<Vec<String>>,
    pub max_connections: Option<usize>,
    pub per_client: Option<admission::RawPerClient>,
    pub per_client_table: Option<usize>,
    #[serde(default, rename = "route")]
    pub routes: Vec<routes::RawRoute>,
    pub backend_tls: Option<backend_tls::RawBackendTls>,
}

/// Defaults, in one place so docs/configuration.md can be checked against them.
pub mod defaults {
    use std::time::Duration;
    pub const LISTEN: &str = "127.0.0.1:8443";
    pub const MAX_CONNECTIONS: usize = 8192;
    pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
    pub const RELOAD_TIMEOUT: Duration = Duration::from_secs(30);
    pub const UPGRADE_CONFIRM: Duration = Duration::from_secs(5);
    pub const UPGRADE_TIMEOUT: Duration = Duration::from_secs(60);
    /// Lines of a few hundred bytes: about 1 MiB held at most while the log reader lags.
    pub const LOG_QUEUE_LINES: usize = 4096;
    pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
    pub const BACKEND_COOLDOWN: Duration = Duration::from_secs(2);
    pub const BACKLOG: u32 = 1024;
    pub const DEFER_ACCEPT: Duration = Duration::from_secs(1);
    pub const SESSION_CACHE_SIZE: usize = 4096;
    pub const CERTIFICATE_EXPIRY_WARNING: Duration = Duration::from_secs(30 * 86_400);
    pub const SESSION_TICKET_LIFETIME: Duration = Duration::from_secs(6 * 3600);
    pub const PROXY_HEADER_TIMEOUT: Duration = Duration::from_secs(5);
    /// A worker sheds new full handshakes past 95% of a core (two windows averaged).
    pub const OVERLOAD_THRESHOLD: f64 = 0.95;
    /// hitch's choice for the client certificate TLV.
    pub const PROXY_CLIENT_CERT_TLV: u8 = 0xE0;
}

/// The validated configuration.
#[derive(Debug, Clone)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent on/off keys of the file, not states of one thing"
)]
pub struct Config {
    pub origin: Origin,
    /// Worker threads; always >= 1 (0 in the file means "one per core").
    pub workers: usize,
    pub pin_cpus: bool,
    pub max_connections: usize,
    pub shutdown_grace: Duration,
    /// A reload still loading after this long is abandoned (the old configuration serves on).
    pub reload_timeout: Duration,
    /// After an upgrade's handover, how long the old process stays ready to take the service
    /// back should the new one die.
    pub upgrade_confirm: Duration,
    /// How long the new process of an upgrade may take to listen before it is stopped.
    pub upgrade_timeout: Duration,
    pub log_format: LogFormat,
    /// Where log lines go (`log_target`, `log_address`).
    pub log_target: LogTarget,
    /// Log lines queued for the writer thread at most; beyond, lines are dropped and counted.
    pub log_queue_lines: usize,
    pub log_level: String,
    pub log_connections: bool,
    pub connection_log_format: ConnectionLogFormat,
    /// Where to serve Prometheus metrics (`GET /metrics`), if anywhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Certificates not renewed by shuck are warned about this long before they expire.
    pub certificate_expiry_warning: Duration,
    /// Where ACME accounts and certificates are kept.
    pub state_dir: PathBuf,
    /// The user (and group) to run as once the sockets are bound and the keys read.
    pub user: Option<String>,
    pub group: Option<String>,
    /// Run as root without `user` (refused otherwise).
    pub allow_root: bool,
    /// The DNS servers host-name backends are looked up with; empty: the system's.
    pub resolvers: Vec<SocketAddr>,
    /// DNS answers may name loopback, link-local and cloud metadata addresses.
    pub dns_allow_special_addresses: bool,
    /// The share of a worker's time in handshakes past which new full handshakes are shed
    /// (1.0: never).
    pub overload_threshold: f64,
    /// Certificate, key, OCSP and ticket-key files are watched and loaded again when they
    /// change, without SIGHUP.
    pub watch_certificates: bool,
    /// `/metrics` series keep their `worker` label (otherwise the workers are summed).
    pub metrics_per_worker: bool,
    /// The Unix socket `shuck ctl` talks to, if any.
    pub admin_socket: Option<PathBuf>,
    /// The group that may use it besides the user shuck runs as.
    pub admin_group: Option<String>,
    /// Where keys in PKCS#11 tokens are reached from.
    pub pkcs11: Pkcs11Settings,
    /// Plain-HTTP listeners: redirects to HTTPS and ACME HTTP-01 answers.
    pub redirect: Vec<Redirect>,
    pub frontends: Vec<Frontend>,
}

/// A configuration value refused: the key that holds it (for a frontend's keys, prefixed with
/// the frontend by [`KeyError::in_frontend`]) and why.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {message}")]
struct KeyError {
    key: String,
    message: String,
}

impl KeyError {
    fn in_frontend(self, name: &str) -> KeyError {
        key_err(&format!("frontend {name:?}: {}", self.key), self.message)
    }
}

fn key_err(key: &str, message: impl Into<String>) -> KeyError {
    KeyError {
        key: key.to_string(),
        message: message.into(),
    }
}

/// How host-name backends are looked up: the servers asked, and what an answer may name.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DnsLookups {
    /// Empty: the system's servers.
    pub resolvers: Vec<SocketAddr>,
    /// Loopback, link-local and cloud metadata addresses are members too.
    pub allow_special_addresses: bool,
}

impl Config {
    /// How this configuration's host-name backends are looked up.
    pub fn dns_lookups(&self) -> DnsLookups {
        DnsLookups {
            resolvers: self.resolvers.clone(),
            allow_special_addresses: self.dns_allow_special_addresses,
        }
    }
}

impl RawConfig {
    /// Reads and parses a TOML file, without validating values yet.
    pub fn from_file(path: &Path) -> Result<RawConfig> {
        let text = crate::sys::files::read_to_string(path).map_err(|source| Error::ConfigRead {
            path: path.to_path_buf(),
            source,
        })?;
        RawConfig::parse(&text, &Origin::File(path.to_path_buf()))
    }

    pub fn parse(text: &str, origin: &Origin) -> Result<RawConfig> {
        let syntax = |e: toml::de::Error| Error::ConfigSyntax {
            origin: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        };
        // The keys first, for the messages serde cannot give (`keys`); then serde, whose
        // messages carry the line.
        let table: toml::Table = toml::from_str(text).map_err(syntax)?;
        keys::check(&table).map_err(|e| Error::ConfigValue {
            origin: origin.to_string(),
            key: e.key,
            message: e.message,
        })?;
        toml::from_str(text).map_err(syntax)
    }

    pub fn validate(self, origin: Origin, base: Option<&Path>) -> Result<Config> {
        let named = origin.to_string();
        self.validate_all(origin, base)
            .map_err(|e| Error::ConfigValue {
                origin: named,
                key: e.key,
                message: e.message,
            })
    }

    fn validate_all(self, origin: Origin, base: Option<&Path>) -> Result<Config, KeyError> {
        if self.frontends.is_empty() {
            return Err(key_err(
                "frontend",
                "no [[frontend]] section: nothing to serve",
            ));
        }
        let mut config = self.validate_globals(origin, base)?;
        let frontends = &mut config.frontends;
        for (i, raw) in self.frontends.into_iter().enumerate() {
            let name = raw.name.clone().unwrap_or_else(|| format!("frontend{i}"));
            // Names go into metric labels and log fields as they are.
            if name.is_empty()
                || name
                    .chars()
                    .any(|c| c == '"' || c == '\\' || c.is_control())
            {
                return Err(key_err(
                    &format!("frontend[{i}].name"),
                    format!("{name:?}: a name is not empty and holds no quote, backslash or control character (it labels metrics and log lines)"),
                ));
            }
            if frontends.iter().any(|f| f.name == name) {
                return Err(key_err(
                    &format!("frontend[{i}].name"),
                    format!("{name:?} is used twice"),
                ));
            }
            let mut fe = raw
                .validate(&name, base, &config.state_dir)
                .map_err(|e| e.in_frontend(&name))?;
            fe.certificates
                .with_pkcs11(&config.pkcs11)
                .map_err(|e| e.in_frontend(&name))?;
            listen::check_not_shared(&fe, frontends).map_err(|e| e.in_frontend(&name))?;
            frontends.push(fe);
        }
        global::check_metrics_listen_free(config.metrics_listen, &config.frontends)?;
        config.redirect = self
            .redirect
            .iter()
            .enumerate()
            .map(|(i, r)| r.validate(i))
            .collect::<Result<_, _>>()?;
        redirect::check_addresses_free(&config)?;
        redirect::check_http01_answered(&config)?;
        acme::check_names_unique(&config.frontends)?;
        Ok(config)
    }
}

impl RawFrontend {
    fn validate(
        self,
        name: &str,
        base: Option<&Path>,
        state_dir: &Path,
    ) -> Result<Frontend, KeyError> {
        let listen = self.validate_listen()?;
        let backend = self.validate_backend(base)?;
        let (certs, acme) = self.validate_certificates(name, base, state_dir)?;
        let routes = self.validate_routes(base)?;
        // The demo page answers only a frontend without backends or routes.
        let demo = matches!(backend.target, Backend::Demo) && routes.0.is_empty();
        let tls = self.validate_tls(demo)?;
        let records = self.validate_record_layer()?;
        let timeouts = self.validate_timeouts()?;
        let admission = self.validate_admission()?;
        let client_auth = self.validate_client_auth(base)?;
        let send = self.validate_send_proxy()?;
        let accept = self.validate_accept_proxy()?;
        let resumption = self.validate_resumption(base)?;
        let session_store = self.validate_session_store(base)?;
        let acme = self.with_acme_store(acme, session_store.as_ref(), base)?;
        check_section_combinations(demo, &send, &client_auth)?;
        for (i, r) in routes.0.iter().enumerate() {
            let route_send = proxy::SendProxy {
                version: r.send,
                tlvs: r.tlvs,
            };
            check_section_combinations(false, &route_send, &client_auth)
                .map_err(|e| key_err(&format!("route[{i}].{}", e.key), e.message))?;
        }
        Ok(Frontend {
            name: name.to_string(),
            named: self.name.is_some(),
            state_dir: state_dir.to_path_buf(),
            listen,
            backend,
            certificates: certs,
            acme: AcmeSettings(acme),
            ocsp: self.ocsp.unwrap_or_default(),
            tls,
            record_layer: records,
            timeouts,
            admission,
            proxy_protocol: Proxy {
                send: send.version,
                tlvs: send.tlvs,
                accept,
            },
            client_auth,
            resumption,
            session_store,
            route: routes,
        })
    }
}

/// The rules that tie one section's keys to another's.
fn check_section_combinations(
    demo: bool,
    send: &proxy::SendProxy,
    client: &ClientAuthSettings,
) -> Result<(), KeyError> {
    if send.version.is_some() && demo {
        return Err(key_err(
            "proxy_protocol",
            "needs a backend: the built-in demo backend reads the connection directly",
        ));
    }
    if client.mode == ClientAuth::OptionalNoCa
        && (send.version != Some(Version::V2) || !send.tlvs.ssl)
    {
        // Every client is served: only the backend can act on the result.
        return Err(key_err(
            "client_auth",
            "\"optional_no_ca\" passes unverified certificates on, so the backend must be told: \
             set proxy_protocol = \"v2\" with \"ssl\" in proxy_protocol_tlvs (the verify result)",
        ));
    }
    if send.tlvs.client_cert.is_some() && client.mode == ClientAuth::None {
        return Err(key_err(
            "proxy_protocol_tlvs",
            "\"client_cert\" needs client_auth = \"optional\", \"required\" or \"optional_no_ca\"",
        ));
    }
    Ok(())
}

/// Far above any sane setting, far below where `Instant + Duration` could overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 86_400);

/// "10s", "5m", "1h 30m", "250ms"; at most 30 days.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{s:?} is not a duration like \"10s\", \"5m\" or \"250ms\": {e}"))?;
    if d > MAX_DURATION {
        return Err(format!("{s:?} is longer than 30 days"));
    }
    Ok(d)
}

/// The duration under `key`, or `default` when the key is absent.
fn duration_or(key: &str, value: Option<&str>, default: Duration) -> Result<Duration, KeyError> {
    value.map_or(Ok(default), |s| {
        parse_duration(s).map_err(|m| key_err(key, m))
    })
}

/// A list of paths from the file, each resolved by [`resolve_path`].
fn resolve_paths(base: Option<&Path>, list: Option<&OneOrMany<PathBuf>>) -> Vec<PathBuf> {
    list.cloned()
        .map(OneOrMany::into_vec)
        .unwrap_or_default()
        .into_iter()
        .map(|p| resolve_path(base, p))
        .collect()
}

/// Relative paths in a file are relative to the file's directory (`base`).
fn resolve_path(base: Option<&Path>, p: PathBuf) -> PathBuf {
    match base {
        Some(b) if p.is_relative() => b.join(p),
        _ => p,
    }
}

#[cfg(test)]
mod tests;
