//! What a frontend presents: certificate files (or a self-signed one) and what to do when the
//! client's SNI names none of them.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::acme::Acme;
use super::section::{OnChange, Section};
use super::{key_err, resolve_path, resolve_paths, KeyError, RawFrontend};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    SelfSigned,
    Files {
        paths: Vec<PathBuf>,
        default: Option<PathBuf>,
    },
    /// Obtained and renewed from an ACME CA, as the frontend's `acme` section says; a temporary
    /// self-signed one until the first arrives.
    Acme,
}

/// Where OCSP staples come from (`ocsp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SniFallback {
    /// Serve the frontend's default certificate.
    Default,
    /// Abort the handshake with an alert.
    Reject,
}

/// `certificates`, `self_signed`, `default_certificate`, `unknown_sni`, `missing_sni`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificates {
    pub source: CertSource,
    pub unknown_sni: SniFallback,
    pub missing_sni: SniFallback,
}

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
        let paths: Vec<PathBuf> = resolve_paths(base, self.certificates.as_ref());
        if let Some(acme) = &self.acme {
            if !paths.is_empty() || self.self_signed.unwrap_or(false) {
                return Err(key_err(
                    "acme",
                    "cannot be combined with certificates or self_signed: choose one",
                ));
            }
            let acme = acme.validate(name, base, state_dir)?;
            let certs = Certificates {
                source: CertSource::Acme,
                unknown_sni: self.unknown_sni.unwrap_or(SniFallback::Default),
                missing_sni: self.missing_sni.unwrap_or(SniFallback::Default),
            };
            return Ok((certs, Some(Box::new(acme))));
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
                    "missing: give PEM files or directories (chain + key), acme = { … }, or self_signed = true",
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
        };
        Ok((certs, None))
    }
}
