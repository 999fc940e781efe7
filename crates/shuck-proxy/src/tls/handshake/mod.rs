//! The TLS handshake stage. [`hello::read_client_hello`] has taken the ClientHello off
//! the socket; [`finish`] completes the handshake with the worker's configuration and returns
//! what was negotiated as a value: the stream, the certificate served, the client certificate's
//! verdict.

pub(crate) mod error;
pub(crate) mod hello;
mod words;

use std::future::poll_fn;
use std::io;
use std::sync::Arc;

use rustls::{CommonState, HandshakeKind, ServerConfig};
use tokio::io::AsyncWriteExt;
use tokio_rustls::StartHandshake;

use crate::proto::tls_params as params;
use crate::sessions::remote::{Prefetched, RemoteSessions};
use crate::sessions::resumption::{Mechanism, WorkerResumption};
use crate::sys::load::HandshakeLoad;
use crate::tls::certs::ServedCert;
use crate::tls::client_auth::Lenient;
use crate::tls::sni::{Choice, WorkerResolver};
use crate::tls::stream::TlsStream;
use crate::tls::WorkerTls;
use error::{refusal, Deadline, HandshakeError};
use hello::Hello;

/// What the handshake settled, the stream included.
pub(crate) struct Negotiated {
    /// Boxed, like everything of rustls' kept across an await (see `hello::accept`).
    pub(crate) stream: Box<TlsStream>,
    /// The client's server name, kept only when something will show it (see `finish`).
    pub(crate) sni: Option<Box<str>>,
    /// The certificate presented, as the backend is told about it.
    pub(crate) served: Option<Arc<ServedCert>>,
    pub(crate) client_cert: ClientCert,
    /// What found the session, when the handshake resumed one.
    pub(crate) resumed_by: Option<Mechanism>,
    /// Whose TLS policy the handshake had: a route's place in the frontend's `route` list, or
    /// `None` for the frontend's. The route the connection takes must have the same.
    pub(crate) policy: Option<usize>,
}

impl Negotiated {
    /// What rustls negotiated: `None` once shuck has taken the records over for the relay
    /// ([`TlsStream::take_over_records`]); everything that asks comes before.
    pub(crate) fn conn(&self) -> Option<&CommonState> {
        self.stream.conn()
    }
}

/// Completes the handshake of `hello` with this worker's configuration. `keep_sni`: the server
/// name is wanted later (a log line, the demo page, a PROXY header), so it is kept.
pub(crate) async fn finish(
    hello: Box<Hello>,
    tls: &WorkerTls,
    deadline: Deadline,
    prefetched: Option<Prefetched>,
    (keep_sni, load): (bool, (&HandshakeLoad, u32)),
) -> Result<Negotiated, HandshakeError> {
    let Hello {
        accepted,
        tcp,
        received,
    } = *hello;
    // A route's own TLS policy when the ClientHello asks for one of its names.
    let tls = tls.for_name(accepted.client_hello().server_name());
    let sni = keep_sni
        .then(|| accepted.client_hello().server_name().map(Box::from))
        .flatten();
    // A key in a token signs on a signer thread, which may take milliseconds: the ClientHello
    // that may need it is processed off the worker, with notes of its own.
    let offload = tls
        .signs_in_token(accepted.client_hello().server_name())
        .then(|| tls.offloaded());
    drop(accepted);
    let config = offload
        .as_ref()
        .map_or_else(|| tls.config.clone(), |o| o.config.clone());
    let stream = Box::new(TlsStream::new(tcp, config, &received).map_err(HandshakeError::from_io)?);
    drop(received);
    let (mut stream, ((processed, choice), found)) = match &offload {
        None => {
            let mut stream = stream;
            let out = process_hello(
                &mut stream,
                (&tls.resolver, &tls.resumption),
                tls.remote.as_deref(),
                prefetched,
            );
            (stream, out)
        }
        Some(o) => {
            let (resolver, resumption) = (o.resolver.clone(), o.resumption.clone());
            let remote = o.remote.clone();
            let off = off_worker(stream, move |stream| {
                process_hello(
                    stream,
                    (&resolver, &resumption),
                    remote.as_deref(),
                    prefetched,
                )
            });
            // Bounded by the handshake's deadline: past it the handshake has failed, and the
            // blocking task, which owns the stream, closes the connection when it ends.
            match tokio::time::timeout_at(deadline.at, off).await {
                Ok(done) => done.map_err(HandshakeError::from_io)?,
                Err(_) => return Err(HandshakeError::Timeout(deadline.within)),
            }
        }
    };
    let resumption = offload.as_ref().map_or(&tls.resumption, |o| &o.resumption);
    // After the expensive step (the hello processed, the signature made): the worker's load.
    load.0.tick(std::time::Instant::now(), load.1);
    let served = match choice {
        Choice::Served(s) => Some(s),
        Choice::NotAsked => None,
        Choice::NameRefused => {
            // The policy's refusal: rustls' access_denied says just that.
            let _ = tokio::time::timeout_at(deadline.at, stream.send_pending()).await;
            return Err(HandshakeError::NoCertificate);
        }
        Choice::NoCertificate => {
            // rustls would answer access_denied, which scanners and clients read as a policy
            // refusal; when nothing fits, the standard answer (OpenSSL's) is handshake_failure.
            stream.discard_pending();
            let alert = refusal(rustls::AlertDescription::HandshakeFailure, 0x0303);
            let _ = tokio::time::timeout_at(deadline.at, write_raw(&stream, &alert)).await;
            return Err(HandshakeError::NoCertificate);
        }
    };
    let off_resumption = offload.as_ref().map(|o| o.resumption.clone());
    // Owns the stream and gives it back (a timeout drops it with the connection).
    let handshake = async move {
        if let Err(e) = processed {
            return Ok((stream, Err(e)));
        }
        // A token key may still sign (after a HelloRetryRequest, the second ClientHello is
        // where rustls does): every record processed off the worker too.
        if let Some(r) = off_resumption {
            return finish_off_worker(stream, r).await;
        }
        // Each poll is one synchronous call, so the ticket limit of a resumption applies to
        // this connection's tickets alone.
        let done = poll_fn(|cx| {
            let resumed = stream.conn().is_some_and(resumed);
            resumption.tickets_during(resumed, || stream.poll_handshake(cx))
        })
        .await;
        Ok((stream, done))
    };
    let stream = match tokio::time::timeout_at(deadline.at, handshake).await {
        Ok(Ok((stream, Ok(())))) => stream,
        Ok(Ok((mut stream, Err(e)))) => {
            // rustls' alert when the hello itself was refused (a later error's alert was sent
            // as it happened, as far as the socket took it).
            let _ = tokio::time::timeout_at(deadline.at, stream.send_pending()).await;
            return Err(HandshakeError::from_io(e));
        }
        // The stream was lost off the worker (the task failed).
        Ok(Err(e)) => return Err(HandshakeError::from_io(e)),
        Err(_) => return Err(HandshakeError::Timeout(deadline.within)),
    };
    let conn = stream.conn();
    // rustls does not ask for a certificate again when it resumes: a session made without
    // one (before a reload made this name require one) must not pass for one made with it.
    let uncertified = conn.is_some_and(|c| c.peer_certificates().is_none());
    if tls.requires_client_cert && uncertified {
        return Err(HandshakeError::Tls(rustls::Error::NoCertificatesPresented));
    }
    let client_cert = conn.map_or(ClientCert::Absent, |c| {
        ClientCert::of(c, tls.client_check.as_deref())
    });
    let resumed_by = found.filter(|_| conn.is_some_and(resumed));
    Ok(Negotiated {
        stream,
        sni,
        served,
        client_cert,
        resumed_by,
        policy: tls.policy,
    })
}

