//! One client connection: TLS handshake (with timeout), then the backend (TCP relay or the demo
//! page), and at most one log line, at the end, when something failed or connection logs are on.

use std::future::Future;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use rustls::{HandshakeKind, ServerConnection};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use crate::backend::BackendPool;
use crate::config::Frontend;
use crate::metrics::{FrontendMetrics, HandshakeFailure};
use crate::relay::{self, RelayError};
use crate::tls::{params, sni, TlsSlot};
use crate::{demo, log_limit, proxy_in, proxy_out};

/// What one worker knows about one frontend.
pub struct FrontendRt {
    pub cfg: Arc<Frontend>,
    /// This worker's TLS configuration; replaced whole on reload.
    pub tls: TlsSlot,
    /// `None` means the built-in demo backend.
    pub backends: Option<BackendPool>,
    pub metrics: FrontendMetrics,
}

#[derive(Debug, Clone, Copy)]
pub struct WorkerInfo {
    pub id: usize,
    pub log_connections: bool,
}

/// What was negotiated, for the demo page and connection logs.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub protocol: &'static str,
    pub cipher: &'static str,
    pub group: Option<&'static str>,
    pub resumed: bool,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    pub client: SocketAddr,
    pub frontend: String,
    pub worker: usize,
}

pub(crate) fn protocol_name(conn: &ServerConnection) -> &'static str {
    match conn.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
        Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
        _ => "unknown",
    }
}

impl ConnInfo {
    pub fn new(conn: &ServerConnection, client: SocketAddr, frontend: &str, worker: usize) -> Self {
        ConnInfo {
            protocol: protocol_name(conn),
            cipher: conn
                .negotiated_cipher_suite()
                .map_or("unknown", params::suite_name),
            group: conn.negotiated_key_exchange_group().map(params::group_name),
            resumed: conn.handshake_kind() == Some(HandshakeKind::Resumed),
            sni: conn.server_name().map(str::to_string),
            alpn: conn
                .alpn_protocol()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
            client,
            frontend: frontend.to_string(),
            worker,
        }
    }
}

/// Keeps the active-connections gauge right on every exit path.
struct ActiveGuard<'a>(&'a FrontendMetrics);

impl Drop for ActiveGuard<'_> {
    fn drop(&mut self) {
        self.0.active.dec();
    }
}

/// Sorts a failed handshake into a metric label.
fn classify(e: &std::io::Error) -> HandshakeFailure {
    use rustls::Error as E;
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(
            E::InvalidMessage(_)
            | E::InappropriateMessage { .. }
            | E::InappropriateHandshakeMessage { .. }
            | E::PeerMisbehaved(_)
            | E::DecryptError,
        ) => HandshakeFailure::Malformed,
        Some(E::PeerIncompatible(_)) => HandshakeFailure::Incompatible,
        Some(E::General(m)) if m.contains("certificate") => HandshakeFailure::NoCertificate,
        Some(E::AlertReceived(_)) => HandshakeFailure::ClientAlert,
        Some(E::NoCertificatesPresented | E::InvalidCertificate(_)) => {
            HandshakeFailure::ClientCertificate
        }
        _ => HandshakeFailure::Other,
    }
}

