//! The test PKI: a CA generated at test time, leaf and client bundles signed by it (ECDSA, RSA,
//! Ed25519, via an intermediate, with known serials for CRLs), and a rustls client that trusts it.
//!
//! Self-contained (rcgen, rustls, tempfile, time), so every crate's tests share this one file:
//! the engine's in-process tests here, and crates/shuck and crates/shuck-bench by `#[path]`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SignatureAlgorithm};

/// A CA and leaf bundles signed by it, written into a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    ca_key: KeyPair,
    ca_params: CertificateParams,
    ca: rcgen::Certificate,
}

#[derive(Clone, Copy)]
pub enum Key {
    EcdsaP256,
    EcdsaP384,
    Rsa2048,
    Ed25519,
}

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}

impl Pki {
    pub fn new() -> Pki {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca_key = KeyPair::generate().expect("CA key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(DnType::CommonName, "shuck test CA");
        let ca = p.self_signed(&ca_key).expect("CA cert");
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).expect("write CA");
        Pki {
            dir,
            ca_key,
            ca_params: p,
            ca,
        }
    }

    /// What signs as this CA.
    fn issuer(&self) -> rcgen::Issuer<'_, &KeyPair> {
        rcgen::Issuer::from_params(&self.ca_params, &self.ca_key)
    }

    pub fn ca_path(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes `<file>`: the leaf, this CA, the leaf's key (the bundle shuck reads).
    fn write_bundle(&self, file: &str, cert: &rcgen::Certificate, kp: &KeyPair) -> PathBuf {
        let path = self.path(file);
        std::fs::write(
            &path,
            format!("{}{}{}", cert.pem(), self.ca.pem(), kp.serialize_pem()),
        )
        .expect("write bundle");
        path
    }

    /// Writes `<file>` holding leaf, CA, key; the leaf's CN is `cn`, its SANs `names`.
    pub fn leaf(&self, file: &str, cn: &str, names: &[&str], key: Key) -> PathBuf {
        self.leaf_with_serial(file, cn, names, key, None)
    }

    /// Writes `<file>` holding a leaf for a key held elsewhere (a PKCS#11 token), given by its
    /// SubjectPublicKeyInfo in DER, and this CA: the chain alone, no key. ECDSA P-256, P-384 or RSA.
    pub fn leaf_for_public_key(&self, file: &str, names: &[&str], spki: &[u8]) -> PathBuf {
        let key = ForeignKey::from_spki(spki);
        let mut p =
            CertificateParams::new(names.iter().map(|s| (*s).to_string()).collect::<Vec<_>>())
                .expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, names[0]);
        let cert = p.signed_by(&key, &self.issuer()).expect("sign leaf");
        let path = self.path(file);
        std::fs::write(&path, format!("{}{}", cert.pem(), self.ca.pem())).expect("write chain");
        path
    }

    /// A client certificate (no names) with a known serial number, for CRL tests.
    pub fn client(&self, file: &str, cn: &str, serial: u64) -> PathBuf {
        self.leaf_with_serial(file, cn, &[], Key::EcdsaP256, Some(serial))
    }

    /// A PEM CRL, signed by the CA, revoking `serials`.
    pub fn crl(&self, file: &str, serials: &[u64]) -> PathBuf {
        let now = time::OffsetDateTime::now_utc();
        let crl = rcgen::CertificateRevocationListParams {
            this_update: now - time::Duration::hours(1),
            next_update: now + time::Duration::days(1),
            crl_number: rcgen::SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|s| rcgen::RevokedCertParams {
                    serial_number: rcgen::SerialNumber::from(*s),
                    revocation_time: now - time::Duration::minutes(5),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        }
        .signed_by(&self.issuer())
        .expect("sign CRL");
        let path = self.path(file);
        std::fs::write(&path, crl.pem().expect("CRL PEM")).expect("write CRL");
        path
    }

    fn leaf_with_serial(
        &self,
        file: &str,
        cn: &str,
        names: &[&str],
        key: Key,
        serial: Option<u64>,
    ) -> PathBuf {
        let alg: &'static SignatureAlgorithm = match key {
            Key::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            Key::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            Key::Rsa2048 => &rcgen::PKCS_RSA_SHA256,
            Key::Ed25519 => &rcgen::PKCS_ED25519,
        };
        let kp = KeyPair::generate_for(alg).expect("leaf key");
        let mut p =
            CertificateParams::new(names.iter().map(|s| (*s).to_string()).collect::<Vec<_>>())
                .expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, cn);
        p.serial_number = serial.map(rcgen::SerialNumber::from);
        let cert = p.signed_by(&kp, &self.issuer()).expect("sign leaf");
        self.write_bundle(file, &cert, &kp)
    }

    /// A client certificate issued by an intermediate CA (serial `intermediate_serial`, signed
    /// by this CA); the bundle holds leaf, intermediate and key, as a client sends them.
    pub fn client_via_intermediate(
        &self,
        file: &str,
        cn: &str,
        intermediate_serial: u64,
    ) -> PathBuf {
        let ik = KeyPair::generate().expect("intermediate key");
        let mut ip = CertificateParams::new(Vec::<String>::new()).expect("intermediate params");
        ip.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ip.distinguished_name.push(
            DnType::CommonName,
            format!("intermediate {intermediate_serial}"),
        );
        ip.serial_number = Some(rcgen::SerialNumber::from(intermediate_serial));
        let inter = ip
            .signed_by(&ik, &self.issuer())
            .expect("sign intermediate");
        let inter_issuer = rcgen::Issuer::from_params(&ip, &ik);
        let kp = KeyPair::generate().expect("leaf key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, cn);
        let leaf = p.signed_by(&kp, &inter_issuer).expect("sign leaf");
        let path = self.path(file);
        std::fs::write(
            &path,
            format!("{}{}{}", leaf.pem(), inter.pem(), kp.serialize_pem()),
        )
        .expect("write bundle");
        path
    }

    /// A leaf bundle (ECDSA) that expires `days` days from now (its not-after, Unix seconds).
    pub fn leaf_expiring(&self, file: &str, names: &[&str], days: i64) -> (PathBuf, i64) {
        let kp = KeyPair::generate().expect("leaf key");
        let mut p =
            CertificateParams::new(names.iter().map(|s| (*s).to_string()).collect::<Vec<_>>())
                .expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, names[0]);
        let now = time::OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .expect("ns");
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(days);
        let not_after = p.not_after.unix_timestamp();
        let cert = p.signed_by(&kp, &self.issuer()).expect("sign leaf");
        let path = self.write_bundle(file, &cert, &kp);
        (path, not_after)
    }

    /// A delegated OCSP responder: a certificate this CA signs with the OCSP-signing extended key
    /// usage, as `<name>.pem` and `<name>.key`.
    pub fn ocsp_responder(&self, name: &str) -> (PathBuf, PathBuf) {
        let kp = KeyPair::generate().expect("responder key");
        let mut p = CertificateParams::new(Vec::<String>::new()).expect("responder params");
        p.distinguished_name
            .push(DnType::CommonName, format!("OCSP responder {name}"));
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::OcspSigning];
        let cert = p.signed_by(&kp, &self.issuer()).expect("sign responder");
        let (c, k) = (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).expect("write responder");
        std::fs::write(&k, kp.serialize_pem()).expect("write responder key");
        (c, k)
    }

    /// The CA's key, written as PEM (for `openssl ocsp -rkey`).
    pub fn ca_key_path(&self) -> PathBuf {
        let path = self.path("ca.key");
        std::fs::write(&path, self.ca_key.serialize_pem()).expect("write CA key");
        path
    }

    /// A leaf bundle (leaf, CA, key) with serial `serial` whose Authority Information Access
    /// names the OCSP responder at `ocsp_url`.
    pub fn leaf_with_ocsp(
        &self,
        file: &str,
        names: &[&str],
        serial: u64,
        ocsp_url: &str,
    ) -> PathBuf {
        let kp = KeyPair::generate().expect("leaf key");
        let mut p =
            CertificateParams::new(names.iter().map(|s| (*s).to_string()).collect::<Vec<_>>())
                .expect("leaf params");
        p.distinguished_name.push(DnType::CommonName, names[0]);
        p.serial_number = Some(rcgen::SerialNumber::from(serial));
        // AuthorityInfoAccess ::= SEQUENCE OF SEQUENCE { id-ad-ocsp, [6] IA5String URI }
        let ocsp_oid = [0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x30, 0x01];
        let uri = ocsp_url.as_bytes();
        let mut access = ocsp_oid.to_vec();
        access.push(0x86);
        access.push(u8::try_from(uri.len()).expect("short URL"));
        access.extend_from_slice(uri);
        let mut description = vec![0x30, u8::try_from(access.len()).expect("short")];
        description.extend(access);
        let mut aia = vec![0x30, u8::try_from(description.len()).expect("short")];
        aia.extend(description);
        p.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 5, 5, 7, 1, 1],
            aia,
        )];
        let cert = p.signed_by(&kp, &self.issuer()).expect("sign leaf");
        self.write_bundle(file, &cert, &kp)
    }

    /// A bundle whose key does not belong to its certificate.
    pub fn mismatched(&self, file: &str) -> PathBuf {
        let kp = KeyPair::generate().expect("key");
        let other = KeyPair::generate().expect("key");
        let cert = CertificateParams::new(vec!["mismatch.test".to_string()])
            .expect("params")
            .signed_by(&kp, &self.issuer())
            .expect("sign");
        let path = self.path(file);
        std::fs::write(&path, format!("{}{}", cert.pem(), other.serialize_pem())).expect("write");
        path
    }
}

