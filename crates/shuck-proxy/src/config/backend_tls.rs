//! `backend_tls`: TLS to the backends (re-encryption), verified against a CA (or the system's
//! roots), with a client certificate when the backend asks for one: stunnel's client mode,
//! nginx's `proxy_ssl_*`, HAProxy's `server … ssl verify required ca-file … crt …`.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{key_err, resolve_path, CertFiles, KeyError, Versions};
use crate::proto::tls_params as params;

/// `backend_tls` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawBackendTls {
    pub ca: Option<PathBuf>,
    pub verify: Option<String>,
    pub server_name: Option<String>,
    pub client_certificate: Option<RawCertPair>,
    pub alpn: Option<Vec<String>>,
    pub versions: Option<Vec<String>>,
}

/// `{ cert = …, key = … }` (the key may be in the cert file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertPair {
    pub cert: PathBuf,
    pub key: Option<PathBuf>,
}

/// Whether the backend's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verify {
    /// Its chain up to `ca` (or the system's roots) and the name it is asked for.
    Full,
    /// Nothing: encryption without authentication (a lab, a backend behind a trusted link).
    None,
}

/// The name the backend is asked for (SNI) and its certificate is checked against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerName {
    /// The backend's own host name (its address for an IP backend): the default.
    Backend,
    /// The name the client asked shuck for.
    Client,
    /// This name.
    Fixed(String),
}

/// `backend_tls`, validated.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub struct BackendTls {
    /// The CA bundle the backend's chain must reach; `None`: the system's roots.
    pub ca: Option<PathBuf>,
    pub verify: Verify,
    pub server_name: ServerName,
    pub client_certificate: Option<CertFiles>,
    pub alpn: Vec<String>,
    pub versions: Versions,
}

impl RawBackendTls {
    pub(super) fn validate(&self, base: Option<&Path>) -> Result<BackendTls, KeyError> {
        let bad = |field: &str, m: String| key_err(&format!("backend_tls.{field}"), m);
        let verify = match self.verify.as_deref() {
            None | Some("full") => Verify::Full,
            Some("none") => Verify::None,
            Some(v) => return Err(bad("verify", format!("{v:?} is not \"full\" or \"none\""))),
        };
        if verify == Verify::None && self.ca.is_some() {
            return Err(bad(
                "ca",
                "is set but verify is \"none\": nothing would be checked against it".into(),
            ));
        }
        let server_name = match self.server_name.as_deref() {
            None => ServerName::Backend,
            Some("client") => ServerName::Client,
            Some(n) if rustls::pki_types::ServerName::try_from(n).is_ok() => {
                ServerName::Fixed(n.to_ascii_lowercase())
            }
            Some(n) => {
                return Err(bad(
                    "server_name",
                    format!("{n:?} is neither a DNS name, an address nor \"client\""),
                ))
            }
        };
        if let Some(p) = self
            .alpn
            .iter()
            .flatten()
            .find(|p| p.is_empty() || p.len() > 255)
        {
            return Err(bad(
                "alpn",
                format!("{p:?}: a protocol name is 1 to 255 bytes"),
            ));
        }
        let versions = match &self.versions {
            None => params::default_versions(),
            Some(list) => params::parse_versions(list).map_err(|m| bad("versions", m))?,
        };
        // A client certificate's key is signed with by the connection's own thread: a token's
        // would stall the worker. (The URI is not shown: it may hold a PIN.)
        let in_token = |p: &PathBuf| {
            p.to_str()
                .is_some_and(crate::proto::pkcs11_uri::Pkcs11Uri::is_uri)
        };
        if let Some(c) = &self.client_certificate {
            if in_token(&c.cert) || c.key.as_ref().is_some_and(in_token) {
                return Err(bad(
                    "client_certificate",
                    "a key in a PKCS#11 token is not supported here yet: give a key file".into(),
                ));
            }
        }
        Ok(BackendTls {
            ca: self.ca.clone().map(|p| resolve_path(base, p)),
            verify,
            server_name,
            client_certificate: self.client_certificate.as_ref().map(|c| CertFiles {
                cert: resolve_path(base, c.cert.clone()),
                key: c.key.clone().map(|k| resolve_path(base, k)),
            }),
            alpn: self.alpn.clone().unwrap_or_default(),
            versions: Versions(versions),
        })
    }
}
