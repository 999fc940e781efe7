//! One signature with a token key in a session, and what TLS needs around it: the mechanism for
//! each signature scheme, ECDSA's r‖s put into DER, and the check that a key pair belongs
//! together.

use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::ObjectHandle;
use cryptoki::session::Session;
use rustls::pki_types::SubjectPublicKeyInfoDer;
use rustls::SignatureScheme;

use super::der;

/// The key's algorithm, as far as TLS cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Rsa { bits: usize },
    EcP256,
    EcP384,
}

/// Signs once with `handle` in `session` and checks the signature under `public_key`,
/// as read from the token: a public key object that is not the private key's other half would
/// otherwise be found only by every client refusing the handshakes.
pub(super) fn check_pair(
    (kind, public_key): (KeyKind, &SubjectPublicKeyInfoDer<'_>),
    session: &Session,
    handle: ObjectHandle,
) -> Result<(), String> {
    let scheme = schemes(kind)[0];
    let message = b"shuck checks that the token's key pair belongs together";
    let signature = sign_with(session, handle, kind, scheme, message)
        .map_err(|e| format!("the key cannot sign: {e}"))?;
    let public = der::spki_bits(public_key.as_ref()).ok_or("unreadable public key")?;
    let algs = rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms;
    let verifiers = algs
        .mapping
        .iter()
        .find(|(s, _)| *s == scheme)
        .map(|(_, v)| *v)
        .unwrap_or_default();
    if verifiers
        .iter()
        .any(|v| v.verify_signature(public, message, &signature).is_ok())
    {
        Ok(())
    } else {
        Err("the public key beside the private key in the token is not its pair".into())
    }
}

/// One signature in `session`: the token hashes for RSA; for ECDSA shuck hashes (CKM_ECDSA is
/// the mechanism every token has) and puts the token's r‖s into DER.
pub(super) fn sign_with(
    session: &Session,
    key: ObjectHandle,
    kind: KeyKind,
    scheme: SignatureScheme,
    message: &[u8],
) -> Result<Vec<u8>, String> {
    use aws_lc_rs::digest;
    let pss = |hash_alg, mgf, s_len: u64| PkcsPssParams {
        hash_alg,
        mgf,
        s_len: s_len.into(),
    };
    let signed = match (kind, scheme) {
        (KeyKind::Rsa { .. }, SignatureScheme::RSA_PKCS1_SHA256) => {
            session.sign(&Mechanism::Sha256RsaPkcs, key, message)
        }
        (KeyKind::Rsa { .. }, SignatureScheme::RSA_PKCS1_SHA384) => {
            session.sign(&Mechanism::Sha384RsaPkcs, key, message)
        }
        (KeyKind::Rsa { .. }, SignatureScheme::RSA_PSS_SHA256) => session.sign(
            &Mechanism::Sha256RsaPkcsPss(pss(MechanismType::SHA256, PkcsMgfType::MGF1_SHA256, 32)),
            key,
            message,
        ),
        (KeyKind::Rsa { .. }, SignatureScheme::RSA_PSS_SHA384) => session.sign(
            &Mechanism::Sha384RsaPkcsPss(pss(MechanismType::SHA384, PkcsMgfType::MGF1_SHA384, 48)),
            key,
            message,
        ),
        (KeyKind::EcP256, SignatureScheme::ECDSA_NISTP256_SHA256) => {
            let hash = digest::digest(&digest::SHA256, message);
            return ecdsa(session.sign(&Mechanism::Ecdsa, key, hash.as_ref()));
        }
        (KeyKind::EcP384, SignatureScheme::ECDSA_NISTP384_SHA384) => {
            let hash = digest::digest(&digest::SHA384, message);
            return ecdsa(session.sign(&Mechanism::Ecdsa, key, hash.as_ref()));
        }
        (kind, scheme) => return Err(format!("{scheme:?} is not made with a {kind:?} key")),
    };
    signed.map_err(|e| e.to_string())
}

fn ecdsa(raw: cryptoki::error::Result<Vec<u8>>) -> Result<Vec<u8>, String> {
    let raw = raw.map_err(|e| e.to_string())?;
    der::ecdsa_signature(&raw).ok_or_else(|| "the token's ECDSA signature is malformed".into())
}

/// The schemes a key of `kind` signs, in shuck's order of preference.
pub(super) fn schemes(kind: KeyKind) -> &'static [SignatureScheme] {
    match kind {
        KeyKind::Rsa { .. } => &[
            SignatureScheme::RSA_PSS_SHA256,
            SignatureScheme::RSA_PSS_SHA384,
            SignatureScheme::RSA_PKCS1_SHA256,
            SignatureScheme::RSA_PKCS1_SHA384,
        ],
        KeyKind::EcP256 => &[SignatureScheme::ECDSA_NISTP256_SHA256],
        KeyKind::EcP384 => &[SignatureScheme::ECDSA_NISTP384_SHA384],
    }
}
