//! Loading certificates (PEM: the chain then the key in one file, or the key in a file of its
//! own; directories as certbot and Kubernetes lay them out) and checking them the way an
//! operator needs before going live: key matches, chain in order, sane key size, expiry.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::SignatureAlgorithm;

use crate::certs::x509::{PublicKeyKind, X509};
use crate::config::{CertFiles, Pkcs11Settings};
use crate::error::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    Ecdsa { bits: usize },
    Ed25519,
    Rsa { bits: usize },
}

impl KeyKind {
    /// Lower is preferred when a name has several certificates and the client supports them:
    /// ECDSA signs far faster than RSA at equal strength.
    pub(crate) fn preference(self) -> u8 {
        match self {
            KeyKind::Ecdsa { .. } => 0,
            KeyKind::Ed25519 => 1,
            KeyKind::Rsa { .. } => 2,
        }
    }
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyKind::Ecdsa { bits } => write!(f, "ECDSA P-{bits}"),
            KeyKind::Ed25519 => f.write_str("Ed25519"),
            KeyKind::Rsa { bits } => write!(f, "RSA {bits}"),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct LoadedCert {
    pub path: PathBuf,
    /// Lower-case DNS names from the subjectAltName (or the CN when there is none); may hold
    /// wildcards like `*.example.com`.
    pub names: Vec<String>,
    pub subject: String,
    pub key: KeyKind,
    pub chain_len: usize,
    /// Seconds since the epoch.
    pub not_after: i64,
    pub certified: Arc<CertifiedKey>,
    /// What the PROXY SSL TLV says about this certificate when it is served.
    pub served: Arc<ServedCert>,
    /// The OCSP response stapled with it, once checked (see `tls::staple`).
    pub staple: Option<crate::certs::ocsp::Verified>,
    /// Its files (or their directories) that others than their owner may write, as warnings.
    pub writable_by_others: Vec<String>,
    /// Its key is in a PKCS#11 token: handshakes that may sign with it are made off the
    /// worker (`tls::handshake`).
    pub in_token: bool,
}

/// Algorithms of a certificate shuck serves, as text for backends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ServedCert {
    /// The certificate's signature algorithm ("ecdsa-with-SHA256", "sha256WithRSAEncryption").
    pub sig_alg: String,
    /// Key type and size, HAProxy's style ("EC256", "RSA2048", "ED25519").
    pub key_alg: String,
}

impl LoadedCert {
    /// Human warnings (expired / expiring within `within`) as of `now` (seconds since the epoch).
    pub(crate) fn warnings(&self, now: i64, within: std::time::Duration) -> Vec<String> {
        let days = (self.not_after - now).div_euclid(86_400);
        if self.not_after <= now {
            vec![format!(
                "certificate {} ({}) has EXPIRED: clients will refuse it",
                self.path.display(),
                self.subject
            )]
        } else if self.not_after - now < i64::try_from(within.as_secs()).unwrap_or(i64::MAX) {
            vec![format!(
                "certificate {} ({}) expires in {days} days",
                self.path.display(),
                self.subject
            )]
        } else {
            Vec::new()
        }
    }
}

/// Expands directories into the certificates they hold, sorted so the order is stable: a
/// Kubernetes TLS secret (`tls.crt` + `tls.key`), certbot's `live/` (each subdirectory's
/// `fullchain.pem` + `privkey.pem`), or else the `*.pem` bundles in it.
pub(crate) fn expand_paths(entries: &[CertFiles]) -> Result<Vec<CertFiles>> {
    let mut out = Vec::new();
    for e in entries {
        let meta = std::fs::metadata(&e.cert).map_err(|source| Error::CertRead {
            path: e.cert.clone(),
            source,
        })?;
        if meta.is_dir() && e.key.is_none() {
            out.extend(expand_dir(&e.cert)?);
        } else {
            out.push(e.clone());
        }
    }
    Ok(out)
}

