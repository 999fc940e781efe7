//! Why a connection ended before its natural end. Each stage has its own error type
//! (`HeaderError`, `HandshakeError`, `ConnectError`, `EncodeError`, `RelayError`); `ConnError`
//! gathers them, and sorts each into a [`Reason`] by type, never by message text. The reason
//! decides the metric counted and how loudly the one log line is written.

use crate::backend::ConnectError;
use crate::conn::proxy_in::HeaderError;
use crate::conn::relay::RelayError;
use crate::proto::proxy_protocol::{DecodeError, EncodeError};
use crate::tls::handshake::error::HandshakeError;

/// A connection's early end, with what the log line needs to explain it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnError {
    #[error("{0}")]
    ProxyHeader(#[from] HeaderError),
    #[error("{0}")]
    Handshake(#[from] HandshakeError),
    #[error("{0}")]
    BackendConnect(#[from] ConnectError),
    /// The TLS handshake with the backend failed (`backend_tls`): its certificate did not
    /// verify, it refused ours, or it does not speak TLS.
    #[error("TLS to the backend: {0}")]
    BackendTls(crate::backend::TlsToBackendError),
    #[error("PROXY header too large (client certificate?): {0}")]
    BackendHeader(#[from] EncodeError),
    #[error("{0}")]
    Relay(#[from] RelayError),
    /// The frontend has routes, none matched, and it has no backend of its own.
    #[error("no route matches the negotiated server name and ALPN, and the frontend has no backend of its own")]
    NoRoute,
    /// The route the connection takes has another TLS policy than its handshake had (an
    /// earlier route without one, or with another, takes a name a later policy route covers).
    #[error("the route taken has another TLS policy than the handshake had: refused")]
    PolicyMismatch,
    /// Refused by the frontend's admission rules (`allow`, `deny`, `per_client`, `deny_ja4`).
    #[error("{0}")]
    Refused(#[from] Refusal),
}

/// Why a connection was refused at the door (`shuck_refused_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// In a `deny` network.
    #[error("client address is in a denied network")]
    Denied,
    /// Outside every `allow` network.
    #[error("client address is not in an allowed network")]
    NotAllowed,
    /// The client holds `per_client.connections` already.
    #[error("client holds as many connections as per_client.connections allows")]
    ClientConnections,
    /// The client's full handshakes are past `per_client.handshakes`.
    #[error("client makes full handshakes faster than per_client.handshakes allows")]
    ClientHandshakes,
    /// The ClientHello's JA4 fingerprint is in `deny_ja4`.
    #[error("client's TLS fingerprint (JA4) is denied")]
    Ja4,
    /// A new full handshake shed by a worker over `overload_threshold`.
    #[error("worker overloaded: new full handshake shed (resumptions are still served)")]
    Overload,
}

/// Declares `Reason` and `Reason::ALL` from one list, so no variant can be left out of `ALL`
/// (the metrics index their counters by `reason as usize`).
macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident,)+) => {
        /// The label, metric and log level of each way a connection can end early.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Reason {
            $($(#[$doc])* $variant,)+
        }

        impl Reason {
            pub(crate) const ALL: [Reason; [$(Reason::$variant,)+].len()] = [$(Reason::$variant,)+];
        }
    };
}

reasons! {
    ProxyNotProxy,
    ProxyV1Malformed,
    ProxyV2Unsupported,
    ProxyTooLong,
    ProxyV2Malformed,
    ProxyBadChecksum,
    ProxyUntrusted,
    ProxyTimeout,
    /// Closed part-way through a header.
    ProxyClosed,
    /// Connected and closed without a byte: a TCP health check.
    ProxyHealthCheck,
    ProxyOther,
    /// Closed before sending a byte (port scanners, TCP health checks).
    HandshakeAbandoned,
    /// Closed (FIN or reset) part-way through its handshake.
    HandshakeClientAbort,
    /// Not TLS, or TLS that breaks the protocol.
    HandshakeMalformed,
    /// No common version, cipher suite, group or signature scheme.
    HandshakeIncompatible,
    /// No certificate for the requested name (or the client's algorithms).
    HandshakeNoCertificate,
    /// The client sent a fatal alert (it refused our certificate, for instance).
    HandshakeClientAlert,
    HandshakeTimeout,
    /// mTLS: no client certificate where one is required, or one that does not verify.
    HandshakeClientCertificate,
    HandshakeOther,
    BackendConnect,
    /// The TLS handshake with the backend failed.
    BackendTls,
    /// No route matched and the frontend has no backend of its own.
    NoRoute,
    /// The route taken has another TLS policy than the handshake had.
    PolicyMismatch,
    /// Out of descriptors for the backend connection: ours, not the backend's, problem.
    NoDescriptors,
    /// The PROXY header for the backend could not be built.
    BackendHeader,
    /// The backend failed while relaying.
    BackendRelay,
    /// The client failed while relaying (reset, broken TLS record).
    ClientRelay,
    RefusedDenied,
    RefusedNotAllowed,
    RefusedClientConnections,
    RefusedClientHandshakes,
    RefusedJa4,
    RefusedOverload,
    /// Closed while idle to free a slot near `max_connections` (`conn::idle`).
    Evicted,
    /// Closed by an operator through the admin socket.
    ClosedByOperator,
    Idle,
}

/// The metric family a reason is counted in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CountedIn {
    ProxyHeaderErrors,
    HandshakeFailures,
    BackendErrors,
    ClientErrors,
    IdleTimeouts,
    /// Local resources ran out (`shuck_resource_errors_total{kind}`).
    ResourceErrors,
    /// Refused at the door (`shuck_refused_total{reason}`).
    Refusals,
}

/// How the one line about a connection's end is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loudness {
    /// Routine noise (health checks, scanners): a debug line.
    Quiet,
    /// Worth an operator's attention: a warning, within the per-worker rate limit.
    Warn,
    /// Normal life of a connection: an info line when connection logs are on.
    Info,
    /// A refusal: a warning at most once a minute per source, within the rate limit.
    PerSource,
}

