//! The store's transport: a stream made by shuck (TCP, TLS verified against the system's CAs,
//! or a Unix socket), every byte of it through the reply bound ([`Bounded`]), handed to the
//! redis crate's multiplexed connection.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, ConnectionInfo};
use tokio::io::{AsyncRead, AsyncWrite};

use super::replies::Bounded;

pub(super) type Driver = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Connects to the store and hands the stream, through the reply bound, to the redis crate
/// (which sends AUTH and SELECT as the URL asks). Over TLS the certificate must hold
/// `tls_name`, or else the host `info` names.
pub(super) async fn open(
    info: &ConnectionInfo,
    tls_name: Option<&str>,
    refused: Arc<AtomicBool>,
) -> Result<(MultiplexedConnection, Driver), String> {
    let bounded = bounded(info, tls_name, refused).await?;
    // No response timeout of the crate's: each lookup and write has its own deadline.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let (conn, driver) =
        MultiplexedConnection::new_with_config(info.redis_settings(), bounded, config)
            .await
            .map_err(|e| e.to_string())?;
    Ok((conn, Box::pin(driver)))
}

/// A subscriber's connection (RESP2 pub/sub needs one of its own), bounded the same.
pub(super) async fn subscriber(
    info: &ConnectionInfo,
    tls_name: Option<&str>,
) -> Result<redis::aio::PubSub, String> {
    let bounded = bounded(info, tls_name, Arc::default()).await?;
    redis::aio::PubSub::new(info.redis_settings(), bounded)
        .await
        .map_err(|e| e.to_string())
}

/// The stream to the server `info` names, through the reply bound.
async fn bounded(
    info: &ConnectionInfo,
    tls_name: Option<&str>,
    refused: Arc<AtomicBool>,
) -> Result<Bounded<Box<dyn Stream>>, String> {
    let stream: Box<dyn Stream> = match info.addr() {
        ConnectionAddr::Tcp(host, port) => Box::new(tcp(host, *port).await?),
        ConnectionAddr::TcpTls { host, port, .. } => {
            let tcp = tcp(host, *port).await?;
            Box::new(tls(tls_name.unwrap_or(host), tcp).await?)
        }
        ConnectionAddr::Unix(path) => Box::new(
            tokio::net::UnixStream::connect(path)
                .await
                .map_err(|e| e.to_string())?,
        ),
        other => return Err(format!("{other}: not a kind of address shuck connects to")),
    };
    Ok(Bounded::new(stream, refused))
}

pub(super) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

async fn tcp(host: &str, port: u16) -> Result<tokio::net::TcpStream, String> {
    let s = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| e.to_string())?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// TLS to the store, verified against the system's CAs (as the redis crate does).
async fn tls(
    host: &str,
    tcp: tokio::net::TcpStream,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    let config = tls_config()?;
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .map_err(|e| format!("{host}: {e}"))?;
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())
}

/// The system's CAs, read once per process (the first `rediss://` connection).
fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    if let Some(c) = CONFIG.get() {
        return Ok(c.clone());
    }
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err("no CA certificates found on this system to verify the store with".into());
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(CONFIG.get_or_init(|| Arc::new(config)).clone())
}
