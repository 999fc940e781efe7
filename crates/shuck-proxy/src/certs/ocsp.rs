//! OCSP (RFC 6960) for stapling: the request for one certificate, the responder's URL from the
//! certificate, fetching over HTTP, and the checks a response must pass before it is stapled:
//! a successful basic response, for this certificate (issuer name and key hashes, serial),
//! status good, thisUpdate not in the future and nextUpdate not past, signed by the issuer or by
//! a responder the issuer delegated to (a certificate it signed, with the OCSP-signing EKU,
//! valid now). A client trusts a staple only as far as it checks it; many do not check at all, so
//! shuck never staples what it has not checked.
//!
//! Parsing is RustCrypto's `x509-ocsp` (with `der`); certificates are read with x509-cert (`certs::x509`);
//! signatures are checked with rustls' own table of aws-lc-rs algorithms. The signed bytes are
//! sliced from the response as received, never re-encoded (DER re-encoding of a parsed value may
//! differ from what was signed).

use std::time::Duration;

use super::x509::X509;
use aws_lc_rs::digest::{digest, Algorithm, SHA1_FOR_LEGACY_USE_ONLY, SHA256};
use x509_cert::der::asn1::{AnyRef, BitStringRef, Null, OctetString};
use x509_cert::der::oid::db::{rfc5912, rfc6960};
use x509_cert::der::{Decode, Encode, Reader, SliceReader};
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::AlgorithmIdentifierOwned;
use x509_ocsp::{
    CertId, CertStatus, OcspResponse, OcspResponseStatus, Request, ResponseData, TbsRequest,
};

/// Clocks differ: a thisUpdate up to this far ahead is accepted.
const CLOCK_SKEW: i64 = 300;
/// The most of a responder's answer read.
const MAX_RESPONSE: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub(crate) enum OcspError {
    #[error("not an OCSP response: {0}")]
    Malformed(String),
    #[error("the responder answered {0}")]
    Unsuccessful(String),
    #[error("it is not for this certificate")]
    OtherCertificate,
    #[error("the certificate is revoked")]
    Revoked,
    #[error("the responder does not know the certificate")]
    Unknown,
    #[error("its signature is neither the issuer's nor a delegated responder's")]
    Signature,
    #[error("it is signed with an algorithm shuck does not accept (SHA-1 or unknown)")]
    SignatureAlgorithm,
    #[error("not valid yet (thisUpdate in the future)")]
    NotYetValid,
    #[error("expired (nextUpdate has passed)")]
    Expired,
    #[error("it has no nextUpdate, so nothing says how long it holds")]
    NoNextUpdate,
    #[error("the certificate cannot be read: {0}")]
    Certificate(String),
    #[error("fetching from {url}: {message}")]
    Fetch { url: String, message: String },
}

fn malformed(e: impl std::fmt::Display) -> OcspError {
    OcspError::Malformed(e.to_string())
}

/// A response that passed every check: what it says about time (Unix seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verified {
    pub this_update: i64,
    pub next_update: i64,
}

impl Verified {
    /// When to fetch a new one (Unix seconds), for a response fetched at `fetched`: half its
    /// validity later, but no sooner than 5 minutes and no later than an hour, and a minute
    /// before nextUpdate at the latest (a short-lived response is refreshed before it lapses).
    /// Counted from the fetch, not from thisUpdate: responders serve cached responses whose
    /// thisUpdate is hours old, and those must not be fetched again at once.
    pub(crate) fn due(&self, fetched: i64) -> i64 {
        let half = (self.next_update - self.this_update) / 2;
        (fetched + half.clamp(300, 3600)).min(self.next_update - 60)
    }
}

/// Where a fetched staple for `leaf` (DER) is kept: `<state_dir>/ocsp/<digest>.der`, the digest
/// the first 16 bytes of the certificate's SHA-256 in hex.
pub(crate) fn staple_path(state_dir: &std::path::Path, leaf: &[u8]) -> std::path::PathBuf {
    let d = digest(&SHA256, leaf);
    let name: String = d.as_ref()[..16].iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    });
    state_dir.join("ocsp").join(format!("{name}.der"))
}

