//! `acme = { … }`: certificates a frontend obtains and renews itself from an ACME CA (RFC 8555),
//! answering the TLS-ALPN-01 challenge on its own listener, and the `state_dir` they are kept in.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{key_err, resolve_path, KeyError, OneOrMany, RawFrontend};

/// Where shuck keeps what it must find again after a restart (ACME accounts and certificates).
pub(super) const STATE_DIR: &str = "/var/lib/shuck";

/// The key shuck generates for each certificate it orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AcmeKey {
    /// ECDSA P-256: what browsers and CAs expect today, and far cheaper to sign with.
    #[default]
    Ecdsa,
    /// RSA 2048, for clients that know nothing else.
    Rsa,
}

/// What a frontend serves before its first certificate is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum UntilIssued {
    /// A self-signed certificate for the names, named as temporary.
    #[default]
    Temporary,
    /// No certificate: every handshake is refused (`access_denied`).
    Refuse,
}

/// How the CA validates that shuck answers for a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
pub enum Challenge {
    /// RFC 8737: a certificate shown on the frontend's own listener (port 443).
    #[default]
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
    /// RFC 8555 §8.3: a file served on port 80 by a `[[redirect]]` listener.
    #[serde(rename = "http-01")]
    Http01,
    /// RFC 8555 §8.4: a TXT record written by dynamic update (`dns_update`); wildcards too.
    #[serde(rename = "dns-01")]
    Dns01,
}

impl Challenge {
    /// As the CA names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Challenge::TlsAlpn01 => "tls-alpn-01",
            Challenge::Http01 => "http-01",
            Challenge::Dns01 => "dns-01",
        }
    }
}

/// `acme` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAcme {
    pub directory: Option<String>,
    pub contact: Option<OneOrMany<String>>,
    pub names: Option<Vec<String>>,
    pub key: Option<AcmeKey>,
    /// A PEM CA to trust for the directory's HTTPS instead of the system's (a test CA).
    pub directory_ca: Option<PathBuf>,
    pub until_issued: Option<UntilIssued>,
    /// External account binding (RFC 8555 §7.3.4): the key ID the CA gave...
    pub eab_kid: Option<String>,
    /// ...and the file holding its HMAC key (base64url, as CAs hand it out).
    pub eab_hmac_key_file: Option<PathBuf>,
    pub challenge: Option<Challenge>,
    pub dns_update: Option<super::dns_update::RawDnsUpdate>,
}

/// External account binding: what a CA that requires it gave with the account.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Eab {
    pub kid: String,
    /// Read when an account is created (never logged or shown).
    pub hmac_key_file: PathBuf,
}

/// Where a fleet shares its ACME state (`acme_store`, or the `session_store`), and the file of
/// the key that seals it.
#[derive(Clone, PartialEq, Eq, serde::Serialize)]
pub struct AcmeStore {
    #[serde(serialize_with = "super::ser::url_without_password")]
    pub url: String,
    pub key: PathBuf,
}

/// Without the URL's password.
impl std::fmt::Debug for AcmeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcmeStore")
            .field("url", &super::sessions::url_without_password(&self.url))
            .field("key", &self.key)
            .finish()
    }
}

/// A frontend's ACME settings, validated, with where its state lives.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Acme {
    pub directory: String,
    pub contact: Vec<String>,
    /// Lower-case DNS names, the first the certificate's subject.
    pub names: Vec<String>,
    pub key: AcmeKey,
    pub directory_ca: Option<PathBuf>,
    pub until_issued: UntilIssued,
    pub eab: Option<Eab>,
    /// `acme_store`, when set (else the fleet shares through the session store, if any:
    /// `Frontend::fleet_store`).
    pub store: Option<AcmeStore>,
    /// `<state_dir>/acme`: accounts (by directory) and certificates (by frontend).
    pub dir: PathBuf,
    /// The certificate bundle this frontend serves once one is issued (chain, then key).
    pub bundle: PathBuf,
    pub challenge: Challenge,
    /// Where DNS-01 records are written (with `challenge = "dns-01"` only).
    pub dns_update: Option<super::DnsUpdate>,
    /// Certificates ordered at the first handshake for names allowed by the operator's
    /// endpoint (the frontend's `on_demand`); `names` may then be empty.
    pub on_demand: Option<super::OnDemand>,
}