/// The certificates of one directory (see [`expand_paths`]).
fn expand_dir(dir: &Path) -> Result<Vec<CertFiles>> {
    // Present (a file, or a link to one), even when unreadable: loading says what is wrong,
    // rather than the certificate silently going missing.
    let present = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir());
    let pair = |d: &Path, cert: &str, key: &str| {
        let (c, k) = (d.join(cert), d.join(key));
        (present(&c) && present(&k)).then_some(CertFiles {
            cert: c,
            key: Some(k),
        })
    };
    // A Kubernetes secret, or one certbot name's directory (`live/NAME/`) given itself.
    if let Some(one) =
        pair(dir, "tls.crt", "tls.key").or_else(|| pair(dir, "fullchain.pem", "privkey.pem"))
    {
        return Ok(vec![one]);
    }
    let rd = std::fs::read_dir(dir).map_err(|source| Error::CertRead {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    // certbot's live/: a directory per certificate (symlinks into archive/, followed).
    let live: Vec<CertFiles> = entries
        .iter()
        .filter(|p| p.is_dir())
        .filter_map(|d| pair(d, "fullchain.pem", "privkey.pem"))
        .collect();
    if !live.is_empty() {
        return Ok(live);
    }
    let bundles: Vec<CertFiles> = entries
        .into_iter()
        .filter(|f| f.is_file() && f.extension().is_some_and(|x| x == "pem"))
        .map(|cert| CertFiles { cert, key: None })
        .collect();
    if bundles.is_empty() {
        return Err(Error::Cert {
            path: dir.to_path_buf(),
            message: "directory holds no certificate: no *.pem bundle, no tls.crt + tls.key, no certbot NAME/fullchain.pem + privkey.pem".into(),
        });
    }
    Ok(bundles)
}

/// A PEM parse error in words: pki-types prints the marker or line it stumbled on as a list of
/// byte values, which tells an operator nothing.
pub(crate) fn pem_problem(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error as E;
    match e {
        E::MissingSectionEnd { end_marker } => format!(
            "truncated: no \"-----END {}-----\" line closes a section",
            String::from_utf8_lossy(end_marker)
        ),
        E::IllegalSectionStart { line } => {
            format!(
                "malformed section start \"{}\"",
                String::from_utf8_lossy(line)
            )
        }
        other => other.to_string(),
    }
}

/// Loads one certificate: the chain (leaf first, then its issuers) from `files.cert`, and the
/// private key from `files.key`, or else from the bundle itself, or else from `<bundle>.key`
/// beside it (HAProxy's rule).
pub(crate) fn load_certificate(files: &CertFiles, provider: &CryptoProvider) -> Result<LoadedCert> {
    load_certificate_in(files, provider, &Pkcs11Settings::default())
}

/// Like [`load_certificate`], a key in a PKCS#11 token reached with `pkcs11`.
pub(crate) fn load_certificate_in(
    files: &CertFiles,
    provider: &CryptoProvider,
    pkcs11: &Pkcs11Settings,
) -> Result<LoadedCert> {
    let path = files.cert.as_path();
    let bytes = read(path)?;
    let bad = |message: String| Error::Cert {
        path: path.to_path_buf(),
        message,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(format!("unreadable PEM certificate: {}", pem_problem(&e))))?;
    if chain.is_empty() {
        return Err(bad(
            "no certificate found (expected '-----BEGIN CERTIFICATE-----' blocks, leaf first)"
                .into(),
        ));
    }
    if let Some(uri) = files.token_key() {
        let key = token_key(path, uri, pkcs11)?;
        let mut loaded = from_parts(path, chain, key, provider)?;
        loaded.writable_by_others = crate::sys::files::writable_by_others(path);
        return Ok(loaded);
    }
    let beside = key_beside(path);
    let mut writable = crate::sys::files::writable_by_others(path);
    let mut key_file = |p: &Path| {
        writable.extend(crate::sys::files::writable_by_others(p));
        read_key(p)
    };
    let key = match &files.key {
        Some(key_path) => key_file(key_path)?,
        None => match PrivateKeyDer::from_pem_slice(&bytes) {
            Ok(key) => key,
            Err(_) if beside.is_file() => key_file(&beside)?,
            Err(e) => {
                return Err(bad(format!(
                    "no usable private key ({}); the bundle must hold the chain and its key, or the key must be in {} beside it, or give {{ cert = …, key = … }}",
                    pem_problem(&e),
                    beside.display()
                )))
            }
        },
    };
    let mut loaded = from_parts(path, chain, KeyFrom::Der(key), provider)?;
    writable.sort();
    writable.dedup();
    loaded.writable_by_others = writable;
    Ok(loaded)
}

/// Loads one PEM bundle (chain and key in one file, or the key in `<bundle>.key`).
pub(crate) fn load_bundle(path: &Path, provider: &CryptoProvider) -> Result<LoadedCert> {
    let files = CertFiles {
        cert: path.to_path_buf(),
        key: None,
    };
    load_certificate(&files, provider)
}

/// Where HAProxy looks for the key of a bundle that has none: `NAME.key` beside `NAME`.
pub(crate) fn key_beside(bundle: &Path) -> PathBuf {
    let mut name = bundle.as_os_str().to_owned();
    name.push(".key");
    PathBuf::from(name)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    crate::sys::files::read(path).map_err(|source| Error::CertRead {
        path: path.to_path_buf(),
        source,
    })
}

/// A private key file: the key, and a warning when group or others may read it.
fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let bytes = read(path)?;
    warn_if_readable_by_others(path);
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| Error::Cert {
        path: path.to_path_buf(),
        message: format!("no usable private key: {}", pem_problem(&e)),
    })
}

