//! What a frontend presents: certificate files (or a self-signed one) and what to do when the
//! client's SNI names none of them.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::acme::Acme;
use super::section::{OnChange, Section};
use super::{key_err, resolve_path, KeyError, OneOrMany, RawFrontend};
use crate::proto::pkcs11_uri::Pkcs11Uri;
use serde::Serialize as _;

#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    SelfSigned,
    Files {
        paths: Vec<CertFiles>,
        default: Option<PathBuf>,
    },
    /// Obtained and renewed from an ACME CA, as the frontend's `acme` section says; a temporary
    /// self-signed one until the first arrives.
    Acme,
}

/// A `certificates` entry as written: a bundle or directory, or a chain and its key apart.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum CertEntry {
    Path(PathBuf),
    Pair(CertPair),
}

/// `{ cert = "fullchain.pem", key = "privkey.pem" }`: a table only (a derived struct would also
/// take a two-element list, making `["a.pem", "b.pem"]` a pair), and a misspelt key is an error.
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl<'de> Deserialize<'de> for CertPair {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut table = std::collections::BTreeMap::<String, PathBuf>::deserialize(d)?;
        if let Some(other) = table.keys().find(|k| *k != "cert" && *k != "key") {
            return Err(D::Error::unknown_field(other, &["cert", "key"]));
        }
        let cert = table
            .remove("cert")
            .ok_or_else(|| D::Error::missing_field("cert"))?;
        let key = table
            .remove("key")
            .ok_or_else(|| D::Error::missing_field("key"))?;
        Ok(CertPair { cert, key })
    }
}

impl From<PathBuf> for CertEntry {
    fn from(p: PathBuf) -> Self {
        CertEntry::Path(p)
    }
}

/// Where one certificate comes from: `cert` (a PEM chain, leaf first; or a directory) and the
/// file of its key when that is apart (`None`: in the bundle itself, or in `<bundle>.key`
/// beside it, as HAProxy looks for it).
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq, Hash)]
pub struct CertFiles {
    pub cert: PathBuf,
    /// A file, or a key in a PKCS#11 token by URI (`pkcs11:…`, kept as written; shown without
    /// its PIN).
    #[serde(serialize_with = "key_shown")]
    pub key: Option<PathBuf>,
}

impl CertFiles {
    /// The key's PKCS#11 URI, when it is in a token.
    pub fn token_key(&self) -> Option<&str> {
        let text = self.key.as_deref()?.to_str()?;
        Pkcs11Uri::is_uri(text).then_some(text)
    }
}

/// A key as `shuck check` and the reload report show it: a token URI without its PIN.
#[expect(
    clippy::ref_option,
    reason = "serde's serialize_with hands the field over by reference"
)]
fn key_shown<S: serde::Serializer>(key: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match key.as_deref().and_then(|k| k.to_str()) {
        Some(text) if Pkcs11Uri::is_uri(text) => match Pkcs11Uri::parse(text) {
            Ok(uri) => s.serialize_some(&uri.redacted()),
            Err(_) => s.serialize_some("pkcs11:(unreadable)"),
        },
        _ => key.serialize(s),
    }
}

/// Where keys in PKCS#11 tokens are reached from (`pkcs11_module`, `pkcs11_signers`): the same
/// for every frontend, copied into each one's certificates.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Pkcs11Settings {
    /// The module for URIs that name none.
    pub module: Option<PathBuf>,
    /// Signer threads (each with its own session) per token key.
    pub signers: usize,
}

/// Where OCSP staples come from (`ocsp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OcspMode {
    /// No stapling.
    Off,
    /// A DER response in `<certificate file>.ocsp`, stapled when present and valid.
    #[default]
    File,
    /// Fetched from the certificate's responder (Authority Information Access) and refreshed.
    Fetch,
}

/// What to do with a client whose SNI matches no certificate (or that sends none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SniFallback {
    /// Serve the frontend's default certificate.
    Default,
    /// Abort the handshake with an alert.
    Reject,
}

/// `certificates`, `self_signed`, `default_certificate`, `unknown_sni`, `missing_sni`.
#[derive(serde::Serialize, Debug, Clone)]
pub struct Certificates {
    pub source: CertSource,
    pub unknown_sni: SniFallback,
    pub missing_sni: SniFallback,
    /// For keys in tokens (the global `pkcs11_*` keys, shown and compared as those: a change
    /// is not a change of every frontend's certificates; each load takes the settings anew).
    #[serde(skip)]
    pub pkcs11: Pkcs11Settings,
}