impl Acme {
    /// The settings of the on-demand certificate for `name`: its own bundle, beside the
    /// frontend's (`<state_dir>/acme/on-demand/<frontend>/<name>.pem`).
    #[must_use]
    pub fn for_name(&self, frontend: &str, name: &str) -> Acme {
        Acme {
            names: vec![name.to_string()],
            bundle: self
                .dir
                .join("on-demand")
                .join(file_stem(frontend))
                .join(format!("{}.pem", file_stem(name))),
            on_demand: None,
            ..self.clone()
        }
    }
}

impl RawAcme {
    pub(super) fn validate(
        &self,
        frontend: &str,
        base: Option<&Path>,
        state_dir: &Path,
        on_demand: Option<super::OnDemand>,
    ) -> Result<Acme, KeyError> {
        let directory = self
            .directory
            .clone()
            .ok_or_else(|| key_err("acme.directory", "missing: the CA's directory URL"))?;
        if !directory.starts_with("https://") {
            return Err(key_err(
                "acme.directory",
                format!("{directory:?} is not an https:// URL"),
            ));
        }
        let contact = self
            .contact
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default();
        if let Some(c) = contact.iter().find(|c| !c.contains(':')) {
            return Err(key_err(
                "acme.contact",
                format!("{c:?} is not a URI (write mailto:{c})"),
            ));
        }
        let names = self.names.clone().unwrap_or_default();
        if names.is_empty() && on_demand.is_none() {
            return Err(key_err(
                "acme.names",
                "missing: the DNS names to order a certificate for",
            ));
        }
        let challenge = self.challenge.unwrap_or_default();
        let names = names
            .iter()
            .map(|n| dns_name(n, challenge).map_err(|m| key_err("acme.names", m)))
            .collect::<Result<Vec<_>, _>>()?;
        let dns_update = match (&self.dns_update, challenge) {
            (Some(d), Challenge::Dns01) => Some(d.validate(base)?),
            (None, Challenge::Dns01) => {
                return Err(key_err(
                    "acme.dns_update",
                    "missing: challenge = \"dns-01\" writes its records by dynamic update to this server",
                ))
            }
            (Some(_), _) => {
                return Err(key_err(
                    "acme.dns_update",
                    "only with challenge = \"dns-01\"",
                ))
            }
            (None, _) => None,
        };
        if let Some(d) = &dns_update {
            if let Some(n) = names
                .iter()
                .find(|n| !super::dns_update::in_zone(n, &d.zone))
            {
                return Err(key_err(
                    "acme.names",
                    format!(
                        "{n:?} is not in the zone {:?} that dns_update writes to",
                        d.zone
                    ),
                ));
            }
        }
        let eab = match (&self.eab_kid, &self.eab_hmac_key_file) {
            (None, None) => None,
            (Some(kid), Some(file)) if !kid.is_empty() => Some(Eab {
                kid: kid.clone(),
                hmac_key_file: resolve_path(base, file.clone()),
            }),
            _ => {
                return Err(key_err(
                    "acme.eab_kid",
                    "external account binding needs both eab_kid and eab_hmac_key_file",
                ))
            }
        };
        let dir = state_dir.join("acme");
        let bundle = dir
            .join("certs")
            .join(format!("{}.pem", file_stem(frontend)));
        Ok(Acme {
            directory,
            contact,
            names,
            key: self.key.unwrap_or_default(),
            directory_ca: self.directory_ca.clone().map(|p| resolve_path(base, p)),
            until_issued: self.until_issued.unwrap_or_default(),
            eab,
            store: None,
            dir,
            bundle,
            challenge,
            dns_update,
            on_demand,
        })
    }
}

