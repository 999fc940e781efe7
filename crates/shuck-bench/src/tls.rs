//! The client's TLS settings: versions, suites, groups, trust, and one fresh session store per
//! virtual-client session so that resumption happens exactly where the method says.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::{Resumption, Tls12Resumption};
use rustls::crypto;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use crate::BenchError;

/// How connections after the first of a session resume it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ResumeMode {
    /// No resumption: every connection is a full handshake.
    None,
    /// TLS 1.2 session ID (server-side cache).
    SessionId,
    /// TLS 1.2 session ticket (RFC 5077).
    Ticket,
    /// TLS 1.3 pre-shared key from a NewSessionTicket.
    Psk,
}

impl ResumeMode {
    pub fn name(self) -> &'static str {
        match self {
            ResumeMode::None => "none",
            ResumeMode::SessionId => "session-id",
            ResumeMode::Ticket => "ticket",
            ResumeMode::Psk => "psk",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsVersion {
    #[value(name = "1.2")]
    V12,
    #[value(name = "1.3")]
    V13,
}

#[derive(Debug, Clone)]
pub struct TlsOptions {
    pub version: Option<TlsVersion>,
    pub resume: ResumeMode,
    /// rustls suite names, e.g. TLS13_AES_128_GCM_SHA256 (case-insensitive); empty = defaults.
    pub ciphers: Vec<String>,
    /// Key-exchange group names: X25519, secp256r1, secp384r1, X25519MLKEM768; empty = defaults.
    pub groups: Vec<String>,
    pub alpn: Vec<String>,
    pub ca: Option<PathBuf>,
    pub insecure: bool,
    pub sni: bool,
}

/// The base configuration every session's configuration is cloned from.
#[derive(Clone)]
pub struct ClientTls {
    base: ClientConfig,
    resume: ResumeMode,
}

impl ClientTls {
    pub fn new(o: &TlsOptions) -> Result<ClientTls, BenchError> {
        let mut provider = crypto::aws_lc_rs::default_provider();
        if !o.ciphers.is_empty() {
            let all = provider.cipher_suites.clone();
            provider.cipher_suites =
                pick(&all, &o.ciphers, "--cipher", |s| format!("{:?}", s.suite()))?;
        }
        if !o.groups.is_empty() {
            let all = provider.kx_groups.clone();
            let wanted: Vec<String> = o.groups.iter().map(|g| group_alias(g)).collect();
            provider.kx_groups = pick(&all, &wanted, "--group", |g| format!("{:?}", g.name()))?;
        }
        let versions: &[&rustls::SupportedProtocolVersion] = match (o.resume, o.version) {
            (ResumeMode::SessionId | ResumeMode::Ticket, Some(TlsVersion::V13)) => {
                return Err(BenchError::Option {
                    flag: "--resume",
                    reason: "session-id and ticket resumption exist in TLS 1.2 only: drop --tls 1.3 or use --resume psk".into(),
                })
            }
            (ResumeMode::Psk, Some(TlsVersion::V12)) => {
                return Err(BenchError::Option {
                    flag: "--resume",
                    reason: "psk resumption is TLS 1.3: use --resume session-id or ticket with --tls 1.2".into(),
                })
            }
            (ResumeMode::SessionId | ResumeMode::Ticket, _) | (_, Some(TlsVersion::V12)) => {
                &[&rustls::version::TLS12]
            }
            (ResumeMode::Psk, _) | (_, Some(TlsVersion::V13)) => &[&rustls::version::TLS13],
            (ResumeMode::None, None) => rustls::DEFAULT_VERSIONS,
        };
        let provider = Arc::new(provider);
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(versions)
            .map_err(|e| BenchError::Option {
                flag: "--cipher/--group/--tls",
                reason: format!("no usable combination: {e}"),
            })?;
        let mut base = if o.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(shuck_proxy::AnyServerCertificate::new(
                    provider,
                )))
                .with_no_client_auth()
        } else {
            builder
                .with_root_certificates(roots(o.ca.as_ref())?)
                .with_no_client_auth()
        };
        base.alpn_protocols = o.alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
        base.enable_sni = o.sni;
        Ok(ClientTls {
            base,
            resume: o.resume,
        })
    }

