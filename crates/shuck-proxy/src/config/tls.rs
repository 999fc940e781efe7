//! What the TLS handshake may negotiate (protocol versions, cipher suites, key-exchange groups,
//! ALPN), who protects records after it, and how sessions resume (session cache, tickets).

use std::time::Duration;

use rustls::crypto::SupportedKxGroup;
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

use super::section::{OnChange, Section};
use super::sessions::Resumption;
use super::{defaults, duration_or, key_err, KeyError, RawFrontend};
use crate::proto::tls_params as params;

/// Ticket keys rotate at least this often (shorter only costs full handshakes)...
const MIN_TICKET_LIFETIME: Duration = Duration::from_secs(60);
/// ...and at most this often: TLS 1.3's limit on a ticket's life.
const MAX_TICKET_LIFETIME: Duration = Duration::from_secs(7 * 86_400);

/// Who protects a TLS 1.3 connection's records once its handshake is done (`record_layer`).
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum RecordLayer {
    /// shuck's own (`tls::stream::records`, on the keys rustls hands over): a few hundred bytes per
    /// idle connection, and the way to kTLS.
    #[default]
    Shuck,
    /// rustls' for the connection's whole life: no secrets leave rustls.
    Rustls,
}

impl RecordLayer {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordLayer::Shuck => "shuck",
            RecordLayer::Rustls => "rustls",
        }
    }
}

/// `protocols`, `ciphersuites`, `groups`, `alpn`: what a handshake may negotiate.
#[derive(serde::Serialize, Debug, Clone, PartialEq)]
pub struct Tls {
    pub versions: Versions,
    pub ciphersuites: Suites,
    pub groups: Groups,
    pub alpn: Alpn,
}

impl Section for Tls {
    const KEY: &'static str = "tls";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

/// `record_layer`, `ktls`: who protects a TLS 1.3 connection's records after the handshake.
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLayerSettings {
    pub layer: RecordLayer,
    /// Kernel TLS: the kernel protects the records once the handshake is done, where it can
    /// (`tls::stream::ktls`).
    pub ktls: bool,
}

impl Section for RecordLayerSettings {
    const KEY: &'static str = "record_layer";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

/// Protocol versions, compared and shown by version.
#[derive(Clone)]
pub struct Versions(pub Vec<&'static SupportedProtocolVersion>);

/// Cipher suites, shown by name.
#[derive(Clone, PartialEq)]
pub struct Suites(pub Vec<SupportedCipherSuite>);

/// Key-exchange groups, compared and shown by name.
#[derive(Clone)]
pub struct Groups(pub Vec<&'static dyn SupportedKxGroup>);

/// ALPN protocol names, shown as text.
#[derive(Clone, PartialEq, Eq)]
pub struct Alpn(pub Vec<Vec<u8>>);

impl PartialEq for Versions {
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .map(|v| v.version)
            .eq(other.0.iter().map(|v| v.version))
    }
}

// By version number: a total equality.
impl Eq for Versions {}

// By version number, as compared.
impl std::hash::Hash for Versions {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for v in &self.0 {
            u16::from(v.version).hash(state);
        }
    }
}

impl PartialEq for Groups {
    fn eq(&self, other: &Self) -> bool {
        self.0
            .iter()
            .map(|g| g.name())
            .eq(other.0.iter().map(|g| g.name()))
    }
}

impl std::fmt::Debug for Versions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|v| v.version))
            .finish()
    }
}

impl std::fmt::Debug for Suites {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(SupportedCipherSuite::suite))
            .finish()
    }
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|g| g.name()))
            .finish()
    }
}

impl std::fmt::Debug for Alpn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|p| String::from_utf8_lossy(p)))
            .finish()
    }
}

macro_rules! deref_to_vec {
    ($($t:ty => $item:ty),*) => {$(
        impl std::ops::Deref for $t {
            type Target = Vec<$item>;
            fn deref(&self) -> &Vec<$item> {
                &self.0
            }
        }
    )*};
}

deref_to_vec!(
    Versions => &'static SupportedProtocolVersion,
    Suites => SupportedCipherSuite,
    Groups => &'static dyn SupportedKxGroup,
    Alpn => Vec<u8>
);

impl RawFrontend {
    /// `record_layer`, and `ktls` with it: the kernel takes the keys shuck's layer holds.
    pub(super) fn validate_record_layer(&self) -> Result<RecordLayerSettings, KeyError> {
        let layer = self.record_layer.unwrap_or_default();
        if layer == RecordLayer::Rustls && self.ktls == Some(true) {
            return Err(key_err(
                "ktls",
                "needs record_layer = \"shuck\" (the kernel takes over the keys shuck's record layer holds)",
            ));
        }
        Ok(RecordLayerSettings {
            layer,
            ktls: self.ktls.unwrap_or(false),
        })
    }

    /// `demo_backend`: the frontend has no `backend`, which changes the ALPN default.
    pub(super) fn validate_tls(&self, demo_backend: bool) -> Result<Tls, KeyError> {
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
        Ok(Tls {
            versions: Versions(versions),
            ciphersuites: Suites(ciphersuites),
            groups: Groups(groups),
            alpn: Alpn(self.validate_alpn(demo_backend)?),
        })
    }

    pub(super) fn validate_resumption(
        &self,
        base: Option<&std::path::Path>,
    ) -> Result<Resumption, KeyError> {
        let tickets = self.session_tickets.unwrap_or(true);
        Ok(Resumption {
            cache_size: self
                .session_cache_size
                .unwrap_or(defaults::SESSION_CACHE_SIZE),
            tickets,
            ticket_lifetime: self.validate_ticket_lifetime()?,
            ticket_keys: self.validate_ticket_keys(base, tickets)?,
        })
    }

    fn validate_alpn(&self, demo_backend: bool) -> Result<Vec<Vec<u8>>, KeyError> {
        let Some(list) = &self.alpn else {
            // The demo backend speaks HTTP/1.x only; advertising h2 would break browsers.
            return Ok(if demo_backend {
                vec![b"http/1.1".to_vec()]
            } else {
                Vec::new()
            });
        };
        let mut out = Vec::with_capacity(list.len());
        for p in list {
            if p.is_empty() || p.len() > 255 {
                return Err(key_err(
                    "alpn",
                    format!("{p:?}: a protocol name is 1 to 255 bytes"),
                ));
            }
            if demo_backend && p == "h2" {
                return Err(key_err(
                    "alpn",
                    "\"h2\" in front of the built-in demo page, which speaks only HTTP/1.1: a browser would choose h2 and fail; give a backend that speaks h2, or leave it out",
                ));
            }
            out.push(p.clone().into_bytes());
        }
        Ok(out)
    }

    fn validate_ticket_lifetime(&self) -> Result<Duration, KeyError> {
        let lifetime = duration_or(
            "session_ticket_lifetime",
            self.session_ticket_lifetime.as_deref(),
            defaults::SESSION_TICKET_LIFETIME,
        )?;
        if !(MIN_TICKET_LIFETIME..=MAX_TICKET_LIFETIME).contains(&lifetime) {
            return Err(key_err(
                "session_ticket_lifetime",
                "must be from 1m (shorter only costs full handshakes) to 7d (TLS 1.3's limit)",
            ));
        }
        Ok(lifetime)
    }
}
