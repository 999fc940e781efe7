//! Signing with a token key: a pool of signer threads, each with its own session (a PKCS#11
//! session is one thread's at a time), fed through a bounded queue. A full queue refuses at
//! once (the handshake fails with an alert, rather than waiting behind a token that cannot
//! keep up); a token that stops answering fails the signatures asked of it after a bound.
//! Also `TokenSpeed`: the token's signatures per second and latency, for `shuck speed`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cryptoki::mechanism::rsa::{PkcsMgfType, PkcsPssParams};
use cryptoki::mechanism::{Mechanism, MechanismType};
use cryptoki::object::ObjectHandle;
use cryptoki::session::Session;
use rustls::pki_types::SubjectPublicKeyInfoDer;
use rustls::sign::{Signer, SigningKey};
use rustls::{SignatureAlgorithm, SignatureScheme};

use super::der;
use super::token::{KeyKind, Pkcs11Error, TokenKey};

/// How long a signature may take before the handshake waiting for it fails.
const SIGN_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a signature was not made.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("the signing queue is full ({0} waiting)")]
    QueueFull(usize),
    #[error("the token did not sign within {0:?}")]
    Timeout(Duration),
    #[error("no signer thread runs (the token could not be opened)")]
    NoSigner,
    #[error("the token refused to sign: {0}")]
    Token(String),
}

struct Job {
    scheme: SignatureScheme,
    message: Vec<u8>,
    reply: mpsc::Sender<Result<Vec<u8>, String>>,
}

/// Signer threads for one key, and the queue to them.
pub struct SignerPool {
    key: Arc<TokenKey>,
    queue: SyncSender<Job>,
    waiting: Arc<AtomicUsize>,
    capacity: usize,
}

impl std::fmt::Debug for SignerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignerPool({})", self.key.name())
    }
}

impl SignerPool {
    /// `threads` signer threads for `key`, each opening its session now (so a bad PIN or a
    /// missing object is an error here, not at the first handshake), and a queue of
    /// `capacity`.
    pub fn start(
        key: Arc<TokenKey>,
        threads: usize,
        capacity: usize,
    ) -> Result<Arc<SignerPool>, Pkcs11Error> {
        let (queue, jobs) = mpsc::sync_channel::<Job>(capacity);
        let jobs = Arc::new(Mutex::new(jobs));
        let waiting = Arc::new(AtomicUsize::new(0));
        for i in 0..threads.max(1) {
            let (session, handle) = key.session()?;
            let (jobs, waiting) = (jobs.clone(), waiting.clone());
            let kind = key.kind;
            std::thread::Builder::new()
                .name(format!("shuck-signer-{i}"))
                .spawn(move || serve(&session, handle, kind, &jobs, &waiting))
                .map_err(|e| Pkcs11Error::Unsupported {
                    uri: key.name(),
                    what: format!("cannot start a signer thread: {e}"),
                })?;
        }
        Ok(Arc::new(SignerPool {
            key,
            queue,
            waiting,
            capacity,
        }))
    }

    /// The key's signature of `message` under `scheme`, waiting for a signer thread.
    pub fn sign(&self, scheme: SignatureScheme, message: &[u8]) -> Result<Vec<u8>, SignError> {
        let (reply, answer) = mpsc::channel();
        let job = Job {
            scheme,
            message: message.to_vec(),
            reply,
        };
        self.waiting.fetch_add(1, Ordering::Relaxed);
        match self.queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.waiting.fetch_sub(1, Ordering::Relaxed);
                return Err(SignError::QueueFull(self.capacity));
            }
            Err(TrySendError::Disconnected(_)) => {
                self.waiting.fetch_sub(1, Ordering::Relaxed);
                return Err(SignError::NoSigner);
            }
        }
        match answer.recv_timeout(SIGN_TIMEOUT) {
            Ok(r) => r.map_err(SignError::Token),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(SignError::Timeout(SIGN_TIMEOUT)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(SignError::NoSigner),
        }
    }

    /// Signatures asked for and not answered yet.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// The key as rustls signs with it.
    pub fn signing_key(self: &Arc<Self>) -> Arc<dyn SigningKey> {
        Arc::new(TokenSigningKey { pool: self.clone() })
    }
}

