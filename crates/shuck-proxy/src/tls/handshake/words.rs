//! rustls' handshake errors in words an operator reads, for the log line's `error` field:
//! `client certificate is a CA certificate` rather than
//! `Other(OtherError(CaUsedAsEndEntity))`. Chosen by the error's type (never its text); what is
//! not named here keeps rustls' own words. The metrics' `reason` labels are not these
//! (`conn_error`).

use rustls::{AlertDescription, CertificateError, Error, InvalidMessage, PeerIncompatible};

/// `e` as a sentence fragment.
pub(crate) fn in_words(e: &Error) -> String {
    match e {
        Error::InvalidMessage(InvalidMessage::InvalidContentType) => {
            "not TLS (plain HTTP, or another protocol, sent to a TLS port?)".into()
        }
        Error::InvalidMessage(m) => format!("malformed TLS message from the client ({m:?})"),
        Error::PeerIncompatible(p) => incompatible(p),
        Error::NoCertificatesPresented => {
            "no client certificate, and this frontend requires one".into()
        }
        Error::InvalidCertificate(c) => format!("client certificate refused: {}", certificate(c)),
        Error::AlertReceived(a) => alert(*a),
        Error::DecryptError => "a message from the client did not decrypt".into(),
        Error::PeerMisbehaved(m) => format!("the client broke the TLS protocol ({m:?})"),
        Error::InappropriateMessage { .. } | Error::InappropriateHandshakeMessage { .. } => {
            format!("unexpected TLS message from the client ({e})")
        }
        other => other.to_string(),
    }
}

fn incompatible(p: &PeerIncompatible) -> String {
    use PeerIncompatible as P;
    match p {
        P::SupportedVersionsExtensionRequired => {
            "the client offers no TLS 1.3 (and TLS 1.2 is not enabled here)".into()
        }
        P::Tls12NotOffered | P::Tls12NotOfferedOrEnabled => {
            "the client offers neither TLS 1.3 nor TLS 1.2".into()
        }
        P::NoCipherSuitesInCommon => "no cipher suite in common with the client".into(),
        P::NoKxGroupsInCommon => "no key exchange group in common with the client".into(),
        P::NoSignatureSchemesInCommon => {
            "no signature scheme in common with the client (for this certificate's key)".into()
        }
        P::SignatureAlgorithmsExtensionRequired => "the client sent no signature algorithms".into(),
        other => format!("the client's TLS offer cannot be served ({other:?})"),
    }
}

fn certificate(c: &CertificateError) -> String {
    use CertificateError as C;
    match c {
        C::Expired | C::ExpiredContext { .. } => "expired".into(),
        C::NotValidYet | C::NotValidYetContext { .. } => "not valid yet".into(),
        C::UnknownIssuer => "issued by a CA this frontend does not trust".into(),
        C::Revoked => "revoked".into(),
        C::BadSignature => "bad signature".into(),
        C::BadEncoding => "not a valid certificate (bad encoding)".into(),
        C::UnknownRevocationStatus => {
            "its revocation status is unknown (no CRL for its issuer)".into()
        }
        C::ExpiredRevocationList | C::ExpiredRevocationListContext { .. } => {
            "the CRL for its issuer has expired".into()
        }
        C::InvalidPurpose | C::InvalidPurposeContext { .. } => {
            "not issued for client authentication".into()
        }
        C::Other(o) => match o.0.downcast_ref::<webpki::Error>() {
            Some(webpki::Error::CaUsedAsEndEntity) => "it is a CA certificate".into(),
            Some(w) => format!("{w:?}"),
            None => o.0.to_string(),
        },
        other => format!("{other:?}"),
    }
}

/// A fatal alert the client sent, by its name in the RFC, with what the common ones mean.
fn alert(a: AlertDescription) -> String {
    let why = match a {
        AlertDescription::BadCertificate
        | AlertDescription::UnknownCA
        | AlertDescription::CertificateUnknown => ": it does not accept the certificate served",
        AlertDescription::CertificateExpired => ": it finds the certificate served expired",
        AlertDescription::ProtocolVersion => ": no TLS version in common",
        AlertDescription::HandshakeFailure => ": it could not agree on parameters",
        AlertDescription::DecryptError => ": a message did not decrypt or verify",
        _ => "",
    };
    format!(
        "the client refused with the alert {}{why}",
        snake(&format!("{a:?}"))
    )
}

/// `BadCertificate` as `bad_certificate` and `UnknownCA` as `unknown_ca`, as the RFC names
/// alerts.
fn snake(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    let mut after_lower = false;
    for c in camel.chars() {
        if c.is_ascii_uppercase() && after_lower {
            out.push('_');
        }
        after_lower = c.is_ascii_lowercase();
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_errors_operators_meet_read_as_words() {
        let ca = CertificateError::Other(rustls::OtherError(Arc::new(
            webpki::Error::CaUsedAsEndEntity,
        )));
        assert_eq!(
            in_words(&Error::InvalidCertificate(ca)),
            "client certificate refused: it is a CA certificate"
        );
        assert_eq!(
            in_words(&Error::InvalidMessage(InvalidMessage::InvalidContentType)),
            "not TLS (plain HTTP, or another protocol, sent to a TLS port?)"
        );
        assert_eq!(
            in_words(&Error::PeerIncompatible(
                PeerIncompatible::SupportedVersionsExtensionRequired
            )),
            "the client offers no TLS 1.3 (and TLS 1.2 is not enabled here)"
        );
        assert_eq!(
            in_words(&Error::AlertReceived(AlertDescription::UnknownCA)),
            "the client refused with the alert unknown_ca: it does not accept the certificate served"
        );
    }
}
