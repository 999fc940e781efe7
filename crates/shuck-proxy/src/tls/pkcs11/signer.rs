//! Signing with a token key: a pool of signer threads, each with its own session (a PKCS#11
//! session is one thread's at a time), fed through a bounded queue. A full queue refuses at
//! once (the handshake fails with an alert, rather than waiting behind a token that cannot
//! keep up); a token that stops answering fails the signatures asked of it after a bound.
//! Also `TokenSpeed`: the token's signatures per second and latency, for `shuck speed`.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cryptoki::object::ObjectHandle;
use cryptoki::session::Session;
use rustls::pki_types::SubjectPublicKeyInfoDer;
use rustls::sign::{Signer, SigningKey};
use rustls::{SignatureAlgorithm, SignatureScheme};

use super::sign::{schemes, sign_with, KeyKind};
use super::token::{Pkcs11Error, TokenKey};

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
    /// When the asker gives up: a job still queued then is not signed (the token's time goes
    /// to the handshakes still waiting).
    deadline: Instant,
}

/// Signer threads for one key, and the queue to them.
pub struct SignerPool {
    key: Arc<TokenKey>,
    queue: SyncSender<Job>,
    stats: Arc<SignStats>,
    capacity: usize,
}

impl std::fmt::Debug for SignerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SignerPool({})", self.key.name())
    }
}

/// What became of the signatures asked of one key (by its URI without the PIN), for the
/// metrics: shared by every pool of that key (a reload makes a new one while the old one
/// finishes), kept for the process's life (the keys configured are few).
#[derive(Debug)]
pub struct SignStats {
    /// The key's URI, without its PIN.
    pub key: String,
    /// By `SignResult`, in its order.
    pub results: [AtomicU64; 4],
    /// Asked and not answered yet, across its pools.
    pub waiting: AtomicUsize,
    /// Seconds from the ask to the answer, for signatures made.
    pub latency: prometheus_client::metrics::histogram::Histogram,
    failing: AtomicBool,
}

/// What a signature came to, as the metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignResult {
    Ok = 0,
    Failed = 1,
    QueueFull = 2,
    Timeout = 3,
}

impl SignResult {
    pub const ALL: [SignResult; 4] = [
        SignResult::Ok,
        SignResult::Failed,
        SignResult::QueueFull,
        SignResult::Timeout,
    ];

    pub fn label(self) -> &'static str {
        match self {
            SignResult::Ok => "ok",
            SignResult::Failed => "failed",
            SignResult::QueueFull => "queue_full",
            SignResult::Timeout => "timeout",
        }
    }
}

impl SignStats {
    fn count(&self, r: SignResult) {
        self.results[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// One line when the key starts failing and one when it signs again, however many
    /// handshakes between.
    fn note(&self, outcome: &Result<Vec<u8>, SignError>) {
        match outcome {
            Ok(_) => {
                if self.failing.load(Ordering::Relaxed)
                    && self.failing.swap(false, Ordering::Relaxed)
                {
                    tracing::info!(key = %self.key, "the token key signs again");
                }
            }
            // A full queue is load, not a fault of the token.
            Err(SignError::QueueFull(_)) => {}
            Err(e) => {
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(key = %self.key, error = %e, "the token key fails to sign; said again once it signs");
                }
            }
        }
    }
}

/// Every key's stats, by URI.
fn stats_of(key: &str) -> Arc<SignStats> {
    let mut all = registry().lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(s) = all.iter().find(|s| s.key == key) {
        return s.clone();
    }
    let s = Arc::new(SignStats {
        key: key.to_string(),
        results: Default::default(),
        waiting: AtomicUsize::new(0),
        latency: prometheus_client::metrics::histogram::Histogram::new([
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
        ]),
        failing: AtomicBool::new(false),
    });
    all.push(s.clone());
    s
}

fn registry() -> &'static Mutex<Vec<Arc<SignStats>>> {
    static ALL: std::sync::OnceLock<Mutex<Vec<Arc<SignStats>>>> = std::sync::OnceLock::new();
    ALL.get_or_init(Mutex::default)
}