/// Checks `response` (DER) for `leaf`, issued by `issuer` (both DER), at `now`.
pub(crate) fn verify(
    response: &[u8],
    leaf: &[u8],
    issuer: &[u8],
    now: i64,
) -> Result<Verified, OcspError> {
    let resp = OcspResponse::from_der(response).map_err(malformed)?;
    if resp.response_status != OcspResponseStatus::Successful {
        return Err(OcspError::Unsuccessful(format!(
            "{:?}",
            resp.response_status
        )));
    }
    let bytes = resp
        .response_bytes
        .ok_or_else(|| malformed("no response bytes"))?;
    if bytes.response_type != rfc6960::ID_PKIX_OCSP_BASIC {
        return Err(malformed("not a basic OCSP response"));
    }
    let signed = Signed::split(bytes.response.as_bytes()).map_err(malformed)?;
    let data = ResponseData::from_der(signed.tbs).map_err(malformed)?;
    let leaf_cert = parse(leaf)?;
    let issuer_cert = parse(issuer)?;
    let single = data
        .responses
        .iter()
        .find(|r| is_for(&r.cert_id, &leaf_cert, &issuer_cert))
        .ok_or(OcspError::OtherCertificate)?;
    match single.cert_status {
        CertStatus::Good(_) => {}
        CertStatus::Revoked(_) => return Err(OcspError::Revoked),
        CertStatus::Unknown(_) => return Err(OcspError::Unknown),
    }
    let seconds = |t: &x509_ocsp::OcspGeneralizedTime| {
        i64::try_from(t.0.to_unix_duration().as_secs()).unwrap_or(i64::MAX)
    };
    let this_update = seconds(&single.this_update);
    let next_update = single
        .next_update
        .as_ref()
        .map(seconds)
        .ok_or(OcspError::NoNextUpdate)?;
    if this_update > now + CLOCK_SKEW {
        return Err(OcspError::NotYetValid);
    }
    if next_update <= now {
        return Err(OcspError::Expired);
    }
    check_signer(&signed, issuer, now)?;
    Ok(Verified {
        this_update,
        next_update,
    })
}

fn parse(der: &[u8]) -> Result<X509, OcspError> {
    X509::parse(der).map_err(|e| OcspError::Certificate(e.to_string()))
}

/// Whether `id` names `leaf` as issued by `issuer` (SHA-1 or SHA-256 hashes, as the id says).
fn is_for(id: &CertId, leaf: &X509, issuer: &X509) -> bool {
    let alg: &'static Algorithm = if id.hash_algorithm.oid == rfc5912::ID_SHA_1 {
        &SHA1_FOR_LEGACY_USE_ONLY
    } else if id.hash_algorithm.oid == rfc5912::ID_SHA_256 {
        &SHA256
    } else {
        return false;
    };
    let name = digest(alg, issuer.subject_der());
    let key = digest(alg, issuer.public_key_bits());
    id.issuer_name_hash.as_bytes() == name.as_ref()
        && id.issuer_key_hash.as_bytes() == key.as_ref()
        && SerialNumber::new(leaf.serial()).is_ok_and(|s| s == id.serial_number)
}

/// A SIGNED{} structure as received: the signed bytes, the algorithm, the signature and (for a
/// basic OCSP response) the certificates that came with it.
struct Signed<'a> {
    tbs: &'a [u8],
    algorithm: &'a [u8],
    signature: &'a [u8],
    certs: Vec<&'a [u8]>,
}

