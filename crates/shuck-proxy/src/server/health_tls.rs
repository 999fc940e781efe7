//! Health checks in TLS (`backend_tls` beside `health_check`): the client configuration a
//! checker makes its handshakes with, loaded off the runtime's threads and loaded again when
//! one of its files changes on disk (a rotated CA or client certificate), so the checks never
//! judge the backends with files the connections no longer use.
//!
//! Unlike connections, checks do not resume: each is a full handshake, so a backend whose
//! certificate stops verifying fails its next check. With `http`, the checks offer only
//! `http/1.1` (their request is HTTP/1.1, whatever the connections' `alpn` says); with
//! `server_name = "client"` a check, which has no client, asks for `health_check.host` or
//! else the backend's own name.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::client::Resumption;
use rustls::pki_types::ServerName;

use crate::config::backend_tls::{BackendTls, ServerName as TlsName};
use crate::config::HealthCheck;

/// What a check needs for its handshake.
#[derive(Clone)]
pub(super) struct TlsCheck {
    pub(super) config: Arc<rustls::ClientConfig>,
    settings: BackendTls,
    host: Option<String>,
}

impl TlsCheck {
    /// The name to ask backend `backend` for.
    pub(super) fn server_name(&self, backend: &str) -> Option<ServerName<'static>> {
        match (&self.settings.server_name, &self.host) {
            (TlsName::Client, Some(host)) => ServerName::try_from(host.clone()).ok(),
            _ => crate::tls::backend_tls::server_name(&self.settings, None, backend),
        }
    }
}

/// The files a configuration was read from, with their modification time and size.
type Fingerprint = Vec<(PathBuf, Option<(SystemTime, u64)>)>;

/// A checked set's TLS: the settings, and the configuration loaded from them with the files'
/// fingerprint at the time.
pub(super) struct TlsSource {
    frontend: String,
    settings: BackendTls,
    check: HealthCheck,
    loaded: Option<(Fingerprint, Result<TlsCheck, String>)>,
}

impl TlsSource {
    pub(super) fn new(frontend: &str, settings: &BackendTls, check: &HealthCheck) -> TlsSource {
        TlsSource {
            frontend: frontend.to_string(),
            settings: settings.clone(),
            check: check.clone(),
            loaded: None,
        }
    }

    /// The configuration for this round of checks: loaded again when a file changed since
    /// (one line when loading starts or stops failing, with the error). `Err`: the files
    /// cannot be loaded, which says nothing of the backends.
    pub(super) async fn current(&mut self, route: &str) -> Result<TlsCheck, String> {
        let now = self.fingerprint();
        if let Some((was, loaded)) = &self.loaded {
            if *was == now {
                return loaded.clone();
            }
        }
        let (frontend, settings, check) = (
            self.frontend.clone(),
            self.settings.clone(),
            self.check.clone(),
        );
        let loaded = tokio::task::spawn_blocking(move || load(&frontend, &settings, &check))
            .await
            .unwrap_or_else(|e| Err(format!("loading backend_tls: {e}")));
        let failed_before = matches!(self.loaded, Some((_, Err(_))));
        match &loaded {
            Err(e) if !failed_before => {
                tracing::error!(frontend = %self.frontend, route = %route, error = %e, "health checks cannot run: backend_tls cannot be loaded; the backends keep their verdicts");
            }
            Ok(_) if failed_before => {
                tracing::info!(frontend = %self.frontend, route = %route, "health checks run again: backend_tls loaded");
            }
            _ => {}
        }
        self.loaded = Some((now, loaded.clone()));
        loaded
    }

    fn fingerprint(&self) -> Fingerprint {
        let cert = self.settings.client_certificate.as_ref();
        let files = self
            .settings
            .ca
            .iter()
            .chain(cert.map(|c| &c.cert))
            .chain(cert.and_then(|c| c.key.as_ref()));
        files
            .map(|p| {
                let seen = std::fs::metadata(p)
                    .ok()
                    .and_then(|m| Some((m.modified().ok()?, m.len())));
                (p.clone(), seen)
            })
            .collect()
    }
}

fn load(frontend: &str, settings: &BackendTls, check: &HealthCheck) -> Result<TlsCheck, String> {
    let template = crate::tls::backend_tls::client_config(frontend, settings)
        .map_err(|e| format!("backend_tls: {e}"))?;
    let mut config = (*template).clone();
    config.resumption = Resumption::disabled();
    if check.http.is_some() && !config.alpn_protocols.is_empty() {
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
    }
    Ok(TlsCheck {
        config: Arc::new(config),
        settings: settings.clone(),
        host: check.host.clone(),
    })
}