/// One warning per load for a key file others can read, or whose group can read it when that
/// group is not the one shuck runs as (0640 with shuck's group is how a key is shared with it):
/// whoever else reads it can impersonate the site.
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let mode = meta.permissions().mode();
    let others = mode & 0o004 != 0;
    let foreign_group = mode & 0o040 != 0 && Some(meta.gid()) != effective_gid();
    if others || foreign_group {
        tracing::warn!(file = %path.display(), mode = %format!("{:o}", mode & 0o777), "private key file is readable by others or by a group shuck does not run as; chmod 600, or 640 with shuck's group");
    }
}

/// The process's effective group, from /proc (no syscall wrapper needed).
fn effective_gid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Gid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Builds a checked `LoadedCert` from DER parts (shared by files and the self-signed generator).
/// Where a certificate's private key is: in memory, or in a token (its signer pool's key, and
/// its URI without the PIN).
pub(crate) enum KeyFrom {
    Der(PrivateKeyDer<'static>),
    Token(Arc<dyn rustls::sign::SigningKey>, String),
}

/// The key `uri` names in its token, with signer threads started for it.
fn token_key(cert: &Path, uri: &str, pkcs11: &Pkcs11Settings) -> Result<KeyFrom> {
    let bad = |message: String| Error::Cert {
        path: cert.to_path_buf(),
        message,
    };
    let parsed = crate::proto::pkcs11_uri::Pkcs11Uri::parse(uri)
        .map_err(|e| bad(format!("key: the PKCS#11 URI {e}")))?;
    let key = super::pkcs11::TokenKey::open(&parsed, pkcs11.module.as_deref())
        .map_err(|e| bad(e.to_string()))?;
    let signers = pkcs11.signers.max(1);
    let pool = super::pkcs11::SignerPool::start(Arc::new(key), signers, 64 * signers)
        .map_err(|e| bad(e.to_string()))?;
    Ok(KeyFrom::Token(pool.signing_key(), parsed.redacted()))
}

pub(crate) fn from_parts(
    path: &Path,
    chain: Vec<CertificateDer<'static>>,
    key: KeyFrom,
    provider: &CryptoProvider,
) -> Result<LoadedCert> {
    let bad = |message: String| Error::Cert {
        path: path.to_path_buf(),
        message,
    };
    let parsed: Vec<X509> = chain
        .iter()
        .enumerate()
        .map(|(i, der)| {
            X509::parse(der)
                .map_err(|e| bad(format!("certificate #{} is not valid X.509: {e}", i + 1)))
        })
        .collect::<Result<_>>()?;
    // Chain order: each certificate must be issued by the next one. Clients that get the chain
    // out of order fail with confusing errors, so this is checked here rather than left to them.
    for i in 0..parsed.len().saturating_sub(1) {
        if parsed[i].issuer_der() != parsed[i + 1].subject_der() {
            return Err(bad(format!(
                "chain out of order: certificate #{} ({}) is issued by {}, but certificate #{} is {}; \
                 put the leaf first, then each issuer in turn",
                i + 1,
                parsed[i].subject(),
                parsed[i].issuer(),
                i + 2,
                parsed[i + 1].subject()
            )));
        }
    }
    let leaf = &parsed[0];
    let (key_bits, is_rsa) = match leaf.public_key() {
        PublicKeyKind::Rsa { bits } => (bits, true),
        PublicKeyKind::Ec { bits } => (bits, false),
        PublicKeyKind::Other => (0, false),
    };
    // Checked from the certificate, before the key is loaded: the crypto library refuses weak
    // RSA keys with a message that does not say why.
    if is_rsa && !(2048..=8192).contains(&key_bits) {
        return Err(bad(format!(
            "RSA key of {key_bits} bits: use 2048 to 8192 bits"
        )));
    }
    let mut names = leaf.dns_names();
    if names.is_empty() {
        // Pre-SAN certificates: fall back to the common name, as clients once did.
        names = leaf
            .common_names()
            .iter()
            .map(|n| n.to_ascii_lowercase())
            .collect();
    }
    let sig_alg = leaf.signature_algorithm();
    let subject = leaf.subject();
    let (_, not_after) = leaf.validity();
    drop(parsed);

    let (signing_key, token) = match key {
        KeyFrom::Der(key) => (
            provider
                .key_provider
                .load_private_key(key)
                .map_err(|e| bad(format!("private key cannot be used: {e}")))?,
            None,
        ),
        KeyFrom::Token(key, uri) => (key, Some(uri)),
    };
    let key_kind = match signing_key.algorithm() {
        SignatureAlgorithm::RSA => KeyKind::Rsa { bits: key_bits },
        SignatureAlgorithm::ECDSA => KeyKind::Ecdsa { bits: key_bits },
        SignatureAlgorithm::ED25519 => KeyKind::Ed25519,
        other => return Err(bad(format!("unsupported key type {other:?}"))),
    };
    let chain_len = chain.len();
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {}
        Err(_) => {
            return Err(bad(match &token {
                Some(uri) => format!(
                    "the key in the token ({uri}) does not match the certificate (first certificate in the file)"
                ),
                None => "private key does not match the certificate (first certificate in the file)"
                    .into(),
            }))
        }
    }
    let key_alg = match key_kind {
        KeyKind::Ecdsa { bits } => format!("EC{bits}"),
        KeyKind::Ed25519 => "ED25519".to_string(),
        KeyKind::Rsa { bits } => format!("RSA{bits}"),
    };
    Ok(LoadedCert {
        path: path.to_path_buf(),
        names,
        subject,
        key: key_kind,
        chain_len,
        not_after,
        certified: Arc::new(certified),
        served: Arc::new(ServedCert { sig_alg, key_alg }),
        staple: None,
        writable_by_others: Vec::new(),
        in_token: token.is_some(),
    })
}

