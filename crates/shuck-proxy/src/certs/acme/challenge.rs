//! TLS-ALPN-01 (RFC 8737): while an authorization is pending, a client that offers the
//! `acme-tls/1` protocol with one of the names gets a self-signed certificate for that name
//! carrying the key authorization's digest in the critical acmeIdentifier extension. The CA's
//! validator connects to the frontend's own listener; nothing reaches the backend.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use super::AcmeError;

/// The protocol a TLS-ALPN-01 validator offers, and only it.
pub(crate) const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

type Table = ArcSwap<HashMap<String, Arc<CertifiedKey>>>;

/// The challenge certificates of the process, by name: one value, owned by the engine
/// (`worker::Engine`), since the names a CA validates are the process's, whichever frontend
/// ordered them. Read without a lock, only by validators' handshakes.
#[derive(Debug, Default)]
pub(crate) struct Challenges {
    /// The challenges of this process's own orders being validated now: written by the order
    /// task.
    pending: Table,
    /// The challenges of orders another host of the fleet runs, fetched from the store by the
    /// validator's connection (`adopt`): replaced at every fetch, removed when the store has
    /// none, so one order's challenge never answers the next one's validation.
    fetched: Table,
    /// The HTTP-01 answers of this process's orders, for the plain-HTTP listener.
    pub(crate) http: Arc<super::http01::HttpAnswers>,
    /// The DNS-01 TSIG keys read at start.
    pub(crate) dns_keys: super::dns01::Keys,
    /// Validators' lookups of another host's challenge in a fleet's store running now.
    pub(crate) store_lookups: StoreLookups,
}

/// Store lookups for another host's TLS-ALPN-01 challenge that validators' handshakes may run
/// at once in the process: a flood of made-up challenges asks the fleet's store, which the
/// fleet's sessions share, for this many at most. (The plain-HTTP listeners' HTTP-01 lookups
/// have a budget of their own, so a flood on port 80 does not fail these validations.)
pub(crate) const MAX_STORE_LOOKUPS: usize = 16;

/// The slots of [`MAX_STORE_LOOKUPS`].
#[derive(Debug)]
pub(crate) struct StoreLookups(tokio::sync::Semaphore);

impl Default for StoreLookups {
    fn default() -> Self {
        StoreLookups(tokio::sync::Semaphore::new(MAX_STORE_LOOKUPS))
    }
}

impl StoreLookups {
    /// A slot for one lookup, held while the lookup runs; `None` when every slot is taken (the
    /// caller answers without the store).
    pub(crate) fn try_slot(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.0.try_acquire().ok()
    }
}

/// Whether `name` (an SNI, or the identifier of a CA's authorization) is one of `names`, the
/// names an order asks for: a validation, a store lookup or a challenge certificate is only
/// ever for those.
pub(crate) fn is_ordered(names: &[String], name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    names.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// Whether a ClientHello's ALPN list asks for the challenge.
pub(crate) fn wants_challenge(alpn: Option<impl Iterator<Item = impl AsRef<[u8]>>>) -> bool {
    alpn.is_some_and(|mut protocols| protocols.any(|p| p.as_ref() == ACME_TLS_ALPN))
}

impl Challenges {
    /// Serves `name`'s challenge for as long as the returned guard lives; the guard also holds
    /// the certificate and key as DER (`material`), for the fleet's store.
    pub(super) fn publish(
        self: &Arc<Self>,
        name: &str,
        digest: &[u8],
        provider: &CryptoProvider,
    ) -> Result<Published, AcmeError> {
        let name = name.to_ascii_lowercase();
        let material = challenge_material(&name, digest)?;
        let key = certified(&material, provider)?;
        self.pending.rcu(|table| {
            let mut t = HashMap::clone(table);
            t.insert(name.clone(), key.clone());
            t
        });
        Ok(Published {
            challenges: Arc::clone(self),
            name,
            key,
            material,
        })
    }

    /// Whether this process runs an order whose challenge is for `name`.
    pub(crate) fn is_pending(&self, name: &str) -> bool {
        self.pending.load().contains_key(&name.to_ascii_lowercase())
    }

    /// Answers `name`'s validation with `material` (another host's challenge, from the store),
    /// or with none when `material` is `None` or unusable.
    pub(crate) fn adopt(&self, name: &str, material: Option<&[u8]>, provider: &CryptoProvider) {
        let name = name.to_ascii_lowercase();
        let key = material
            .and_then(Material::decode)
            .and_then(|m| certified(&m, provider).ok());
        if key.is_none() && !self.fetched.load().contains_key(&name) {
            return;
        }
        self.fetched.rcu(|table| {
            let mut t = HashMap::clone(table);
            match &key {
                Some(k) => t.insert(name.clone(), k.clone()),
                None => t.remove(&name),
            };
            t
        });
    }

    /// The configuration validators' handshakes get: `acme-tls/1` only, the challenge
    /// certificates of `names` (the frontend's `acme.names`: another frontend's are not its to
    /// show; `None` for an on-demand frontend, whose names are any being ordered), no session
    /// resumption (RFC 8737 §4 forbids it for the challenge).
    pub(crate) fn server_config(
        self: &Arc<Self>,
        provider: CryptoProvider,
        names: Option<Vec<String>>,
    ) -> Result<Arc<ServerConfig>, rustls::Error> {
        let resolver = ChallengeResolver {
            challenges: Arc::clone(self),
            names,
        };
        let mut c = ServerConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        c.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
        c.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        c.send_tls13_tickets = 0;
        Ok(Arc::new(c))
    }
}

/// A challenge certificate and its key, as DER.
#[derive(Debug, Clone)]
pub(crate) struct Material {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Material {
    /// `len(cert) as u32 BE | cert | key`.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let len = u32::try_from(self.cert.len()).unwrap_or(u32::MAX);
        let mut out = len.to_be_bytes().to_vec();
        out.extend_from_slice(&self.cert);
        out.extend_from_slice(&self.key);
        out
    }

    fn decode(bytes: &[u8]) -> Option<Material> {
        let (len, rest) = bytes.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
        (rest.len() > len).then(|| Material {
            cert: rest[..len].to_vec(),
            key: rest[len..].to_vec(),
        })
    }
}

/// Withdraws its challenge when dropped (validated, failed, or the order given up), unless
/// another order for the name has published its own since.
#[derive(Debug)]
pub(super) struct Published {
    challenges: Arc<Challenges>,
    name: String,
    key: Arc<CertifiedKey>,
    material: Material,
}

impl Published {
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    pub(super) fn material(&self) -> &Material {
        &self.material
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        self.challenges.pending.rcu(|table| {
            let mut t = HashMap::clone(table);
            if t.get(&self.name).is_some_and(|k| Arc::ptr_eq(k, &self.key)) {
                t.remove(&self.name);
            }
            t
        });
    }
}

fn challenge_material(name: &str, digest: &[u8]) -> Result<Material, AcmeError> {
    let key_auth: [u8; 32] = digest
        .try_into()
        .map_err(|_| AcmeError::Challenge("the key authorization digest is not SHA-256".into()))?;
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()])?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.custom_extensions = vec![rcgen::CustomExtension::new_acme_identifier(&key_auth)];
    let key_pair = rcgen::KeyPair::generate()?;
    let cert = params.self_signed(&key_pair)?;
    Ok(Material {
        cert: cert.der().to_vec(),
        key: key_pair.serialize_der(),
    })
}

