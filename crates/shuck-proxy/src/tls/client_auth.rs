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

/// The verifier for `fe`, or `None` when client certificates are not asked for.
pub fn verifier(
    fe: &Frontend,
    provider: &Arc<CryptoProvider>,
) -> Result<Option<Arc<dyn ClientCertVerifier>>> {
    let Some(ca) = fe.client_ca.as_deref() else {
        return Ok(None);
    };
    if fe.client_auth == ClientAuth::None {
        return Ok(None);
    }
    let roots = load_roots(ca)?;
    let mut crls = Vec::new();
    for path in &fe.client_crls {
        crls.extend(load_crls(path)?);
    }
    let mut builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .with_crls(crls);
    if fe.client_auth == ClientAuth::Optional {
        builder = builder.allow_unauthenticated();
    }
    let v = builder.build().map_err(|e| Error::Cert {
        path: ca.to_path_buf(),
        message: format!(
            "cannot build the client certificate verifier from client_ca and client_crl: {e}"
        ),
    })?;
    Ok(Some(v))
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

fn load_roots(path: &Path) -> Result<RootCertStore> {
    let (bytes, bad) = read(path)?;
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

fn load_crls(path: &Path) -> Result<Vec<CertificateRevocationListDer<'static>>> {
    let (bytes, bad) = read(path)?;
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