impl Reason {
    /// The label in log lines; unique among reasons.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::ProxyNotProxy => "proxy_not_proxy",
            Reason::ProxyV1Malformed => "proxy_v1_malformed",
            Reason::ProxyV2Unsupported => "proxy_v2_unsupported",
            Reason::ProxyTooLong => "proxy_too_long",
            Reason::ProxyV2Malformed => "proxy_v2_malformed",
            Reason::ProxyBadChecksum => "proxy_bad_checksum",
            Reason::ProxyUntrusted => "proxy_untrusted_peer",
            Reason::ProxyTimeout => "proxy_timeout",
            Reason::ProxyClosed => "proxy_closed",
            Reason::ProxyHealthCheck => "proxy_health_check",
            Reason::ProxyOther => "proxy_other",
            Reason::HandshakeAbandoned => "handshake_abandoned",
            Reason::HandshakeClientAbort => "handshake_client_abort",
            Reason::HandshakeMalformed => "handshake_malformed",
            Reason::HandshakeIncompatible => "handshake_incompatible",
            Reason::HandshakeNoCertificate => "handshake_no_certificate",
            Reason::HandshakeClientAlert => "handshake_client_alert",
            Reason::HandshakeTimeout => "handshake_timeout",
            Reason::HandshakeClientCertificate => "handshake_client_certificate",
            Reason::HandshakeOther => "handshake_other",
            Reason::BackendConnect => "backend_connect",
            Reason::BackendTls => "backend_tls",
            Reason::NoRoute => "no_route",
            Reason::PolicyMismatch => "policy_mismatch",
            Reason::NoDescriptors => "no_descriptors",
            Reason::BackendHeader => "backend_proxy_header",
            Reason::BackendRelay => "backend_relay",
            Reason::ClientRelay => "client_relay",
            Reason::RefusedDenied => "refused_denied",
            Reason::RefusedNotAllowed => "refused_not_allowed",
            Reason::RefusedClientConnections => "refused_client_connections",
            Reason::RefusedClientHandshakes => "refused_client_handshakes",
            Reason::RefusedJa4 => "refused_ja4",
            Reason::RefusedOverload => "refused_overload",
            Reason::Evicted => "evicted_idle",
            Reason::ClosedByOperator => "closed_by_operator",
            Reason::Idle => "idle_timeout",
        }
    }

    /// The family and label value it is counted under; `None`: not counted (a client that gave
    /// up before the handshake finished is no failure of ours).
    pub(crate) fn metric(self) -> Option<(CountedIn, &'static str)> {
        use CountedIn::{BackendErrors, ClientErrors, HandshakeFailures, IdleTimeouts};
        let proxy = |label| Some((CountedIn::ProxyHeaderErrors, label));
        match self {
            Reason::ProxyNotProxy => proxy("not_proxy"),
            Reason::ProxyV1Malformed => proxy("v1_malformed"),
            Reason::ProxyV2Unsupported => proxy("v2_unsupported"),
            Reason::ProxyTooLong => proxy("too_long"),
            Reason::ProxyV2Malformed => proxy("v2_malformed"),
            Reason::ProxyBadChecksum => proxy("bad_checksum"),
            Reason::ProxyUntrusted => proxy("untrusted_peer"),
            Reason::ProxyTimeout => proxy("timeout"),
            Reason::ProxyClosed | Reason::ProxyHealthCheck => proxy("closed"),
            Reason::ProxyOther => proxy("other"),
            // A client that gave up before its handshake is no failure of ours; a connection
            // an operator closed, no failure of anyone's.
            Reason::HandshakeAbandoned | Reason::ClosedByOperator => None,
            Reason::HandshakeClientAbort => Some((HandshakeFailures, "client_abort")),
            Reason::HandshakeMalformed => Some((HandshakeFailures, "malformed")),
            Reason::HandshakeIncompatible => Some((HandshakeFailures, "incompatible")),
            Reason::HandshakeNoCertificate => Some((HandshakeFailures, "no_certificate")),
            Reason::HandshakeClientAlert => Some((HandshakeFailures, "client_alert")),
            Reason::HandshakeTimeout => Some((HandshakeFailures, "timeout")),
            Reason::HandshakeClientCertificate => Some((HandshakeFailures, "client_certificate")),
            Reason::HandshakeOther => Some((HandshakeFailures, "other")),
            Reason::BackendConnect => Some((BackendErrors, "connect")),
            Reason::BackendTls => Some((BackendErrors, "tls")),
            Reason::NoRoute => Some((BackendErrors, "no_route")),
            Reason::PolicyMismatch => Some((BackendErrors, "policy_mismatch")),
            Reason::NoDescriptors => Some((CountedIn::ResourceErrors, "descriptors")),
            Reason::BackendHeader => Some((BackendErrors, "proxy_header")),
            Reason::BackendRelay => Some((BackendErrors, "relay")),
            Reason::ClientRelay => Some((ClientErrors, "")),
            Reason::RefusedDenied => Some((CountedIn::Refusals, "denied")),
            Reason::RefusedNotAllowed => Some((CountedIn::Refusals, "not_allowed")),
            Reason::RefusedClientConnections => Some((CountedIn::Refusals, "client_connections")),
            Reason::RefusedClientHandshakes => Some((CountedIn::Refusals, "client_handshakes")),
            Reason::RefusedJa4 => Some((CountedIn::Refusals, "ja4")),
            Reason::RefusedOverload => Some((CountedIn::Refusals, "overload")),
            Reason::Evicted => Some((CountedIn::Refusals, "evicted_idle")),
            Reason::Idle => Some((IdleTimeouts, "")),
        }
    }

    pub(crate) fn loudness(self) -> Loudness {
        match self {
            Reason::ProxyHealthCheck | Reason::HandshakeAbandoned => Loudness::Quiet,
            // Counted, and a line when connections are logged: a client giving up part-way is
            // routine, not the operator's to act on.
            Reason::HandshakeClientAbort
            | Reason::ClientRelay
            | Reason::Idle
            | Reason::ClosedByOperator => Loudness::Info,
            r if r.metric().is_some_and(|(f, _)| f == CountedIn::Refusals) => Loudness::PerSource,
            _ => Loudness::Warn,
        }
    }

    /// HAProxy's two-letter termination state for the `haproxy` access log (`tcplog`): who
    /// or what ended the connection (C client, S server, P the proxy, R a resource, I an
    /// internal error, c/s a client or server timeout), and in which phase (R before the
    /// backend, C while connecting, D while relaying).
    pub(crate) fn termination_state(self) -> &'static str {
        match self {
            Reason::HandshakeAbandoned
            | Reason::HandshakeClientAbort
            | Reason::ProxyClosed
            | Reason::ProxyHealthCheck => "CR",
            Reason::HandshakeTimeout | Reason::ProxyTimeout => "cR",
            Reason::BackendConnect | Reason::BackendTls | Reason::NoRoute => "SC",
            Reason::NoDescriptors => "RC",
            Reason::BackendHeader => "IC",
            Reason::BackendRelay => "SD",
            Reason::ClientRelay => "CD",
            Reason::Idle => "cD",
            Reason::Evicted => "PD",
            // HAProxy's K: killed by an administrator.
            Reason::ClosedByOperator => "KD",
            // Refused by shuck before the backend: a bad PROXY header, a handshake it would not
            // complete, an admission rule.
            _ => "PR",
        }
    }

    /// What happened, as the log line's message.
    pub(crate) fn message(self) -> &'static str {
        match self {
            Reason::ProxyHealthCheck => "peer closed before sending a PROXY header",
            Reason::HandshakeAbandoned => "client closed before sending a ClientHello",
            Reason::HandshakeClientAbort => "client closed during the TLS handshake",
            Reason::BackendConnect => "closing client connection: backend unavailable",
            Reason::BackendTls => "closing client connection: TLS to the backend failed",
            Reason::NoRoute => "closing client connection: no route for its server name and ALPN",
            Reason::PolicyMismatch => {
                "closing client connection: its route has another TLS policy than its handshake had"
            }
            Reason::NoDescriptors => {
                "closing client connection: out of descriptors (raise the open-files limit)"
            }
            Reason::BackendHeader => "closing connection: PROXY header not sent",
            Reason::BackendRelay => "backend connection failed",
            Reason::ClientRelay | Reason::Idle => "connection ended early",
            Reason::Evicted => "closed an idle connection to free a slot near max_connections",
            Reason::ClosedByOperator => "closed by an operator (admin socket)",
            r if r.metric().is_some_and(|(f, _)| f == CountedIn::Refusals) => {
                "connection refused by the frontend's admission rules"
            }
            r if r
                .metric()
                .is_some_and(|(f, _)| f == CountedIn::ProxyHeaderErrors) =>
            {
                "closing connection: PROXY header refused"
            }
            _ => "TLS handshake failed",
        }
    }
}