fn certified(m: &Material, provider: &CryptoProvider) -> Result<Arc<CertifiedKey>, AcmeError> {
    let key =
        PrivateKeyDer::try_from(m.key.clone()).map_err(|e| AcmeError::Challenge(e.to_string()))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| AcmeError::Challenge(e.to_string()))?;
    let chain: Vec<CertificateDer<'static>> = vec![CertificateDer::from(m.cert.clone())];
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// Finds the pending challenge for the ClientHello's SNI among one frontend's names; none
/// without SNI, for another name, or without a pending order.
#[derive(Debug)]
struct ChallengeResolver {
    challenges: Arc<Challenges>,
    names: Option<Vec<String>>,
}

impl ResolvesServerCert for ChallengeResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?;
        if self.names.as_ref().is_some_and(|n| !is_ordered(n, name)) {
            return None;
        }
        let name = name.to_ascii_lowercase();
        let found = |t: &Table| t.load().get(&name).cloned();
        found(&self.challenges.pending).or_else(|| found(&self.challenges.fetched))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use x509_cert::der::Decode;

    #[test]
    fn a_published_challenge_carries_the_digest_and_goes_away_when_dropped() {
        let provider = rustls::crypto::aws_lc_rs::default_provider();
        let digest = [7u8; 32];
        let challenges = Arc::new(Challenges::default());
        let published = challenges
            .publish("challenge.example", &digest, &provider)
            .expect("publish");
        let key = challenges
            .pending
            .load()
            .get("challenge.example")
            .cloned()
            .expect("pending");
        let cert = x509_cert::Certificate::from_der(&key.cert[0]).expect("x509");
        let ext = cert
            .tbs_certificate
            .extensions
            .iter()
            .flatten()
            .find(|e| e.extn_id.to_string() == "1.3.6.1.5.5.7.1.31")
            .expect("acmeIdentifier");
        assert!(ext.critical);
        // An OCTET STRING (tag 4, length 32) holding the digest.
        let value = ext.extn_value.as_bytes();
        assert_eq!(value[..2], [4, 32]);
        assert_eq!(&value[2..], &digest);
        drop(published);
        assert!(!challenges.is_pending("challenge.example"));
    }

    #[test]
    fn only_an_alpn_list_with_acme_tls_asks_for_the_challenge() {
        let list = |v: &'static [&'static [u8]]| Some(v.iter().copied());
        assert!(wants_challenge(list(&[b"acme-tls/1"])));
        assert!(wants_challenge(list(&[b"h2", b"acme-tls/1"])));
        assert!(!wants_challenge(list(&[b"h2", b"http/1.1"])));
        assert!(!wants_challenge(
            None::<std::iter::Copied<std::slice::Iter<'_, &[u8]>>>
        ));
    }

    #[test]
    fn only_the_names_ordered_are_validated_looked_up_or_shown() {
        let names = vec!["shop.example".to_string(), "www.shop.example".to_string()];
        assert!(is_ordered(&names, "shop.example"));
        assert!(is_ordered(&names, "WWW.Shop.Example."));
        for other in [
            "example",
            "evil.shop.example",
            "shop.example.evil",
            "*.shop.example",
            "",
        ] {
            assert!(!is_ordered(&names, other), "{other}");
        }
    }
}
