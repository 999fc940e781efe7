//! What shuck reads from an X.509 certificate, on RustCrypto's `x509-cert` (the parser OCSP
//! needs anyway, so one parser serves both): names, validity, key size, signature algorithm,
//! the OCSP responder, the serial and the issuer's key.

use x509_cert::der::asn1::{AnyRef, Ia5StringRef, PrintableStringRef, UintRef, Utf8StringRef};
use x509_cert::der::oid::db::{rfc4519, rfc5280, rfc5912, rfc8410, DB};
use x509_cert::der::oid::ObjectIdentifier;
use x509_cert::der::{Decode, Encode, Reader, SliceReader};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{AuthorityInfoAccessSyntax, ExtendedKeyUsage, SubjectAltName};
use x509_cert::name::Name;
use x509_cert::Certificate;

/// A parsed certificate, with its issuer and subject names as the bytes they were encoded with:
/// OCSP hashes those and issuers are matched by them, and `der` re-encodes a name's sets in
/// sorted order, which may differ from a CA's bytes.
pub(crate) struct X509 {
    cert: Certificate,
    issuer_der: Vec<u8>,
    subject_der: Vec<u8>,
}

/// What the certificate's public key is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PublicKeyKind {
    Rsa { bits: usize },
    Ec { bits: usize },
    Other,
}

impl X509 {
    pub(crate) fn parse(der: &[u8]) -> Result<X509, x509_cert::der::Error> {
        let cert = Certificate::from_der(der)?;
        let (issuer_der, subject_der) = raw_names(der)?;
        Ok(X509 {
            cert,
            issuer_der,
            subject_der,
        })
    }

    fn tbs(&self) -> &x509_cert::TbsCertificate {
        &self.cert.tbs_certificate
    }

    /// The subject as the DER bytes it was encoded with (what issuer names are compared by and
    /// OCSP hashes).
    pub(crate) fn subject_der(&self) -> &[u8] {
        &self.subject_der
    }

    pub(crate) fn issuer_der(&self) -> &[u8] {
        &self.issuer_der
    }

    /// The subject as text (RFC 4514: `CN=a.test,O=Example`).
    pub(crate) fn subject(&self) -> String {
        self.tbs().subject.to_string()
    }

    pub(crate) fn issuer(&self) -> String {
        self.tbs().issuer.to_string()
    }

    /// The serial number's content bytes.
    pub(crate) fn serial(&self) -> &[u8] {
        self.tbs().serial_number.as_bytes()
    }

    /// The bits of the subject's public key (what OCSP's issuer key hash covers).
    pub(crate) fn public_key_bits(&self) -> &[u8] {
        self.tbs()
            .subject_public_key_info
            .subject_public_key
            .raw_bytes()
    }

    /// The contents of the public key's AlgorithmIdentifier (as rustls' verification algorithms
    /// name theirs).
    pub(crate) fn public_key_algorithm(&self) -> Vec<u8> {
        let der = self
            .tbs()
            .subject_public_key_info
            .algorithm
            .to_der()
            .unwrap_or_default();
        AnyRef::from_der(&der).map_or_else(|_| Vec::new(), |a| a.value().to_vec())
    }

    /// Validity as Unix seconds: (notBefore, notAfter).
    pub(crate) fn validity(&self) -> (i64, i64) {
        let v = &self.tbs().validity;
        let secs = |t: x509_cert::time::Time| {
            i64::try_from(t.to_unix_duration().as_secs()).unwrap_or(i64::MAX)
        };
        (secs(v.not_before), secs(v.not_after))
    }

    /// The DNS names of the subjectAltName, lower-cased.
    pub(crate) fn dns_names(&self) -> Vec<String> {
        let Ok(Some((_, san))) = self.tbs().get::<SubjectAltName>() else {
            return Vec::new();
        };
        san.0
            .iter()
            .filter_map(|n| match n {
                GeneralName::DnsName(d) => Some(d.as_str().to_ascii_lowercase()),
                _ => None,
            })
            .collect()
    }