impl<'a> Signed<'a> {
    fn split(der: &'a [u8]) -> x509_cert::der::Result<Signed<'a>> {
        let mut r = SliceReader::new(der)?;
        let signed = r.sequence(|s| {
            let tbs = s.tlv_bytes()?;
            let algorithm = AnyRef::decode(s)?.value();
            let signature = BitStringRef::decode(s)?
                .as_bytes()
                .ok_or_else(|| x509_cert::der::Tag::BitString.value_error())?;
            let mut certs = Vec::new();
            if !s.is_finished() {
                // [0] EXPLICIT SEQUENCE OF Certificate
                let wrapped = AnyRef::decode(s)?;
                SliceReader::new(wrapped.value())?.sequence(|q| {
                    while !q.is_finished() {
                        certs.push(q.tlv_bytes()?);
                    }
                    Ok(())
                })?;
            }
            Ok(Signed {
                tbs,
                algorithm,
                signature,
                certs,
            })
        })?;
        r.finish(signed)
    }
}

/// A certificate's public key: its algorithm identifier's contents and the key bytes.
fn public_key(cert_der: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let cert = parse(cert_der).ok()?;
    Some((cert.public_key_algorithm(), cert.public_key_bits().to_vec()))
}

/// Whether `signature` over `message` with `algorithm` verifies under the key of `signer_der`.
fn signed_by(signer_der: &[u8], algorithm: &[u8], message: &[u8], signature: &[u8]) -> bool {
    let Some((key_alg, key)) = public_key(signer_der) else {
        return false;
    };
    rustls::crypto::aws_lc_rs::default_provider()
        .signature_verification_algorithms
        .all
        .iter()
        .filter(|a| {
            a.signature_alg_id().as_ref() == algorithm && a.public_key_alg_id().as_ref() == key_alg
        })
        .any(|a| a.verify_signature(&key, message, signature).is_ok())
}

/// The response is signed by the issuer, or by a certificate that came with it, signed by the
/// issuer, valid now and with the OCSP-signing extended key usage (RFC 6960 §4.2.2.2).
fn check_signer(signed: &Signed<'_>, issuer: &[u8], now: i64) -> Result<(), OcspError> {
    let known = rustls::crypto::aws_lc_rs::default_provider()
        .signature_verification_algorithms
        .all
        .iter()
        .any(|a| a.signature_alg_id().as_ref() == signed.algorithm);
    if !known {
        return Err(OcspError::SignatureAlgorithm);
    }
    if signed_by(issuer, signed.algorithm, signed.tbs, signed.signature) {
        return Ok(());
    }
    for der in &signed.certs {
        if is_delegated_responder(der, issuer, now)
            && signed_by(der, signed.algorithm, signed.tbs, signed.signature)
        {
            return Ok(());
        }
    }
    Err(OcspError::Signature)
}

fn is_delegated_responder(der: &[u8], issuer: &[u8], now: i64) -> bool {
    let Ok(cert) = parse(der) else {
        return false;
    };
    let (not_before, not_after) = cert.validity();
    let valid = not_before <= now && now < not_after;
    cert.may_sign_ocsp()
        && valid
        && Signed::split(der).is_ok_and(|c| signed_by(issuer, c.algorithm, c.tbs, c.signature))
}

/// The request for `leaf`'s status (SHA-1 CertID, as responders universally expect; unsigned).
pub(crate) fn request(leaf: &[u8], issuer: &[u8]) -> Result<Vec<u8>, OcspError> {
    let leaf = parse(leaf)?;
    let issuer = parse(issuer)?;
    let alg = &SHA1_FOR_LEGACY_USE_ONLY;
    let octets = |bytes: &[u8]| OctetString::new(bytes).map_err(malformed);
    let cert_id = CertId {
        hash_algorithm: AlgorithmIdentifierOwned {
            oid: rfc5912::ID_SHA_1,
            parameters: Some(Null.into()),
        },
        issuer_name_hash: octets(digest(alg, issuer.subject_der()).as_ref())?,
        issuer_key_hash: octets(digest(alg, issuer.public_key_bits()).as_ref())?,
        serial_number: SerialNumber::new(leaf.serial()).map_err(malformed)?,
    };
    let tbs_request = TbsRequest {
        request_list: vec![Request {
            req_cert: cert_id,
            single_request_extensions: None,
        }],
        ..Default::default()
    };
    x509_ocsp::OcspRequest {
        tbs_request,
        optional_signature: None,
    }
    .to_der()
    .map_err(malformed)
}

/// The OCSP responder named in the certificate's Authority Information Access, if any.
pub(crate) fn responder_url(leaf: &[u8]) -> Option<String> {
    parse(leaf).ok()?.ocsp_url()
}

/// POSTs `request` to the responder at `url` (http://), within `timeout`.
pub(crate) async fn fetch(
    url: &str,
    request: Vec<u8>,
    timeout: Duration,
) -> Result<Vec<u8>, OcspError> {
    use http_body_util::{BodyExt, Full, Limited};
    let fail = |message: String| OcspError::Fetch {
        url: url.to_string(),
        message,
    };
    let uri: http::Uri = url.parse().map_err(|e| fail(format!("{e}")))?;
    if uri.scheme_str() != Some("http") {
        return Err(fail("only http:// responders are supported".into()));
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<bytes::Bytes>>();
    let req = http::Request::post(uri)
        .header("content-type", "application/ocsp-request")
        .body(Full::new(bytes::Bytes::from(request)))
        .map_err(|e| fail(e.to_string()))?;
    let exchange = async {
        let resp = client.request(req).await.map_err(|e| fail(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(fail(format!("HTTP {}", resp.status())));
        }
        let body = Limited::new(resp.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| fail(e.to_string()))?;
        Ok(body.to_bytes().to_vec())
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| fail(format!("no answer within {timeout:?}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_comes_halfway_within_five_minutes_and_an_hour_and_before_it_lapses() {
        let v = |this, next| Verified {
            this_update: this,
            next_update: next,
        };
        // A week-long response: an hour after it was fetched.
        assert_eq!(v(0, 7 * 86_400).due(0), 3600);
        // Made hours before it was fetched: still an hour after the fetch.
        assert_eq!(v(0, 7 * 86_400).due(20_000), 23_600);
        // A 20-minute one: halfway, 10 minutes.
        assert_eq!(v(0, 1200).due(0), 600);
        // A 7-minute one: 5 minutes at the soonest.
        assert_eq!(v(0, 420).due(0), 300);
        // A 2-minute one: a minute before it lapses.
        assert_eq!(v(0, 120).due(0), 60);
    }

    #[test]
    fn garbage_is_not_a_response() {
        let e = verify(b"not DER", &[], &[], 0).unwrap_err();
        assert!(matches!(e, OcspError::Malformed(_)), "{e}");
    }
}