/// The stats of every token key this process has used, for `/metrics`.
pub fn all_stats() -> Vec<Arc<SignStats>> {
    registry()
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

impl SignerPool {
    /// `threads` signer threads for `key`, each opening its session now (so a bad PIN or a
    /// missing object is an error here, not at the first handshake), and a queue of
    /// `capacity`. The threads end once the pool is dropped.
    pub fn start(
        key: Arc<TokenKey>,
        threads: usize,
        capacity: usize,
    ) -> Result<Arc<SignerPool>, Pkcs11Error> {
        let (queue, jobs) = mpsc::sync_channel::<Job>(capacity);
        let jobs = Arc::new(Mutex::new(jobs));
        // Once the token refuses the PIN, no thread of the pool tries it again.
        let pin_refused = Arc::new(AtomicBool::new(false));
        let stats = stats_of(&key.name());
        for i in 0..threads.max(1) {
            let session = key.session()?;
            let (jobs, mine, refused) = (jobs.clone(), key.clone(), pin_refused.clone());
            std::thread::Builder::new()
                .name(format!("shuck-signer-{i}"))
                .spawn(move || serve(session, &mine, &jobs, &refused))
                .map_err(|e| Pkcs11Error::Unsupported {
                    uri: key.name(),
                    what: format!("cannot start a signer thread: {e}"),
                })?;
        }
        Ok(Arc::new(SignerPool {
            key,
            queue,
            stats,
            capacity,
        }))
    }

    /// The key's signature of `message` under `scheme`, waiting for a signer thread.
    pub fn sign(&self, scheme: SignatureScheme, message: &[u8]) -> Result<Vec<u8>, SignError> {
        let asked = Instant::now();
        let outcome = self.sign_counted(scheme, message);
        let result = match &outcome {
            Ok(_) => {
                self.stats.latency.observe(asked.elapsed().as_secs_f64());
                SignResult::Ok
            }
            Err(SignError::QueueFull(_)) => SignResult::QueueFull,
            Err(SignError::Timeout(_)) => SignResult::Timeout,
            Err(_) => SignResult::Failed,
        };
        self.stats.count(result);
        self.stats.note(&outcome);
        outcome
    }

    fn sign_counted(&self, scheme: SignatureScheme, message: &[u8]) -> Result<Vec<u8>, SignError> {
        let (reply, answer) = mpsc::channel();
        let job = Job {
            scheme,
            message: message.to_vec(),
            reply,
            deadline: Instant::now() + SIGN_TIMEOUT,
        };
        match self.queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(SignError::QueueFull(self.capacity)),
            Err(TrySendError::Disconnected(_)) => return Err(SignError::NoSigner),
        }
        // Waiting from the ask to the answer (or the giving up).
        self.stats.waiting.fetch_add(1, Ordering::Relaxed);
        let answered = answer.recv_timeout(SIGN_TIMEOUT);
        self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
        match answered {
            Ok(r) => r.map_err(SignError::Token),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(SignError::Timeout(SIGN_TIMEOUT)),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(SignError::NoSigner),
        }
    }

    /// Signatures of this key asked for and not answered yet, across its pools.
    pub fn waiting(&self) -> usize {
        self.stats.waiting.load(Ordering::Relaxed)
    }

    /// The key as rustls signs with it.
    pub fn signing_key(self: &Arc<Self>) -> Arc<dyn SigningKey> {
        Arc::new(TokenSigningKey { pool: self.clone() })
    }
}

/// Signer threads inside a call into a token's module, and whether the process is exiting:
/// a module's own teardown at exit (SoftHSM's static destructors) must not run while a signer
/// thread is in it, or the process crashes on its way out. See [`quiesce`].
static IN_MODULE: AtomicUsize = AtomicUsize::new(0);
static EXITING: AtomicBool = AtomicBool::new(false);

/// Runs `call` into the module unless the process is exiting (`None` then).
fn in_module<T>(call: impl FnOnce() -> T) -> Option<T> {
    // Counted first, then the flag read: `quiesce` sets the flag, then waits for the count.
    IN_MODULE.fetch_add(1, Ordering::SeqCst);
    let out = (!EXITING.load(Ordering::SeqCst)).then(call);
    IN_MODULE.fetch_sub(1, Ordering::SeqCst);
    out
}

/// Before the process exits: no signer thread enters a token's module from now on, and the
/// ones inside get up to `within` to come out.
pub fn quiesce(within: Duration) {
    EXITING.store(true, Ordering::SeqCst);
    let until = Instant::now() + within;
    while IN_MODULE.load(Ordering::SeqCst) > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A signer thread: one job at a time from the shared queue, until the pool is dropped. A
/// session the token no longer knows (it was reset, removed, restarted) is opened again before
/// the next job, at most once a second, so a token that comes back is used again without a
/// restart.
fn serve(
    first: (Session, ObjectHandle),
    key: &TokenKey,
    jobs: &Mutex<Receiver<Job>>,
    pin_refused: &AtomicBool,
) {
    let mut session = Some(first);
    // When a session was last opened (`None`: open one at the next job).
    let mut last_try: Option<Instant> = Some(Instant::now());
    loop {
        let job = {
            let jobs = jobs.lock().unwrap_or_else(PoisonError::into_inner);
            jobs.recv()
        };
        let Ok(job) = job else {
            close(session);
            return;
        };
        if Instant::now() >= job.deadline {
            let _ = job.reply.send(Err("given up before its turn".to_string()));
            continue;
        }
        let may_try = last_try.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        let refused = pin_refused.load(Ordering::Relaxed);
        if session.is_none() && !refused && may_try {
            last_try = Some(Instant::now());
            session = match in_module(|| key.session()).unwrap_or(Err(Pkcs11Error::Exiting)) {
                Ok(s) => Some(s),
                // Trying again would count towards locking the PIN: not until a reload.
                Err(Pkcs11Error::Login { .. }) => {
                    pin_refused.store(true, Ordering::Relaxed);
                    None
                }
                Err(_) => None,
            };
        }
        let signed = match &session {
            Some((s, handle)) => {
                in_module(|| sign_with(s, *handle, key.kind, job.scheme, &job.message))
                    .unwrap_or_else(|| Err("the process is exiting".into()))
            }
            None if pin_refused.load(Ordering::Relaxed) => {
                Err("the token refused the PIN (reload to try again)".into())
            }
            None => Err("no session with the token (opening one failed)".to_string()),
        };
        if signed.is_err() && session.is_some() {
            // Whatever went wrong, the next job starts from a new session: cheap for a token
            // that is fine, the way back for one that was reset.
            close(session.take());
            last_try = None;
        }
        // The asker may have given up (timed out): nothing to do then.
        let _ = job.reply.send(signed);
    }
}

/// Closes a session (dropping it calls C_CloseSession), unless the process is exiting: then it
/// is left to the exit.
fn close(session: Option<(Session, ObjectHandle)>) {
    let Some((s, _)) = session else {
        return;
    };
    let mut s = Some(s);
    if in_module(|| drop(s.take())).is_none() {
        std::mem::forget(s);
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