    /// The subject's common names, in order.
    pub(crate) fn common_names(&self) -> Vec<String> {
        common_names(&self.tbs().subject)
    }

    /// The key's type and size: RSA from its modulus, EC from its named curve.
    pub(crate) fn public_key(&self) -> PublicKeyKind {
        let spki = &self.tbs().subject_public_key_info;
        if spki.algorithm.oid == rfc5912::RSA_ENCRYPTION {
            // A modulus that does not decode counts as 0 bits, which the size check refuses.
            let bits = rsa_modulus_bits(spki.subject_public_key.raw_bytes()).unwrap_or(0);
            return PublicKeyKind::Rsa { bits };
        }
        if spki.algorithm.oid == rfc5912::ID_EC_PUBLIC_KEY {
            let curve = spki
                .algorithm
                .parameters
                .as_ref()
                .and_then(|p| p.decode_as::<ObjectIdentifier>().ok());
            let bits = match curve {
                Some(c) if c == rfc5912::SECP_256_R_1 => 256,
                Some(c) if c == rfc5912::SECP_384_R_1 => 384,
                Some(c) if c == rfc5912::SECP_521_R_1 => 521,
                _ => 0,
            };
            return PublicKeyKind::Ec { bits };
        }
        PublicKeyKind::Other
    }

    /// The signature algorithm's name (`ecdsa-with-SHA256`, `sha256WithRSAEncryption`,
    /// `ed25519`), or its OID when it has none: what the PROXY v2 SSL TLV carries.
    pub(crate) fn signature_algorithm(&self) -> String {
        let oid = &self.cert.signature_algorithm.oid;
        // The names shuck sent before it read certificates with x509-cert (oid-registry's),
        // where const-oid's database differs, so backends see the same values.
        let kept = [
            (rfc8410::ID_ED_25519, "ed25519"),
            (rfc8410::ID_ED_448, "ed448"),
            (rfc5912::ID_RSASSA_PSS, "rsassa-pss"),
        ];
        if let Some((_, name)) = kept.iter().find(|(o, _)| o == oid) {
            return (*name).to_string();
        }
        DB.by_oid(oid)
            .map_or_else(|| oid.to_string(), str::to_string)
    }

    /// The OCSP responder named in the Authority Information Access, if any.
    pub(crate) fn ocsp_url(&self) -> Option<String> {
        let (_, aia) = self.tbs().get::<AuthorityInfoAccessSyntax>().ok()??;
        aia.0.iter().find_map(|ad| match &ad.access_location {
            GeneralName::UniformResourceIdentifier(u)
                if ad.access_method == rfc5280::ID_AD_OCSP =>
            {
                Some(u.as_str().to_string())
            }
            _ => None,
        })
    }

    /// The keyIdentifier of the Authority Key Identifier extension, if any (with the serial,
    /// what names a certificate to its CA's renewal information, RFC 9773).
    pub(crate) fn authority_key_id(&self) -> Option<Vec<u8>> {
        let (_, aki) = self
            .tbs()
            .get::<x509_cert::ext::pkix::AuthorityKeyIdentifier>()
            .ok()??;
        aki.key_identifier.map(|k| k.as_bytes().to_vec())
    }

    /// Whether the extended key usage allows signing OCSP responses.
    pub(crate) fn may_sign_ocsp(&self) -> bool {
        matches!(
            self.tbs().get::<ExtendedKeyUsage>(),
            Ok(Some((_, eku))) if eku.0.contains(&rfc5280::ID_KP_OCSP_SIGNING)
        )
    }
}