/// An in-memory certificate for localhost, 127.0.0.1 and ::1 (ECDSA P-256), for trying shuck
/// out and for tests. Never a production certificate: clients will not trust it.
/// One per process, kept across reloads (a client that pinned it, or a test that trusts it,
/// sees the same certificate after a SIGHUP), made again only once it is 60 of its 90 days old.
pub(crate) fn self_signed(provider: &CryptoProvider) -> Result<LoadedCert> {
    const RENEW_AFTER: std::time::Duration = std::time::Duration::from_secs(60 * 86_400);
    type Made = (
        std::time::Instant,
        CertificateDer<'static>,
        PrivateKeyDer<'static>,
    );
    static MADE: std::sync::Mutex<Option<Made>> = std::sync::Mutex::new(None);
    let mut made = MADE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let kept = made
        .as_ref()
        .filter(|(at, ..)| at.elapsed() < RENEW_AFTER)
        .map(|(_, cert, key)| (cert.clone(), key.clone_key()));
    let (cert, key) = if let Some(kept) = kept {
        kept
    } else {
        let names = vec!["localhost".to_string(), "127.0.0.1".into(), "::1".into()];
        let (cert, key) = generate(names, "shuck self-signed (localhost)")?;
        *made = Some((std::time::Instant::now(), cert.clone(), key.clone_key()));
        (cert, key)
    };
    from_parts(
        Path::new("<self-signed>"),
        vec![cert],
        KeyFrom::Der(key),
        provider,
    )
}

/// What an ACME frontend serves until its first certificate is issued: self-signed for its
/// names, and named so that anyone who looks at it sees why.
pub(crate) fn acme_temporary(names: &[String], provider: &CryptoProvider) -> Result<LoadedCert> {
    generated(
        names.to_vec(),
        "shuck temporary certificate (ACME certificate not yet issued)",
        "<acme temporary>",
        provider,
    )
}

fn generated(
    names: Vec<String>,
    common_name: &str,
    shown_as: &str,
    provider: &CryptoProvider,
) -> Result<LoadedCert> {
    let (cert, key) = generate(names, common_name)?;
    from_parts(Path::new(shown_as), vec![cert], KeyFrom::Der(key), provider)
}