impl RawFrontend {
    /// `acme_store`: where the fleet shares its ACME state, and the key that seals it
    /// (`acme_store_key`, else `session_store_key`).
    pub(super) fn with_acme_store(
        &self,
        acme: Option<Box<Acme>>,
        sessions: Option<&super::SessionStoreSettings>,
        base: Option<&Path>,
    ) -> Result<Option<Box<Acme>>, KeyError> {
        if self.acme_store_key.is_some() && self.acme_store.is_none() {
            return Err(key_err("acme_store_key", "needs acme_store"));
        }
        let Some(mut acme) = acme else {
            if self.acme_store.is_some() {
                return Err(key_err("acme_store", "needs acme"));
            }
            return Ok(None);
        };
        acme.store = match (&self.acme_store, sessions) {
            (Some(url), _) => {
                let key = self
                    .acme_store_key
                    .clone()
                    .map(|k| resolve_path(base, k))
                    .or_else(|| sessions.map(|s| s.key.clone()))
                    .ok_or_else(|| key_err("acme_store", "needs acme_store_key (or a session_store_key): the file whose secret seals what the fleet stores, the same on every host"))?;
                Some(AcmeStore {
                    url: super::sessions::store_url("acme_store", url)?,
                    key,
                })
            }
            // The session store's, taken when the server starts (`Frontend::fleet_store`): kept
            // out of `acme`, whose change needs a restart, so a session store edit still reloads.
            (None, _) => None,
        };
        Ok(Some(acme))
    }
}

/// One frontend orders each name: two would answer each other's challenges with the wrong
/// certificate (the challenge table is the process's).
pub(super) fn check_names_unique(frontends: &[super::Frontend]) -> Result<(), KeyError> {
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for fe in frontends {
        let Some(acme) = fe.acme() else {
            continue;
        };
        for name in &acme.names {
            if let Some((_, other)) = seen.iter().find(|(n, _)| *n == name) {
                return Err(key_err(
                    &format!("frontend {:?}: acme.names", fe.name),
                    format!("{name:?} is also ordered by frontend {other:?}"),
                ));
            }
            seen.push((name, &fe.name));
        }
    }
    Ok(())
}

/// A name a CA can validate with `challenge`: a DNS name; a wildcard only with DNS-01.
fn dns_name(name: &str, challenge: Challenge) -> Result<String, String> {
    let lower = name.trim_end_matches('.').to_ascii_lowercase();
    let bare = match lower.strip_prefix("*.") {
        Some(_) if challenge != Challenge::Dns01 => {
            return Err(format!(
                "{name:?}: a wildcard needs challenge = \"dns-01\" (the CA validates it by a TXT record)"
            ));
        }
        Some(rest) => rest,
        None => lower.as_str(),
    };
    let ok = rustls::pki_types::ServerName::try_from(bare)
        .is_ok_and(|n| matches!(n, rustls::pki_types::ServerName::DnsName(_)));
    if !ok || !bare.contains('.') && bare != "localhost" {
        return Err(format!("{name:?} is not a DNS name"));
    }
    Ok(lower)
}

/// A file name for a frontend: its name when that is safe as one, else its hex.
fn file_stem(frontend: &str) -> String {
    let safe = !frontend.is_empty()
        && !frontend.starts_with('.')
        && frontend
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if safe {
        frontend.to_string()
    } else {
        frontend.bytes().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_names_with_wildcards_only_for_dns_01() {
        let tls = Challenge::TlsAlpn01;
        assert_eq!(
            dns_name("Shop.Example.COM.", tls).unwrap(),
            "shop.example.com"
        );
        assert!(dns_name("*.example.com", tls)
            .unwrap_err()
            .contains("dns-01"));
        assert!(dns_name("*.example.com", Challenge::Http01).is_err());
        assert_eq!(
            dns_name("*.Example.com", Challenge::Dns01).unwrap(),
            "*.example.com"
        );
        assert!(dns_name("*.*.example.com", Challenge::Dns01).is_err());
        assert!(dns_name("127.0.0.1", tls).is_err());
        assert!(dns_name("no spaces.example", tls).is_err());
        assert!(dns_name("intranet", tls).is_err());
    }

    #[test]
    fn a_frontend_name_becomes_a_safe_file_name() {
        assert_eq!(file_stem("web-1"), "web-1");
        assert_eq!(file_stem("../x"), "2e2e2f78");
        assert_eq!(file_stem(".hidden"), "2e68696464656e");
    }
}