/// The issuer's and the subject's DER bytes as they appear in `der` (a Certificate).
fn raw_names(der: &[u8]) -> Result<(Vec<u8>, Vec<u8>), x509_cert::der::Error> {
    use x509_cert::der::{Tag, TagNumber};
    let mut reader = SliceReader::new(der)?;
    reader.sequence(|cert| {
        let names = cert.sequence(|tbs| {
            // version [0] EXPLICIT, when present; then serialNumber and signature.
            if tbs.peek_tag()?
                == (Tag::ContextSpecific {
                    constructed: true,
                    number: TagNumber::N0,
                })
            {
                tbs.tlv_bytes()?;
            }
            tbs.tlv_bytes()?;
            tbs.tlv_bytes()?;
            let issuer = tbs.tlv_bytes()?.to_vec();
            tbs.tlv_bytes()?; // validity
            let subject = tbs.tlv_bytes()?.to_vec();
            while !tbs.is_finished() {
                tbs.tlv_bytes()?;
            }
            Ok((issuer, subject))
        })?;
        while !cert.is_finished() {
            cert.tlv_bytes()?;
        }
        Ok(names)
    })
}

/// The common names of `name`, in order (UTF8String, PrintableString or IA5String values).
fn common_names(name: &Name) -> Vec<String> {
    name.0
        .iter()
        .flat_map(|rdn| rdn.0.iter())
        .filter(|atv| atv.oid == rfc4519::COMMON_NAME)
        .filter_map(|atv| {
            let v = &atv.value;
            v.decode_as::<Utf8StringRef<'_>>()
                .map(|s| s.as_str().to_string())
                .or_else(|_| {
                    v.decode_as::<PrintableStringRef<'_>>()
                        .map(|s| s.as_str().to_string())
                })
                .or_else(|_| {
                    v.decode_as::<Ia5StringRef<'_>>()
                        .map(|s| s.as_str().to_string())
                })
                .ok()
        })
        .collect()
}

/// The bit length of an RSAPublicKey's modulus (`SEQUENCE { modulus, publicExponent }`).
fn rsa_modulus_bits(key: &[u8]) -> Option<usize> {
    let mut reader = SliceReader::new(key).ok()?;
    let modulus = reader
        .sequence(|r| {
            let n = UintRef::decode(r)?;
            let _exponent = UintRef::decode(r)?;
            Ok(n.as_bytes().to_vec())
        })
        .ok()?;
    let first = *modulus.first()?;
    Some((modulus.len() - 1) * 8 + (8 - first.leading_zeros() as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issued(alg: &'static rcgen::SignatureAlgorithm) -> (Vec<u8>, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate_for(alg).expect("key");
        let mut params =
            rcgen::CertificateParams::new(vec!["A.Example".into(), "b.example".into()])
                .expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "leaf one");
        let cert = params.self_signed(&key).expect("cert");
        (cert.der().to_vec(), key)
    }

    #[test]
    fn names_keys_and_algorithms_are_read() {
        for (alg, kind, sig) in [
            (
                &rcgen::PKCS_ECDSA_P256_SHA256,
                PublicKeyKind::Ec { bits: 256 },
                "ecdsa-with-SHA256",
            ),
            (
                &rcgen::PKCS_ECDSA_P384_SHA384,
                PublicKeyKind::Ec { bits: 384 },
                "ecdsa-with-SHA384",
            ),
            (&rcgen::PKCS_ED25519, PublicKeyKind::Other, "ed25519"),
            (
                &rcgen::PKCS_RSA_SHA256,
                PublicKeyKind::Rsa { bits: 2048 },
                "sha256WithRSAEncryption",
            ),
        ] {
            let (der, _key) = issued(alg);
            let c = X509::parse(&der).expect("parse");
            assert_eq!(c.dns_names(), ["a.example", "b.example"]);
            assert_eq!(c.common_names(), ["leaf one"]);
            assert_eq!(c.public_key(), kind, "{sig}");
            assert_eq!(c.signature_algorithm(), sig);
            assert!(c.subject().contains("CN=leaf one"), "{}", c.subject());
            assert_eq!(c.subject_der(), c.issuer_der(), "self-signed");
            // The raw bytes are the name's encoding (rcgen writes DER, so they agree here).
            assert_eq!(c.subject_der(), c.tbs().subject.to_der().unwrap());
            let (from, to) = c.validity();
            assert!(from < to);
            assert!(c.ocsp_url().is_none());
            assert!(!c.may_sign_ocsp());
        }
        assert!(X509::parse(b"not a certificate").is_err());
    }
}
