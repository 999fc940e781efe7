//! Client certificates (mutual TLS): the verifier built from a CA bundle and CRLs, and what a
//! verified certificate tells the backend (subject CN).

use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::UnixTime;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};

use super::certs::pem_problem;
use crate::config::{ClientAuth, Frontend};
use crate::error::{Error, Result};

/// A verifier and a digest of everything it trusts (mode, CA and CRL file contents): a reload
/// that changes the digest must not resume sessions made under the old trust (see server.rs).
pub(crate) struct Verifier {
    pub checks: Arc<dyn ClientCertVerifier>,
    pub trust_digest: [u8; 32],
    /// With `optional_no_ca`: the check run after each handshake, whose result the backend gets.
    pub after_handshake: Option<Arc<Lenient>>,
}

/// The verifier for `fe`, or `None` when client certificates are not asked for.
pub(crate) fn verifier(fe: &Frontend, provider: &Arc<CryptoProvider>) -> Result<Option<Verifier>> {
    let mut digest = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    digest.update(fe.client_auth.mode.to_string().as_bytes());
    let strict = match (fe.client_auth.mode, fe.client_auth.ca.as_deref()) {
        (ClientAuth::None, _) => return Ok(None),
        (_, Some(ca)) => Some(strict_verifier(fe, ca, provider, &mut digest)?),
        (_, None) => None,
    };
    let mut trust_digest = [0u8; 32];
    trust_digest.copy_from_slice(digest.finish().as_ref());
    if fe.client_auth.mode == ClientAuth::OptionalNoCa {
        let lenient = Arc::new(Lenient {
            strict,
            algorithms: provider.signature_verification_algorithms,
        });
        return Ok(Some(Verifier {
            checks: lenient.clone(),
            trust_digest,
            after_handshake: Some(lenient),
        }));
    }
    // Validation makes sure optional and required come with a CA.
    Ok(strict.map(|checks| Verifier {
        checks,
        trust_digest,
        after_handshake: None,
    }))
}

/// rustls' WebPKI verifier over `ca` and the frontend's CRLs; their bytes go into `digest`.
fn strict_verifier(
    fe: &Frontend,
    ca: &Path,
    provider: &Arc<CryptoProvider>,
    digest: &mut aws_lc_rs::digest::Context,
) -> Result<Arc<dyn ClientCertVerifier>> {
    let roots = load_roots(ca, digest)?;
    let mut crls = Vec::new();
    for path in &fe.client_auth.crls {
        crls.extend(load_crls(path, digest)?);
    }
    // Revocation is checked along the whole chain, as nginx and HAProxy do: a CRL from the root
    // that revokes an intermediate CA refuses every certificate under it. A certificate whose
    // issuer has no CRL here is not refused for that (several CAs, or intermediates without
    // their own CRL, are common). An expired CRL fails closed, as OpenSSL-based servers do:
    // refresh it and reload.
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .with_crls(crls)
            .allow_unknown_revocation_status()
            .enforce_revocation_expiration();
    if fe.client_auth.mode != ClientAuth::Required {
        builder = builder.allow_unauthenticated();
    }
    builder.build().map_err(|e| Error::Cert {
        path: ca.to_path_buf(),
        message: format!(
            "cannot build the client certificate verifier from client_ca and client_crl: {e}"
        ),
    })
}

