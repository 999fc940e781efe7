//! TLS to the backends (`backend_tls`): the rustls client configuration each frontend or
//! route loads with its certificates (files read, errors named, at start and reload, never by
//! a worker), and the per-worker copy each worker resumes its backend sessions with (its own
//! in-memory cache: no lock shared by the workers).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientConfig, ResolvesClientCert, Resumption};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, SignatureScheme};

use crate::config::backend_tls::{BackendTls, ServerName as TlsName, Verify};
use crate::error::{Error, Result};
use crate::tls::certs;

/// `settings` as a rustls client configuration, for the frontend `frontend`.
pub(crate) fn client_config(frontend: &str, settings: &BackendTls) -> Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&settings.versions)
        .map_err(|source| Error::Tls {
            frontend: frontend.to_string(),
            source,
        })?;
    let builder = match settings.verify {
        Verify::Full => builder.with_root_certificates(roots(settings.ca.as_deref())?),
        Verify::None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServerCertificate::new(
                provider.clone(),
            ))),
    };
    let mut config = match &settings.client_certificate {
        None => builder.with_no_client_auth(),
        Some(files) => {
            let loaded = certs::load_certificate(files, &provider)?;
            builder.with_client_cert_resolver(Arc::new(OneCertificate(loaded.certified)))
        }
    };
    config.alpn_protocols = settings
        .alpn
        .iter()
        .map(|p| p.as_bytes().to_vec())
        .collect();
    Ok(Arc::new(config))
}

/// `template` with a session cache of the worker's own.
pub(crate) fn for_worker(template: &ClientConfig) -> Arc<ClientConfig> {
    let mut c = template.clone();
    c.resumption = Resumption::store(Arc::new(super::backend_sessions::BackendSessions::default()));
    Arc::new(c)
}

/// The name the backend is asked for: `server_name`, the client's (`client`), else the backend's
/// own host (its address when it is one).
pub(crate) fn server_name(
    settings: &BackendTls,
    client_sni: Option<&str>,
    backend: &str,
) -> Option<ServerName<'static>> {
    let own = || {
        // `host:port`, `host:port@address` (a name's address), `[v6]:port`, `unix:/path`.
        let written = backend.split('@').next().unwrap_or(backend);
        let host = match written.parse::<SocketAddr>() {
            Ok(a) => return Some(ServerName::IpAddress(a.ip().into())),
            Err(_) if written.starts_with("unix:") => "localhost",
            Err(_) => written.rsplit_once(':').map_or(written, |(h, _)| h),
        };
        ServerName::try_from(host.to_string()).ok()
    };
    match &settings.server_name {
        TlsName::Fixed(n) => ServerName::try_from(n.clone()).ok(),
        TlsName::Client => client_sni
            .and_then(|n| ServerName::try_from(n.to_string()).ok())
            .or_else(own),
        TlsName::Backend => own(),
    }
}

/// The CAs of `ca`, else the system's.
fn roots(ca: Option<&Path>) -> Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    let Some(path) = ca else {
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        if roots.is_empty() {
            return Err(Error::Cert {
                path: "<the system's CA store>".into(),
                message: "no CA certificate found to verify the backends with: set backend_tls.ca"
                    .into(),
            });
        }
        return Ok(roots);
    };
    let bytes =
        crate::sys::files::read_capped(path, crate::sys::files::LARGE_CAP).map_err(|source| {
            Error::CertRead {
                path: path.to_path_buf(),
                source,
            }
        })?;
    let bad = |message: String| Error::Cert {
        path: path.to_path_buf(),
        message,
    };
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|e| {
            bad(format!(
                "unreadable PEM certificate: {}",
                certs::pem_problem(&e)
            ))
        })?;
        roots
            .add(cert)
            .map_err(|e| bad(format!("not a CA certificate rustls can use: {e}")))?;
    }
    if roots.is_empty() {
        return Err(bad("no certificate in the backend CA bundle".into()));
    }
    Ok(roots)
}

/// The client certificate, whatever the backend asks.
#[derive(Debug)]
struct OneCertificate(Arc<CertifiedKey>);

impl ResolvesClientCert for OneCertificate {
    fn resolve(&self, _: &[&[u8]], _: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// Any server certificate is taken, its signatures on the handshake still checked (so the
/// connection is at least encrypted to the holder of that key, and a client does the same
/// public-key work a verifying one would, minus the chain): `backend_tls.verify = "none"`, and
/// `shuck bench --insecure`.
#[derive(Debug)]
pub struct AnyServerCertificate(Arc<rustls::crypto::CryptoProvider>);

impl AnyServerCertificate {
    pub fn new(provider: Arc<rustls::crypto::CryptoProvider>) -> AnyServerCertificate {
        AnyServerCertificate(provider)
    }
}

impl ServerCertVerifier for AnyServerCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