/// rustls processes the ClientHello inside this call: it chooses the certificate (`resolver`
/// notes it), looks the session up (the remote store's slot holds what the ClientHello stage
/// fetched; `resumption` notes what found it) and signs, for a full handshake.
fn process_hello(
    stream: &mut TlsStream,
    (resolver, resumption): (&WorkerResolver, &WorkerResumption),
    remote: Option<&RemoteSessions>,
    prefetched: Option<Prefetched>,
) -> ((io::Result<()>, Choice), Option<Mechanism>) {
    let mut process =
        || resumption.noted_during(|| resolver.choice_during(|| stream.process_received()));
    match remote {
        Some(remote) => remote.during(prefetched, process),
        None => process(),
    }
}

/// `f` on `stream` on the worker's blocking pool, and the stream back. The stream's socket is
/// not touched there: only what it received is processed.
async fn off_worker<T: Send + 'static>(
    mut stream: Box<TlsStream>,
    f: impl FnOnce(&mut TlsStream) -> T + Send + 'static,
) -> io::Result<(Box<TlsStream>, T)> {
    tokio::task::spawn_blocking(move || {
        let out = f(&mut stream);
        (stream, out)
    })
    .await
    .map_err(io::Error::other)
}

/// The rest of a handshake processed off the worker: the flight sent, the client's read (on
/// the worker), then processed off it, until the handshake is over. Like `poll_handshake`,
/// TLS 1.2's last flight leaves now and TLS 1.3's tickets stay queued for the first answer.
async fn finish_off_worker(
    mut stream: Box<TlsStream>,
    resumption: Arc<WorkerResumption>,
) -> io::Result<(Box<TlsStream>, io::Result<()>)> {
    loop {
        if stream.handshake_done() {
            let tls13 = stream
                .conn()
                .is_some_and(|c| c.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3));
            let sent = if tls13 {
                Ok(())
            } else {
                stream.send_pending().await
            };
            return Ok((stream, sent));
        }
        if let Err(e) = stream.send_pending().await {
            return Ok((stream, Err(e)));
        }
        match stream.receive().await {
            Ok(0) => return Ok((stream, Err(io::ErrorKind::UnexpectedEof.into()))),
            Ok(_) => {}
            Err(e) => return Ok((stream, Err(e))),
        }
        let resumption = resumption.clone();
        let (back, processed) = off_worker(stream, move |s| {
            let was_resumed = s.conn().is_some_and(resumed);
            resumption.tickets_during(was_resumed, || s.process_received())
        })
        .await?;
        stream = back;
        if let Err(e) = processed {
            return Ok((stream, Err(e)));
        }
    }
}