impl PartialEq for Certificates {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
            && self.unknown_sni == other.unknown_sni
            && self.missing_sni == other.missing_sni
    }
}

impl Eq for Certificates {}

/// Files are read again on every reload, whether their names changed or not.
impl Section for Certificates {
    const KEY: &'static str = "certificates";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

impl RawFrontend {
    pub(super) fn validate_certificates(
        &self,
        name: &str,
        base: Option<&Path>,
        state_dir: &Path,
    ) -> Result<(Certificates, Option<Box<Acme>>), KeyError> {
        let paths: Vec<CertFiles> = self
            .certificates
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default()
            .into_iter()
            .map(|entry| match entry {
                CertEntry::Path(p) => CertFiles {
                    cert: resolve_path(base, p),
                    key: None,
                },
                CertEntry::Pair(pair) => CertFiles {
                    cert: resolve_path(base, pair.cert),
                    // A token's URI is no path: kept as written.
                    key: Some(match pair.key.to_str() {
                        Some(k) if Pkcs11Uri::is_uri(k) => pair.key,
                        _ => resolve_path(base, pair.key),
                    }),
                },
            })
            .collect();
        for key in paths.iter().filter_map(CertFiles::token_key) {
            Pkcs11Uri::parse(key)
                .map_err(|e| key_err("certificates", format!("key: the PKCS#11 URI {e}")))?;
        }
        if let Some(acme) = &self.acme {
            if !paths.is_empty() || self.self_signed.unwrap_or(false) {
                return Err(key_err(
                    "acme",
                    "cannot be combined with certificates or self_signed: choose one",
                ));
            }
            let on_demand = self
                .on_demand
                .as_ref()
                .map(super::on_demand::RawOnDemand::validate)
                .transpose()?;
            let acme = acme.validate(name, base, state_dir, on_demand)?;
            let certs = Certificates {
                source: CertSource::Acme,
                unknown_sni: self.unknown_sni.unwrap_or(SniFallback::Default),
                missing_sni: self.missing_sni.unwrap_or(SniFallback::Default),
                pkcs11: Pkcs11Settings::default(),
            };
            return Ok((certs, Some(Box::new(acme))));
        }
        if self.on_demand.is_some() {
            return Err(key_err(
                "on_demand",
                "needs acme (the CA, account and challenge the certificates are ordered with)",
            ));
        }
        let source =
            match (self.self_signed.unwrap_or(false), paths.is_empty()) {
                (true, true) => CertSource::SelfSigned,
                (true, false) => {
                    return Err(key_err(
                        "self_signed",
                        "cannot be combined with certificates: choose one",
                    ))
                }
                (false, true) => return Err(key_err(
                    "certificates",
                    "missing: give PEM files or directories (chain + key), { cert = …, key = … } pairs, acme = { … }, or self_signed = true",
                )),
                (false, false) => CertSource::Files {
                    paths,
                    default: self
                        .default_certificate
                        .clone()
                        .map(|p| resolve_path(base, p)),
                },
            };
        let certs = Certificates {
            source,
            unknown_sni: self.unknown_sni.unwrap_or(SniFallback::Default),
            missing_sni: self.missing_sni.unwrap_or(SniFallback::Default),
            pkcs11: Pkcs11Settings::default(),
        };
        Ok((certs, None))
    }
}

impl Certificates {
    /// Takes the process's `settings` for keys in tokens; every token key must then have a
    /// module, its URI's `module-path` or `pkcs11_module`.
    pub(super) fn with_pkcs11(&mut self, settings: &Pkcs11Settings) -> Result<(), KeyError> {
        self.pkcs11 = settings.clone();
        let CertSource::Files { paths, .. } = &self.source else {
            return Ok(());
        };
        for key in paths.iter().filter_map(CertFiles::token_key) {
            let names_module = Pkcs11Uri::parse(key).is_ok_and(|u| u.module_path.is_some());
            if !names_module && settings.module.is_none() {
                return Err(key_err(
                    "certificates",
                    "a key in a PKCS#11 token needs a module: set pkcs11_module, or module-path in its URI",
                ));
            }
        }
        Ok(())
    }
}