/// A signer thread: one job at a time from the shared queue, until the pool is dropped.
fn serve(
    session: &Session,
    key: ObjectHandle,
    kind: KeyKind,
    jobs: &Mutex<Receiver<Job>>,
    waiting: &AtomicUsize,
) {
    loop {
        let job = {
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner);
            jobs.recv()
        };
        let Ok(job) = job else {
            return;
        };
        let signed = sign_with(session, key, kind, job.scheme, &job.message);
        waiting.fetch_sub(1, Ordering::Relaxed);
        // The asker may have given up (timed out): nothing to do then.
        let _ = job.reply.send(signed);
    }
}

/// One signature in `session`: the token hashes for RSA; for ECDSA shuck hashes (CKM_ECDSA is
/// the mechanism every token has) and puts the token's r‖s into DER.
fn sign_with(
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
fn schemes(kind: KeyKind) -> &'static [SignatureScheme] {
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

#[derive(Debug)]
struct TokenSigningKey {
    pool: Arc<SignerPool>,
}

impl SigningKey for TokenSigningKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let scheme = schemes(self.pool.key.kind)
            .iter()
            .find(|s| offered.contains(s))?;
        Some(Box::new(TokenSigner {
            pool: self.pool.clone(),
            scheme: *scheme,
        }))
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        Some(self.pool.key.public_key.clone())
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        match self.pool.key.kind {
            KeyKind::Rsa { .. } => SignatureAlgorithm::RSA,
            KeyKind::EcP256 | KeyKind::EcP384 => SignatureAlgorithm::ECDSA,
        }
    }
}

#[derive(Debug)]
struct TokenSigner {
    pool: Arc<SignerPool>,
    scheme: SignatureScheme,
}

impl Signer for TokenSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        self.pool
            .sign(self.scheme, message)
            .map_err(|e| rustls::Error::General(e.to_string()))
    }

    fn scheme(&self) -> SignatureScheme {
        self.scheme
    }
}

/// What `shuck speed` measured of a token key.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TokenSpeed {
    /// The key, its URI without the PIN.
    pub key: String,
    pub scheme: String,
    /// One session signing back to back.
    pub per_second_one_session: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// `sessions` sessions on as many threads at once.
    pub sessions: usize,
    pub per_second: f64,
}

impl TokenSpeed {
    /// Signs a TLS-sized message with `key` for `budget` in one session, then in `sessions`
    /// sessions at once.
    pub fn measure(
        key: &TokenKey,
        sessions: usize,
        budget: Duration,
    ) -> Result<TokenSpeed, Pkcs11Error> {
        let scheme = schemes(key.kind)[0];
        let message = [0x5au8; 130];
        let sign_err = |e: String| Pkcs11Error::Unsupported {
            uri: key.name(),
            what: format!("signing failed: {e}"),
        };
        let (session, handle) = key.session()?;
        let mut times = Vec::new();
        let start = Instant::now();
        while start.elapsed() < budget || times.is_empty() {
            let t = Instant::now();
            sign_with(&session, handle, key.kind, scheme, &message).map_err(sign_err)?;
            times.push(t.elapsed());
        }
        let one = times.len() as f64 / start.elapsed().as_secs_f64();
        times.sort();
        // The `per_mille`th of the sorted latencies.
        let at = |per_mille: usize| {
            let i = (times.len() - 1) * per_mille / 1000;
            u64::try_from(times[i].as_micros()).unwrap_or(u64::MAX)
        };
        let opened = (0..sessions.max(1))
            .map(|_| key.session())
            .collect::<Result<Vec<_>, _>>()?;
        let sessions = opened.len();
        let start = Instant::now();
        let counts: Vec<Result<usize, String>> = std::thread::scope(|s| {
            let kind = key.kind;
            let running: Vec<_> = opened
                .into_iter()
                .map(|(session, handle)| {
                    s.spawn(move || {
                        let mut n = 0;
                        while start.elapsed() < budget {
                            sign_with(&session, handle, kind, scheme, &message)?;
                            n += 1;
                        }
                        Ok(n)
                    })
                })
                .collect();
            running
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("a signer panicked".into())))
                .collect()
        });
        let mut total = 0;
        for c in counts {
            total += c.map_err(sign_err)?;
        }
        Ok(TokenSpeed {
            key: key.name(),
            scheme: format!("{scheme:?}"),
            per_second_one_session: one,
            p50_us: at(500),
            p99_us: at(990),
            sessions,
            per_second: total as f64 / start.elapsed().as_secs_f64(),
        })
    }
}
