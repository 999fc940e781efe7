//! Client certificates (mutual TLS): whether to ask for one (`client_auth`), the CA bundle they
//! must chain to (`client_ca`) and the revocation lists checked (`client_crl`).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::section::{OnChange, Section};
use super::{key_err, resolve_path, resolve_paths, KeyError, RawFrontend};

/// Whether clients must present a certificate (mutual TLS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
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

/// `client_auth`, `client_ca`, `client_crl`.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ClientAuthSettings {
    pub mode: ClientAuth,
    pub ca: Option<PathBuf>,
    pub crls: Vec<PathBuf>,
}

impl Section for ClientAuthSettings {
    const KEY: &'static str = "client_auth";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

impl RawFrontend {
    pub(super) fn validate_client_auth(
        &self,
        base: Option<&Path>,
    ) -> Result<ClientAuthSettings, KeyError> {
        let mode = self.client_auth.unwrap_or_default();
        let ca = self.client_ca.clone().map(|p| resolve_path(base, p));
        let crls: Vec<PathBuf> = resolve_paths(base, self.client_crl.as_ref());
        match (mode, &ca) {
            (ClientAuth::None, Some(_)) => Err(key_err(
                "client_ca",
                "is set but client_auth is \"none\": set client_auth = \"optional\" or \"required\"",
            )),
            (ClientAuth::None | ClientAuth::OptionalNoCa, None) if !crls.is_empty() => {
                Err(key_err("client_crl", "needs client_auth and client_ca"))
            }
            (ClientAuth::Optional | ClientAuth::Required, None) => Err(key_err(
                "client_ca",
                "missing: client_auth needs the CA bundle (PEM) client certificates chain to",
            )),
            _ => Ok(ClientAuthSettings { mode, ca, crls }),
        }
    }
}