/// Writes `bytes` to the client's socket, outside TLS.
async fn write_raw(stream: &TlsStream, mut bytes: &[u8]) -> io::Result<()> {
    let tcp = stream.tcp();
    while !bytes.is_empty() {
        tcp.writable().await?;
        match tcp.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Serves an ACME validator's TLS-ALPN-01 handshake with the challenge configuration, then
/// closes (RFC 8737: the validator only looks at the certificate). Nothing reaches the backend.
pub(crate) async fn answer_acme(
    hello: Box<Hello>,
    config: Arc<ServerConfig>,
    deadline: Deadline,
) -> Result<(), HandshakeError> {
    let Hello {
        accepted,
        tcp,
        received,
    } = *hello;
    // The validator's bytes are all in the hello; rustls' buffered stream serves this rare case.
    drop(received);
    let accept = Box::new(StartHandshake::from_parts(accepted, tcp).into_stream(config));
    let mut stream = match tokio::time::timeout_at(deadline.at, accept).await {
        Ok(Ok(s)) => Box::new(s),
        Ok(Err(e)) => return Err(HandshakeError::from_io(e)),
        Err(_) => return Err(HandshakeError::Timeout(deadline.within)),
    };
    let _ = tokio::time::timeout_at(deadline.at, stream.shutdown()).await;
    Ok(())
}

/// How the client's certificate fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientCert {
    Absent,
    Verified,
    /// Passed on under `optional_no_ca` with this OpenSSL `X509_V_ERR_*` code.
    Unverified(u32),
}

impl ClientCert {
    /// rustls finishes a handshake only with a verified certificate or none at all, except
    /// under optional_no_ca, whose check says how the certificate fared.
    fn of(conn: &CommonState, lenient: Option<&Lenient>) -> ClientCert {
        match (conn.peer_certificates(), lenient) {
            (None, _) => ClientCert::Absent,
            (Some(_), None) => ClientCert::Verified,
            (Some(chain), Some(check)) => match check.verify_code(chain) {
                0 => ClientCert::Verified,
                code => ClientCert::Unverified(code),
            },
        }
    }

    /// For the access log: `none`, `ok`, or the OpenSSL verify code a certificate passed on
    /// unverified (`optional_no_ca`) failed with.
    pub(crate) fn verdict(self) -> std::borrow::Cow<'static, str> {
        match self {
            ClientCert::Absent => "none".into(),
            ClientCert::Verified => "ok".into(),
            ClientCert::Unverified(code) => format!("failed ({code})").into(),
        }
    }

    /// The SSL TLV's verify field: 0 for a verified certificate.
    pub(crate) fn verify_code(self) -> u32 {
        match self {
            ClientCert::Absent => 1,
            ClientCert::Verified => 0,
            ClientCert::Unverified(code) => code,
        }
    }
}

pub(crate) fn resumed(conn: &CommonState) -> bool {
    conn.handshake_kind() == Some(HandshakeKind::Resumed)
}

/// What was negotiated, in words: for the demo page and connection logs.
#[derive(Debug, Clone)]
pub(crate) struct Summary {
    pub(crate) protocol: &'static str,
    pub(crate) cipher: &'static str,
    pub(crate) group: Option<&'static str>,
    pub(crate) resumed: bool,
    pub(crate) sni: Option<String>,
    pub(crate) alpn: Option<String>,
    /// The address the client connected to (HAProxy's `%fi:%fp`).
    pub(crate) listen: Option<std::net::SocketAddr>,
    /// The client certificate's subject, when it sent one (RFC 4514).
    pub(crate) client_subject: Option<String>,
    pub(crate) client_cert: ClientCert,
    /// The backend connection's own address, once connected (HAProxy's `%bi:%bp`).
    pub(crate) backend_source: Option<std::net::SocketAddr>,
}

impl Summary {
    pub(crate) fn of(hs: &Negotiated) -> Summary {
        let conn = hs.conn();
        let client_subject = conn
            .and_then(CommonState::peer_certificates)
            .and_then(|chain| chain.first())
            .and_then(|der| crate::certs::x509::X509::parse(der).ok())
            .map(|c| c.subject());
        Summary {
            listen: hs.stream.tcp().local_addr().ok(),
            client_subject,
            client_cert: hs.client_cert,
            backend_source: None,
            protocol: params::protocol_name(conn.and_then(CommonState::protocol_version)),
            cipher: conn
                .and_then(CommonState::negotiated_cipher_suite)
                .map_or("unknown", params::suite_name),
            group: conn
                .and_then(CommonState::negotiated_key_exchange_group)
                .map(params::group_name),
            resumed: conn.is_some_and(resumed),
            sni: hs.sni.as_deref().map(str::to_string),
            alpn: conn
                .and_then(CommonState::alpn_protocol)
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        }
    }
}