    /// A configuration with its own empty session store: the first connection made with it is
    /// a full handshake, the following ones resume.
    /// Whether connections after a session's first offer to resume it.
    pub fn resumes(&self) -> bool {
        self.resume != ResumeMode::None
    }

    pub fn new_session(&self) -> Arc<ClientConfig> {
        let mut c = self.base.clone();
        c.resumption = match self.resume {
            ResumeMode::None => Resumption::disabled(),
            ResumeMode::SessionId => {
                Resumption::in_memory_sessions(2).tls12_resumption(Tls12Resumption::SessionIdOnly)
            }
            ResumeMode::Ticket => Resumption::in_memory_sessions(2)
                .tls12_resumption(Tls12Resumption::SessionIdOrTickets),
            ResumeMode::Psk => Resumption::in_memory_sessions(2),
        };
        Arc::new(c)
    }
}

fn group_alias(g: &str) -> String {
    match g.to_ascii_lowercase().as_str() {
        "p256" | "p-256" | "prime256v1" => "secp256r1".into(),
        "p384" | "p-384" => "secp384r1".into(),
        _ => g.into(),
    }
}

fn pick<T: Copy>(
    all: &[T],
    wanted: &[String],
    flag: &'static str,
    name: impl Fn(&T) -> String,
) -> Result<Vec<T>, BenchError> {
    wanted
        .iter()
        .map(|w| {
            all.iter()
                .find(|x| name(x).eq_ignore_ascii_case(w))
                .copied()
                .ok_or_else(|| BenchError::Option {
                    flag,
                    reason: format!(
                        "unknown {w:?}; known: {}",
                        all.iter().map(&name).collect::<Vec<_>>().join(", ")
                    ),
                })
        })
        .collect()
}

fn roots(ca: Option<&PathBuf>) -> Result<RootCertStore, BenchError> {
    let Some(path) = ca else {
        return Err(BenchError::Option {
            flag: "--ca",
            reason: "give the CA that signed the server's certificate (--ca FILE), or --insecure to skip verification".into(),
        });
    };
    let pem = std::fs::read(path).map_err(|source| BenchError::Read {
        path: path.clone(),
        source,
    })?;
    let mut store = RootCertStore::empty();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let c: CertificateDer<'static> = c.map_err(|e| BenchError::BadFile {
            path: path.clone(),
            reason: format!("not PEM: {e}"),
        })?;
        store.add(c).map_err(|e| BenchError::BadFile {
            path: path.clone(),
            reason: format!("unusable certificate: {e}"),
        })?;
    }
    if store.is_empty() {
        return Err(BenchError::BadFile {
            path: path.clone(),
            reason: "holds no certificate".into(),
        });
    }
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> TlsOptions {
        TlsOptions {
            version: None,
            resume: ResumeMode::Psk,
            ciphers: vec![],
            groups: vec![],
            alpn: vec![],
            ca: None,
            insecure: true,
            sni: true,
        }
    }

    #[test]
    fn resume_mode_and_version_must_agree() {
        let mut o = opts();
        o.resume = ResumeMode::Ticket;
        o.version = Some(TlsVersion::V13);
        assert!(ClientTls::new(&o).is_err());
        o.resume = ResumeMode::Psk;
        o.version = Some(TlsVersion::V12);
        assert!(ClientTls::new(&o).is_err());
        o.version = None;
        assert!(ClientTls::new(&o).is_ok());
    }

    #[test]
    fn unknown_names_are_refused_with_the_known_ones() {
        let mut o = opts();
        o.groups = vec!["curve9".into()];
        let e = ClientTls::new(&o).err().unwrap().to_string();
        assert!(e.contains("X25519"), "{e}");
        o.groups = vec!["p256".into(), "x25519mlkem768".into()];
        o.ciphers = vec!["tls13_aes_256_gcm_sha384".into()];
        assert!(ClientTls::new(&o).is_ok());
    }

    #[test]
    fn verification_needs_a_ca_or_insecure() {
        let mut o = opts();
        o.insecure = false;
        let e = ClientTls::new(&o).err().unwrap().to_string();
        assert!(e.contains("--insecure"), "{e}");
    }
}