pub fn toml_path(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// A rustls client trusting the test CA.
pub fn connector(pki: &Pki) -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(Arc::new(client_config(pki)))
}

/// The client configuration `connector` uses: trusts the test CA, safe defaults.
pub fn client_config(pki: &Pki) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(pki.ca_path()).expect("ca");
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        let c: rustls::pki_types::CertificateDer<'static> = c.expect("pem");
        roots.add(c).expect("root");
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth()
}

/// A public key whose private half rcgen never sees: the subjectPublicKey bits of a
/// SubjectPublicKeyInfo and its algorithm.
struct ForeignKey {
    bits: Vec<u8>,
    alg: &'static SignatureAlgorithm,
}

impl ForeignKey {
    fn from_spki(spki: &[u8]) -> ForeignKey {
        const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
        const P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];
        /// The contents of the DER element at the start of `der`, and what follows it.
        fn take(der: &[u8]) -> (&[u8], &[u8]) {
            let (len, head) = match der[1] {
                n if n < 0x80 => (usize::from(n), 2),
                0x81 => (usize::from(der[2]), 3),
                0x82 => ((usize::from(der[2]) << 8) | usize::from(der[3]), 4),
                other => panic!("DER length form {other:#x}"),
            };
            (&der[head..head + len], &der[head + len..])
        }
        let (body, _) = take(spki);
        let (alg, rest) = take(body);
        let (bits, _) = take(rest);
        // rsaEncryption, secp384r1; anything else here is taken for EC P-256.
        let has = |oid: &[u8]| alg.windows(oid.len()).any(|w| w == oid);
        let alg: &'static SignatureAlgorithm = if has(RSA) {
            &rcgen::PKCS_RSA_SHA256
        } else if has(P384) {
            &rcgen::PKCS_ECDSA_P384_SHA384
        } else {
            &rcgen::PKCS_ECDSA_P256_SHA256
        };
        ForeignKey {
            bits: bits[1..].to_vec(),
            alg,
        }
    }
}

impl rcgen::PublicKeyData for ForeignKey {
    fn der_bytes(&self) -> &[u8] {
        &self.bits
    }

    fn algorithm(&self) -> &'static SignatureAlgorithm {
        self.alg
    }
}
