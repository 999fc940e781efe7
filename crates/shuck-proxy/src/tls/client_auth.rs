//! Client certificates (mutual TLS): the verifier built from a CA bundle and CRLs, and what a
//! verified certificate tells the backend (subject CN).

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::config::{ClientAuth, Frontend};
use crate::error::{Error, Result};

/// A verifier and a digest of everything it trusts (mode, CA and CRL file contents): a reload
/// that changes the digest must not resume sessions made under the old trust (see server.rs).
pub struct Verifier {
    pub verifier: Arc<dyn ClientCertVerifier>,
    pub trust_digest: [u8; 32],
}

/// The verifier for `fe`, or `None` when client certificates are not asked for.
pub fn verifier(fe: &Frontend, provider: &Arc<CryptoProvider>) -> Result<Option<Verifier>> {
    let Some(ca) = fe.client_ca.as_deref() else {
        return Ok(None);
    };
    if fe.client_auth == ClientAuth::None {
        return Ok(None);
    }
    let mut digest = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    digest.update(fe.client_auth.to_string().as_bytes());
    let roots = load_roots(ca, &mut digest)?;
    let mut crls = Vec::new();
    for path in &fe.client_crls {
        crls.extend(load_crls(path, &mut digest)?);
    }
    // Revocation is checked for the client's own certificate against the CRLs given; a
    // certificate whose issuer has no CRL here is not refused for that (several CAs, or
    // intermediates without their own CRL, are common). An expired CRL fails closed, as
    // OpenSSL-based servers do: refresh it and reload.
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .with_crls(crls)
            .only_check_end_entity_revocation()
            .allow_unknown_revocation_status()
            .enforce_revocation_expiration();
    if fe.client_auth == ClientAuth::Optional {
        builder = builder.allow_unauthenticated();
    }
    let verifier = builder.build().map_err(|e| Error::Cert {
        path: ca.to_path_buf(),
        message: format!(
            "cannot build the client certificate verifier from client_ca and client_crl: {e}"
        ),
    })?;
    let mut trust_digest = [0u8; 32];
    trust_digest.copy_from_slice(digest.finish().as_ref());
    Ok(Some(Verifier {
        verifier,
        trust_digest,
    }))
}

/// The file's bytes, and a constructor for errors naming it.
fn read(path: &Path) -> Result<(Vec<u8>, impl Fn(String) -> Error + '_)> {
    let bytes = std::fs::read(path).map_err(|source| Error::CertRead {
        path: path.to_path_buf(),
        source,
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
        .map_err(|e| bad(format!("unreadable PEM in client_ca: {e}")))?;
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
        .map_err(|e| bad(format!("unreadable PEM CRL: {e}")))?;
    if crls.is_empty() {
        // DER files are common for CRLs (that is how CAs publish them).
        return Ok(vec![CertificateRevocationListDer::from(bytes)]);
    }
    Ok(crls)
}

/// The subject common name of a client certificate (first CN), for the PROXY SSL TLV.
pub fn subject_cn(der: &[u8]) -> Option<String> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let cn = cert.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}