impl ConnError {
    pub(crate) fn reason(&self) -> Reason {
        match self {
            ConnError::ProxyHeader(e) => proxy_reason(e),
            ConnError::Handshake(HandshakeError::Silent) => Reason::HandshakeAbandoned,
            ConnError::Handshake(HandshakeError::ClientAborted(_)) => Reason::HandshakeClientAbort,
            ConnError::Handshake(HandshakeError::Tls(error)) => handshake_reason(error),
            ConnError::Handshake(HandshakeError::NoCertificate) => Reason::HandshakeNoCertificate,
            ConnError::Handshake(HandshakeError::OldProtocol(_)) => Reason::HandshakeIncompatible,
            // Counted with rustls' own refusals of a message over its limit (`InvalidMessage`).
            ConnError::Handshake(HandshakeError::HelloTooLarge { .. }) => {
                Reason::HandshakeMalformed
            }
            ConnError::Handshake(HandshakeError::Io(_)) => Reason::HandshakeOther,
            ConnError::Handshake(HandshakeError::Timeout(_)) => Reason::HandshakeTimeout,
            ConnError::BackendConnect(
                ConnectError::Unreachable { .. } | ConnectError::NoneInService,
            ) => Reason::BackendConnect,
            ConnError::BackendConnect(ConnectError::NoDescriptors(_)) => Reason::NoDescriptors,
            ConnError::BackendHeader(_) => Reason::BackendHeader,
            ConnError::BackendTls(_) => Reason::BackendTls,
            ConnError::NoRoute => Reason::NoRoute,
            ConnError::PolicyMismatch => Reason::PolicyMismatch,
            ConnError::Relay(RelayError::Backend(_) | RelayError::BackendAborted(_)) => {
                Reason::BackendRelay
            }
            ConnError::Relay(RelayError::Client(_) | RelayError::ClientAborted(_)) => {
                Reason::ClientRelay
            }
            ConnError::Relay(RelayError::Idle(_)) => Reason::Idle,
            ConnError::Relay(RelayError::Evicted { .. }) => Reason::Evicted,
            ConnError::Relay(RelayError::ClosedByOperator { .. }) => Reason::ClosedByOperator,
            ConnError::Refused(r) => match r {
                Refusal::Denied => Reason::RefusedDenied,
                Refusal::NotAllowed => Reason::RefusedNotAllowed,
                Refusal::ClientConnections => Reason::RefusedClientConnections,
                Refusal::ClientHandshakes => Reason::RefusedClientHandshakes,
                Refusal::Ja4 => Reason::RefusedJa4,
                Refusal::Overload => Reason::RefusedOverload,
            },
        }
    }
}