/// `optional_no_ca`: accepts any certificate chain during the handshake, and tells the backend
/// afterwards whether it verifies. The client must still prove it holds the certificate's key
/// (the handshake signature is checked as usual), so the backend can trust the certificate it
/// is shown to belong to the client, whatever its issuer.
///
/// The check runs after every handshake, resumed ones included: rustls keeps the certificate in
/// the session but not a verification result, and a check at resumption time also sees CRLs
/// reloaded since.
#[derive(Debug)]
pub(crate) struct Lenient {
    /// The chain and CRL check; `None` without `client_ca` (nothing can verify).
    strict: Option<Arc<dyn ClientCertVerifier>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl Lenient {
    /// The verification result of `chain` (end entity first) as OpenSSL numbers it, which is
    /// what backends reading the PROXY SSL TLV (HAProxy's `ssl_c_verify` style) expect.
    pub(crate) fn verify_code(&self, chain: &[CertificateDer<'_>]) -> u32 {
        let Some((end_entity, intermediates)) = chain.split_first() else {
            return X509_V_ERR_UNSPECIFIED;
        };
        let Some(strict) = &self.strict else {
            return X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY;
        };
        match strict.verify_client_cert(end_entity, intermediates, UnixTime::now()) {
            Ok(_) => 0,
            Err(e) => x509_code(&e),
        }
    }
}

impl ClientCertVerifier for Lenient {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.strict.as_ref().map_or(&[], |s| s.root_hint_subjects())
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        // Judged after the handshake (verify_code), and passed on rather than refused.
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

// OpenSSL's X509_V_ERR_* numbers (x509_vfy.h), the values HAProxy and nginx report.
const X509_V_ERR_UNSPECIFIED: u32 = 1;
const X509_V_ERR_UNABLE_TO_GET_CRL: u32 = 3;
const X509_V_ERR_CERT_SIGNATURE_FAILURE: u32 = 7;
const X509_V_ERR_CERT_NOT_YET_VALID: u32 = 9;
const X509_V_ERR_CERT_HAS_EXPIRED: u32 = 10;
const X509_V_ERR_CRL_HAS_EXPIRED: u32 = 12;
const X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY: u32 = 20;
const X509_V_ERR_CERT_REVOKED: u32 = 23;
const X509_V_ERR_INVALID_PURPOSE: u32 = 26;

/// The OpenSSL verification code closest to a rustls certificate error.
fn x509_code(e: &rustls::Error) -> u32 {
    use rustls::CertificateError as C;
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            C::UnknownIssuer => X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY,
            C::Expired | C::ExpiredContext { .. } => X509_V_ERR_CERT_HAS_EXPIRED,
            C::NotValidYet | C::NotValidYetContext { .. } => X509_V_ERR_CERT_NOT_YET_VALID,
            C::Revoked => X509_V_ERR_CERT_REVOKED,
            C::BadSignature => X509_V_ERR_CERT_SIGNATURE_FAILURE,
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => X509_V_ERR_INVALID_PURPOSE,
            C::UnknownRevocationStatus => X509_V_ERR_UNABLE_TO_GET_CRL,
            C::ExpiredRevocationList | C::ExpiredRevocationListContext { .. } => {
                X509_V_ERR_CRL_HAS_EXPIRED
            }
            _ => X509_V_ERR_UNSPECIFIED,
        },
        _ => X509_V_ERR_UNSPECIFIED,
    }
}

/// The file's bytes, and a constructor for errors naming it.
fn read(path: &Path) -> Result<(Vec<u8>, impl Fn(String) -> Error + '_)> {
    let bytes =
        crate::sys::files::read_capped(path, crate::sys::files::LARGE_CAP).map_err(|source| {
            Error::CertRead {
                path: path.to_path_buf(),
                source,
            }
        })?;
    let bad = move |message: String| Error::Cert {
        path: path.to_path_buf(),
        message,
    };
    Ok((bytes, bad))
}

fn load_roots(path: &Path, digest: &mut aws_lc_rs::digest::Context) -> Result<RootCertStore> {
    let (bytes, bad) = read(path)?;
    digest.update(&bytes);
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(format!("unreadable PEM in client_ca: {}", pem_problem(&e))))?;
    if certs.is_empty() {
        return Err(bad(
            "client_ca holds no certificate (expected '-----BEGIN CERTIFICATE-----' blocks)".into(),
        ));
    }
    let mut roots = RootCertStore::empty();
    for (i, c) in certs.into_iter().enumerate() {
        roots
            .add(c)
            .map_err(|e| bad(format!("client_ca certificate #{} unusable: {e}", i + 1)))?;
    }
    Ok(roots)
}

fn load_crls(
    path: &Path,
    digest: &mut aws_lc_rs::digest::Context,
) -> Result<Vec<CertificateRevocationListDer<'static>>> {
    let (bytes, bad) = read(path)?;
    digest.update(&bytes);
    let crls: Vec<_> = CertificateRevocationListDer::pem_slice_iter(&bytes)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| bad(format!("unreadable PEM CRL: {}", pem_problem(&e))))?;
    if crls.is_empty() {
        // DER files are common for CRLs (that is how CAs publish them).
        return Ok(vec![CertificateRevocationListDer::from(bytes)]);
    }
    Ok(crls)
}

/// The subject common name of a client certificate (first CN), for the PROXY SSL TLV.
pub(crate) fn subject_cn(der: &[u8]) -> Option<String> {
    crate::certs::x509::X509::parse(der)
        .ok()?
        .common_names()
        .into_iter()
        .next()
}