/// A new self-signed certificate and key (ECDSA P-256, 90 days) for `names`.
fn generate(
    names: Vec<String>,
    common_name: &str,
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>)> {
    let mut params =
        rcgen::CertificateParams::new(names).map_err(|e| Error::SelfSigned(e.to_string()))?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, common_name);
    // Generated at start (self_signed: again after 60 days), so a short validity costs nothing.
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::days(1);
    params.not_after = now + time::Duration::days(90);
    let key_pair = rcgen::KeyPair::generate().map_err(|e| Error::SelfSigned(e.to_string()))?;
    let cert = params
        .self_signed(&key_pair)
        .map_err(|e| Error::SelfSigned(e.to_string()))?;
    let key = PrivateKeyDer::try_from(key_pair.serialize_der())
        .map_err(|e| Error::SelfSigned(e.to_string()))?;
    Ok((cert.der().clone(), key))
}

#[cfg(test)]
mod tests {
    use super::*;

    const THIRTY_DAYS: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);
    use rcgen::{CertificateParams, KeyPair};

    fn provider() -> CryptoProvider {
        rustls::crypto::aws_lc_rs::default_provider()
    }

    #[test]
    fn the_self_signed_certificate_is_made_once_per_process() {
        let a = self_signed(&provider()).unwrap();
        let b = self_signed(&provider()).unwrap();
        assert_eq!(a.certified.cert, b.certified.cert);
        let other = acme_temporary(&["a.test".into()], &provider()).unwrap();
        assert_ne!(a.certified.cert, other.certified.cert);
    }

    fn write(dir: &Path, name: &str, parts: &[String]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, parts.concat()).unwrap();
        p
    }

    #[test]
    fn self_signed_covers_localhost() {
        let c = self_signed(&provider()).unwrap();
        assert_eq!(c.names, vec!["localhost"]);
        assert_eq!(c.key, KeyKind::Ecdsa { bits: 256 });
        assert!(c
            .warnings(crate::sys::clock::unix_now(), THIRTY_DAYS)
            .is_empty());
    }

    #[test]
    fn mismatched_key_and_bad_order_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(vec![]).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test CA");
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["a.test".into()])
            .unwrap()
            .signed_by(&leaf_key, &rcgen::Issuer::from_params(&ca_params, &ca_key))
            .unwrap();
        let p = provider();

        let good = write(
            dir.path(),
            "good.pem",
            &[leaf.pem(), ca.pem(), leaf_key.serialize_pem()],
        );
        let c = load_bundle(&good, &p).unwrap();
        assert_eq!(c.chain_len, 2);
        assert_eq!(c.names, vec!["a.test"]);

        // Cut in the middle of the CA certificate, as an interrupted copy leaves it.
        let whole = [leaf.pem(), ca.pem()].concat();
        let cut = write(
            dir.path(),
            "cut.pem",
            &[whole[..whole.len() - 40].to_string()],
        );
        let e = load_bundle(&cut, &p).unwrap_err().to_string();
        assert!(
            e.contains("cut.pem") && e.contains("no \"-----END CERTIFICATE-----\" line"),
            "the marker in words, not bytes: {e}"
        );

        let other_key = KeyPair::generate().unwrap();
        let mism = write(
            dir.path(),
            "mism.pem",
            &[leaf.pem(), other_key.serialize_pem()],
        );
        let e = load_bundle(&mism, &p).unwrap_err().to_string();
        assert!(
            e.contains("mism.pem") && e.contains("does not match"),
            "{e}"
        );

        let order = write(
            dir.path(),
            "order.pem",
            &[ca.pem(), leaf.pem(), leaf_key.serialize_pem()],
        );
        let e = load_bundle(&order, &p).unwrap_err().to_string();
        assert!(e.contains("order.pem") && e.contains("out of order"), "{e}");

        let nokey = write(dir.path(), "nokey.pem", &[leaf.pem()]);
        let e = load_bundle(&nokey, &p).unwrap_err().to_string();
        assert!(e.contains("nokey.pem") && e.contains("private key"), "{e}");

        let garbage = write(dir.path(), "garbage.pem", &["hello\n".to_string()]);
        let e = load_bundle(&garbage, &p).unwrap_err().to_string();
        assert!(e.contains("no certificate"), "{e}");
    }

    #[test]
    fn expiry_warnings() {
        let mut c = self_signed(&provider()).unwrap();
        let now = crate::sys::clock::unix_now();
        c.not_after = now + 5 * 86_400;
        assert!(c.warnings(now, THIRTY_DAYS)[0].contains("expires in"));
        c.not_after = now - 1;
        assert!(c.warnings(now, THIRTY_DAYS)[0].contains("EXPIRED"));
    }
}