fn proxy_reason(e: &HeaderError) -> Reason {
    match e {
        HeaderError::Decode(d) => match d {
            DecodeError::NotProxy => Reason::ProxyNotProxy,
            DecodeError::V1Malformed(_) | DecodeError::V1TooLong => Reason::ProxyV1Malformed,
            DecodeError::V2Version(_) | DecodeError::V2Command(_) | DecodeError::V2Family(_) => {
                Reason::ProxyV2Unsupported
            }
            DecodeError::V2TooLong(_) => Reason::ProxyTooLong,
            DecodeError::V2Truncated | DecodeError::TlvTruncated | DecodeError::TlvMalformed(_) => {
                Reason::ProxyV2Malformed
            }
            DecodeError::BadChecksum => Reason::ProxyBadChecksum,
        },
        HeaderError::Closed { received: 0 } => Reason::ProxyHealthCheck,
        HeaderError::Closed { .. } => Reason::ProxyClosed,
        HeaderError::Timeout(_) => Reason::ProxyTimeout,
        HeaderError::Untrusted => Reason::ProxyUntrusted,
        HeaderError::Io(_) => Reason::ProxyOther,
    }
}

fn handshake_reason(e: &rustls::Error) -> Reason {
    use rustls::Error as E;
    match e {
        E::InvalidMessage(_)
        | E::InappropriateMessage { .. }
        | E::InappropriateHandshakeMessage { .. }
        | E::PeerMisbehaved(_)
        | E::DecryptError => Reason::HandshakeMalformed,
        E::PeerIncompatible(_) => Reason::HandshakeIncompatible,
        E::AlertReceived(_) => Reason::HandshakeClientAlert,
        E::NoCertificatesPresented | E::InvalidCertificate(_) => Reason::HandshakeClientCertificate,
        _ => Reason::HandshakeOther,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn labels_are_unique_and_all_is_complete() {
        let mut seen = std::collections::HashSet::new();
        for r in Reason::ALL {
            assert!(seen.insert(r.as_str()), "{} twice", r.as_str());
        }
        // Every variant is in ALL, in declaration order, so `r as usize` indexes it.
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
        assert_eq!(
            Reason::Idle as usize + 1,
            Reason::ALL.len(),
            "Idle is the last"
        );
    }

    #[test]
    fn handshake_errors_are_sorted_by_type() {
        // Whatever its text says: "no certificate" is the handshake stage's own finding.
        let general = rustls::Error::General("no server certificate chain resolved".into());
        assert_eq!(handshake_reason(&general), Reason::HandshakeOther);
        let none = ConnError::from(HandshakeError::NoCertificate);
        assert_eq!(none.reason(), Reason::HandshakeNoCertificate);
        let old = ConnError::from(HandshakeError::OldProtocol(0x0301));
        assert_eq!(old.reason(), Reason::HandshakeIncompatible);
        let large = ConnError::from(HandshakeError::HelloTooLarge { received: 65_535 });
        assert_eq!(large.reason(), Reason::HandshakeMalformed);
        let alert = rustls::Error::AlertReceived(rustls::AlertDescription::BadCertificate);
        assert_eq!(handshake_reason(&alert), Reason::HandshakeClientAlert);
        let reason = |e: io::Error| ConnError::from(HandshakeError::from_io(e)).reason();
        let decrypt = io::Error::new(io::ErrorKind::InvalidData, rustls::Error::DecryptError);
        assert_eq!(reason(decrypt), Reason::HandshakeMalformed);
        // After the ClientHello, a close of either kind is the client's abort.
        let eof = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert_eq!(reason(eof), Reason::HandshakeClientAbort);
        let reset = io::Error::from(io::ErrorKind::ConnectionReset);
        assert_eq!(reason(reset), Reason::HandshakeClientAbort);
        let other = io::Error::from(io::ErrorKind::OutOfMemory);
        assert_eq!(reason(other), Reason::HandshakeOther);
    }

    #[test]
    fn proxy_labels_match_the_decoder_labels() {
        // Every variant of the decoder's error.
        for d in [
            DecodeError::NotProxy,
            DecodeError::V1Malformed("x"),
            DecodeError::V1TooLong,
            DecodeError::V2Version(3),
            DecodeError::V2Command(9),
            DecodeError::V2Family(9),
            DecodeError::V2TooLong(1),
            DecodeError::V2Truncated,
            DecodeError::TlvTruncated,
            DecodeError::BadChecksum,
            DecodeError::TlvMalformed("x"),
        ] {
            let r = proxy_reason(&HeaderError::Decode(d));
            assert_eq!(r.metric().map(|m| m.1), Some(d.label()), "{d:?}");
        }
    }
}
