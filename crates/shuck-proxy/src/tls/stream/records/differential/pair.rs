//! Two TLS 1.3 server connections with the same traffic keys: each finishes a handshake in
//! memory with its own rustls client, and every input of the handshake is fixed, so both
//! transcripts, and the keys derived from them, are byte for byte the same. Fixed are the
//! random bytes (a provider whose `SecureRandom` always gives the same), the key exchange
//! (X25519 with a constant private key) and the signature (Ed25519, which is deterministic,
//! under one certificate made once). Nothing of this is safe outside a test.

use std::sync::{Arc, Mutex, OnceLock};

use aws_lc_rs::agreement::{self, PrivateKey, UnparsedPublicKey, X25519};
use rustls::client::ClientConnection;
use rustls::crypto::{
    ActiveKeyExchange, CryptoProvider, GetRandomFailed, SecureRandom, SharedSecret,
    SupportedKxGroup,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::server::{ClientHello, ResolvesServerCert, UnbufferedServerConnection};
use rustls::sign::CertifiedKey;
use rustls::unbuffered::ConnectionState;
use rustls::{CipherSuite, ClientConfig, Error, KeyLog, NamedGroup, RootCertStore, ServerConfig};

/// "Random" bytes that are always the same.
#[derive(Debug)]
struct Fixed;

impl SecureRandom for Fixed {
    fn fill(&self, buf: &mut [u8]) -> Result<(), GetRandomFailed> {
        buf.fill(0x5a);
        Ok(())
    }
}

/// X25519 with one private key, for both sides.
#[derive(Debug)]
struct FixedX25519;

struct FixedShare {
    private: PrivateKey,
    public: Vec<u8>,
}

impl SupportedKxGroup for FixedX25519 {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, Error> {
        let private = PrivateKey::from_private_key(&X25519, &[7; 32])
            .map_err(|_| Error::General("X25519 key".into()))?;
        let public = private
            .compute_public_key()
            .map_err(|_| Error::General("X25519 public key".into()))?
            .as_ref()
            .to_vec();
        Ok(Box::new(FixedShare { private, public }))
    }

    fn name(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

impl ActiveKeyExchange for FixedShare {
    fn complete(self: Box<Self>, peer: &[u8]) -> Result<SharedSecret, Error> {
        agreement::agree(
            &self.private,
            UnparsedPublicKey::new(&X25519, peer),
            Error::General("X25519 agreement".into()),
            |secret| Ok(SharedSecret::from(secret)),
        )
    }

    fn pub_key(&self) -> &[u8] {
        &self.public
    }

    fn group(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

static FIXED: Fixed = Fixed;
static FIXED_X25519: FixedX25519 = FixedX25519;

fn provider(suite: CipherSuite) -> CryptoProvider {
    let mut provider = rustls::crypto::aws_lc_rs::default_provider();
    provider.cipher_suites.retain(|s| s.suite() == suite);
    provider.kx_groups = vec![&FIXED_X25519];
    provider.secure_random = &FIXED;
    provider
}

/// One Ed25519 certificate and key for every handshake of the process.
fn certificate() -> &'static (CertificateDer<'static>, PrivatePkcs8KeyDer<'static>) {
    static MADE: OnceLock<(CertificateDer<'static>, PrivatePkcs8KeyDer<'static>)> = OnceLock::new();
    MADE.get_or_init(|| {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("Ed25519 key");
        let params = rcgen::CertificateParams::new(vec!["localhost".into()]).expect("names");
        let cert = params.self_signed(&key).expect("certificate");
        (
            cert.der().clone(),
            PrivatePkcs8KeyDer::from(key.serialize_der()),
        )
    })
}

#[derive(Debug)]
struct One(Arc<CertifiedKey>);

impl ResolvesServerCert for One {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The client's and the server's first application traffic secrets, from the key log.
#[derive(Debug, Default)]
struct Secrets(Mutex<(Vec<u8>, Vec<u8>)>);

impl KeyLog for Secrets {
    fn log(&self, label: &str, _: &[u8], secret: &[u8]) {
        let mut s = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match label {
            "CLIENT_TRAFFIC_SECRET_0" => s.0 = secret.to_vec(),
            "SERVER_TRAFFIC_SECRET_0" => s.1 = secret.to_vec(),
            _ => {}
        }
    }

    fn will_log(&self, _: &str) -> bool {
        true
    }
}

/// A server connection done with its handshake, and the traffic secrets it agreed.
pub(super) struct Handshaken {
    pub(super) server: UnbufferedServerConnection,
    pub(super) client_secret: Vec<u8>,
    pub(super) server_secret: Vec<u8>,
}

fn configs(suite: CipherSuite, log: Arc<Secrets>) -> (ServerConfig, ClientConfig) {
    let provider = Arc::new(provider(suite));
    let (cert, key) = certificate();
    let signing = provider
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(key.clone_key()))
        .expect("Ed25519 signing key");
    let certified = Arc::new(CertifiedKey::new(vec![cert.clone()], signing));
    let mut server = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(One(certified)));
    server.enable_secret_extraction = true;
    server.send_tls13_tickets = 0;
    let mut roots = RootCertStore::empty();
    roots.add(cert.clone()).expect("root");
    let mut client = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.key_log = log;
    (server, client)
}

/// A TLS 1.3 handshake with `suite`, all in memory and always the same.
pub(super) fn handshake(suite: CipherSuite) -> Handshaken {
    let log = Arc::new(Secrets::default());
    let (server, client) = configs(suite, log.clone());
    let name = ServerName::try_from("localhost").expect("name");
    let mut client = ClientConnection::new(Arc::new(client), name).expect("client");
    let mut server = UnbufferedServerConnection::new(Arc::new(server)).expect("server");
    let mut to_server = Vec::new();
    for _ in 0..10 {
        client.write_tls(&mut to_server).expect("client flight");
        let mut to_client = Vec::new();
        let done = serve(&mut server, &mut to_server, &mut to_client);
        client.read_tls(&mut &to_client[..]).expect("read");
        client.process_new_packets().expect("client handshake");
        if done && !client.is_handshaking() && to_server.is_empty() {
            let (client_secret, server_secret) = std::mem::take(
                &mut *log
                    .0
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
            return Handshaken {
                server,
                client_secret,
                server_secret,
            };
        }
    }
    panic!("no handshake");
}

/// Runs the server over what it received; whether its handshake is done. (Also the
/// handshake of `records::tests`.)
pub(in crate::tls::stream::records) fn serve(
    server: &mut UnbufferedServerConnection,
    received: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> bool {
    loop {
        let status = server.process_tls_records(received);
        let discard = status.discard;
        let done = match status.state.expect("server handshake") {
            ConnectionState::EncodeTlsData(mut d) => {
                let mut buf = vec![0; 16 * 1024];
                let n = d.encode(&mut buf).expect("encode");
                out.extend_from_slice(&buf[..n]);
                None
            }
            ConnectionState::TransmitTlsData(t) => {
                t.done();
                None
            }
            ConnectionState::WriteTraffic(_) => Some(true),
            ConnectionState::BlockedHandshake => Some(false),
            _ => panic!("unexpected state in the handshake"),
        };
        received.drain(..discard);
        if let Some(done) = done {
            return done;
        }
    }
}