pub async fn handle(worker: WorkerInfo, fe: Rc<FrontendRt>, mut tcp: TcpStream, peer: SocketAddr) {
    let started = Instant::now();
    let m = &fe.metrics;
    m.active.inc();
    let _active = ActiveGuard(m);
    let _ = tcp.set_nodelay(true);
    let cfg = &fe.cfg;
    let mut client = peer;
    let mut local = tcp.local_addr().unwrap_or(peer);
    let mut passthrough = None;
    if let Some(ap) = &cfg.accept_proxy {
        let res = if ap.allows(peer.ip()) {
            tokio::time::timeout(
                ap.timeout,
                proxy_in::read_header(&mut tcp, ap.passes_tlvs().then_some(ap.cert_tlv)),
            )
            .await
            .unwrap_or(Err(proxy_in::HeaderError::Timeout(ap.timeout)))
        } else {
            Err(proxy_in::HeaderError::Untrusted)
        };
        match res {
            Ok(a) => {
                if a.local {
                    m.proxy_headers_local.inc();
                } else {
                    m.proxy_headers_proxy.inc();
                }
                if let Some((src, dst)) = a.addrs {
                    client = src;
                    local = dst;
                }
                passthrough = a.passthrough;
            }
            // A TCP health check (connect, close) is not worth a warning each time.
            Err(e @ proxy_in::HeaderError::Closed { received: 0 }) => {
                m.proxy_header_failed(e.label());
                tracing::debug!(frontend = %cfg.name, %peer, worker = worker.id, "peer closed before sending a PROXY header");
                return;
            }
            Err(e) => {
                m.proxy_header_failed(e.label());
                if log_limit::allow() {
                    tracing::warn!(frontend = %cfg.name, %peer, worker = worker.id, reason = %e, "closing connection: PROXY header refused");
                }
                return;
            }
        }
    }
    // An Arc clone of this worker's own configuration: no lock, no memory shared with other workers.
    let worker_tls = fe.tls.load_full();
    let acceptor = TlsAcceptor::from(worker_tls.config.clone());
    let mut accept = std::pin::pin!(acceptor.accept(tcp));
    let mut served_cert = None;
    // The certificate resolver runs inside these polls and notes which certificate it chose, so
    // the SSL TLV can name its algorithms (rustls does not say after the handshake).
    let handshake = std::future::poll_fn(|cx| {
        sni::take_chosen();
        let r = accept.as_mut().poll(cx);
        if let Some(c) = sni::take_chosen() {
            served_cert = Some(c);
        }
        r
    });
    let mut tls = match tokio::time::timeout(cfg.handshake_timeout, handshake).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            // Port scanners and TCP health checks: not worth a warning or a failure count each.
            tracing::debug!(frontend = %cfg.name, %client, worker = worker.id, "client closed before completing the TLS handshake");
            return;
        }
        Ok(Err(e)) => {
            m.handshake_failed(classify(&e));
            if log_limit::allow() {
                tracing::warn!(frontend = %cfg.name, %client, worker = worker.id, reason = %e, "TLS handshake failed");
            }
            return;
        }
        Err(_) => {
            m.handshake_failed(HandshakeFailure::Timeout);
            if log_limit::allow() {
                tracing::warn!(frontend = %cfg.name, %client, worker = worker.id, reason = %format_args!("no complete handshake within {:?}", cfg.handshake_timeout), "TLS handshake failed");
            }
            return;
        }
    };
    if tls.get_ref().1.handshake_kind() == Some(HandshakeKind::Resumed) {
        m.handshakes_resumed.inc();
    } else {
        m.handshakes_full.inc();
    }

    let Some(pool) = &fe.backends else {
        let info = ConnInfo::new(tls.get_ref().1, client, &cfg.name, worker.id);
        // Boxed: the demo's state would otherwise enlarge every connection's future, relay ones too.
        let res = Box::pin(demo::serve(&mut tls, &info, cfg.idle_timeout)).await;
        if worker.log_connections {
            tracing::info!(frontend = %cfg.name, %client, worker = worker.id, protocol = info.protocol, cipher = info.cipher, resumed = info.resumed, sni = info.sni.as_deref().unwrap_or("-"), backend = "demo", result = %res.as_ref().map_or_else(ToString::to_string, |()| "ok".into()), ms = started.elapsed().as_millis() as u64, "connection closed");
        }
        return;
    };

    let (mut upstream, backend) = match pool.connect().await {
        Ok(x) => x,
        Err(e) => {
            m.backend_connect_errors.inc();
            if log_limit::allow() {
                tracing::warn!(frontend = %cfg.name, %client, worker = worker.id, error = %e, "closing client connection: backend unavailable");
            }
            // close_notify, so the client sees an orderly close rather than a truncation; bounded,
            // since a client that stopped reading could otherwise hold the task.
            let _ = tokio::time::timeout(cfg.handshake_timeout, tls.shutdown()).await;
            return;
        }
    };
    let unique_id = if proxy_out::makes_unique_id(cfg, passthrough.as_deref()) {
        proxy_out::UniqueId::next(worker.id)
    } else {
        proxy_out::UniqueId::default()
    };
    // rustls finishes a handshake only with a verified certificate or none at all, except under
    // optional_no_ca, where the backend is told how the certificate fared.
    let peer_chain = tls.get_ref().1.peer_certificates();
    let verify = match (&worker_tls.client_check, peer_chain) {
        (Some(check), Some(chain)) => {
            let code = check.verify_code(chain);
            if code != 0 {
                m.client_certs_unverified.inc();
            }
            code
        }
        (_, chain) => u32::from(chain.is_none()),
    };
    drop(worker_tls);
    let prefix = match proxy_out::header(
        cfg,
        tls.get_ref().1,
        (client, local),
        passthrough.as_deref(),
        proxy_out::Served {
            cert: served_cert.as_deref(),
            verify,
        },
        unique_id.as_bytes(),
    ) {
        Ok(p) => p,
        Err(e) => {
            if log_limit::allow() {
                tracing::warn!(frontend = %cfg.name, %client, worker = worker.id, error = %e, "closing connection: PROXY header too large (client certificate?)");
            }
            return;
        }
    };
    drop(passthrough);
    // The header goes out with the client's first bytes when they have arrived, in one segment.
    let count = |d: relay::Moved| {
        m.bytes_up.inc_by(d.up);
        m.bytes_down.inc_by(d.down);
    };
    let (moved, res) =
        relay::relay_with_prefix(&mut tls, &mut upstream, cfg.idle_timeout, prefix, count).await;
    // An abort on one side is passed on as an abort (RST, no close_notify) to the other, as
    // HAProxy does: an orderly close would let the peer take a cut stream for a complete one.
    // An idle timeout cuts both streams where they stand; nothing is in flight to lose.
    match &res {
        Err(RelayError::BackendAborted(_)) => abort(tls.get_ref().0),
        Err(RelayError::ClientAborted(_)) => abort(&upstream),
        Err(RelayError::Idle(_)) => {
            abort(tls.get_ref().0);
            abort(&upstream);
        }
        _ => {}
    }
    match &res {
        Err(RelayError::Backend(e) | RelayError::BackendAborted(e)) => {
            m.backend_relay_errors.inc();
            if log_limit::allow() {
                tracing::warn!(frontend = %cfg.name, %client, worker = worker.id, backend = %backend.name, error = %e, up = moved.up, down = moved.down, "backend connection failed");
            }
        }
        Err(e) => {
            match e {
                RelayError::Idle(_) => m.idle_timeouts.inc(),
                _ => m.client_errors.inc(),
            };
            if worker.log_connections {
                tracing::info!(frontend = %cfg.name, %client, worker = worker.id, backend = %backend.name, error = %e, up = moved.up, down = moved.down, "connection ended early");
            }
        }
        Ok(()) => {}
    }
    if worker.log_connections {
        let info = ConnInfo::new(tls.get_ref().1, client, &cfg.name, worker.id);
        tracing::info!(frontend = %cfg.name, %client, worker = worker.id, protocol = info.protocol, cipher = info.cipher, group = info.group.unwrap_or("-"), resumed = info.resumed, sni = info.sni.as_deref().unwrap_or("-"), alpn = info.alpn.as_deref().unwrap_or("-"), backend = %backend.name, peer = %peer, id = unique_id.as_str(), up = moved.up, down = moved.down, ms = started.elapsed().as_millis() as u64, "connection closed");
    }
}

/// Makes the coming close of `tcp` a reset: SO_LINGER 0 sends RST and drops unsent bytes.
fn abort(tcp: &TcpStream) {
    if let Err(e) = tcp.set_zero_linger() {
        tracing::debug!(error = %e, "could not arm an abortive close");
    }
}
