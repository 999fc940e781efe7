//! `ocsp = "fetch"`: keeps each certificate's OCSP staple current. One task per certificate file,
//! on the main thread's runtime: it asks the responder named in the certificate, checks the answer
//! (`ocsp::verify`), keeps it in `state_dir` (so restarts and reloads staple it at once) and says
//! so, for the server to load the frontend again. A failed fetch is retried with back-off while
//! the last good staple keeps being served until its nextUpdate, then none.
//!
//! The certificate is read again at each round, so a renewed or replaced certificate gets its own
//! staple.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use tokio::sync::mpsc::UnboundedSender;

use crate::certs::ocsp::{self, OcspError, Verified};
use crate::sys::state_files;

/// The longest a responder is waited for.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// The least time between two fetches, and the first retry after a failure (doubled after each
/// further one, up to an hour).
const MIN_INTERVAL: Duration = Duration::from_secs(30);
const MAX_RETRY: Duration = Duration::from_secs(3600);
/// How often a certificate without a responder (or an issuer) is looked at again.
const LOOK_AGAIN: Duration = Duration::from_secs(3600);

/// One certificate file whose staple to keep current.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub frontend: String,
    pub certificate: PathBuf,
    pub state_dir: PathBuf,
    /// Wakes it to ask the responder now (`shuck ctl ocsp refresh`), whatever is stored.
    pub now: Arc<Notify>,
}

/// Waits `wait`, or less if woken to fetch now; whether it was.
async fn pause(wait: Duration, now: &Notify) -> bool {
    tokio::select! {
        () = tokio::time::sleep(wait) => false,
        () = now.notified() => true,
    }
}

/// Keeps `job`'s staple current, forever; sends the frontend's name on `updated` when a new
/// response is stored (a lapsed one is dropped by the server's own watch, `Server::run`).
pub(crate) async fn run(job: Job, updated: UnboundedSender<String>) {
    let mut failures = 0u32;
    let mut said_nothing_to_fetch = false;
    // Woken by an operator: fetch even if the stored response is not due.
    let mut forced = false;
    loop {
        let now = crate::sys::clock::unix_now();
        let Some((leaf, issuer, url)) = read_certificate(&job.certificate) else {
            if !said_nothing_to_fetch {
                tracing::info!(frontend = %job.frontend, certificate = %job.certificate.display(), "no OCSP responder in the certificate (or no issuer in its file): nothing to staple");
                said_nothing_to_fetch = true;
            }
            // An ACME bundle appears once issued: look again soon while there is none.
            let wait = if job.certificate.exists() {
                LOOK_AGAIN
            } else {
                MIN_INTERVAL
            };
            forced = pause(wait, &job.now).await;
            continue;
        };
        let target = ocsp::staple_path(&job.state_dir, &leaf);
        let stored = Stored::read(&target, &leaf, &issuer, now);
        if let Some(wait) = stored
            .as_ref()
            .and_then(|s| seconds(s.due() - now))
            .filter(|_| !std::mem::take(&mut forced))
        {
            forced = pause(wait.min(LOOK_AGAIN), &job.now).await;
            continue;
        }
        match fetch(&url, &leaf, &issuer, stored.as_ref()).await {
            Ok((der, v)) => {
                failures = 0;
                let changed = stored.as_ref().is_none_or(|s| s.der != der);
                if changed {
                    if let Err(e) = state_files::write_private(&target, &der) {
                        tracing::warn!(frontend = %job.frontend, path = %target.display(), error = %e, "cannot store the OCSP response");
                    } else {
                        tracing::info!(frontend = %job.frontend, %url, next_update = v.next_update, "OCSP response fetched and stapled");
                        if updated.send(job.frontend.clone()).is_err() {
                            return;
                        }
                    }
                } else {
                    // The same response again: nothing to reload; touch it so the next fetch
                    // is counted from now.
                    let _ = std::fs::File::options()
                        .append(true)
                        .open(&target)
                        .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                }
                let wait =
                    seconds(v.due(crate::sys::clock::unix_now()) - crate::sys::clock::unix_now())
                        .unwrap_or_default();
                forced = pause(wait.max(MIN_INTERVAL), &job.now).await;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let retry = MIN_INTERVAL
                    .saturating_mul(1 << failures.saturating_sub(1).min(16))
                    .min(MAX_RETRY);
                tracing::warn!(frontend = %job.frontend, %url, error = %e, retry_in = ?retry, "OCSP fetch failed; the last good response stays stapled until its nextUpdate");
                forced = pause(retry, &job.now).await;
            }
        }
    }
}

/// The response kept in `state_dir`, checked, and when it was fetched (its file's mtime).
struct Stored {
    der: Vec<u8>,
    verified: Verified,
    fetched: i64,
}

impl Stored {
    fn read(path: &Path, leaf: &[u8], issuer: &[u8], now: i64) -> Option<Stored> {
        let der = crate::sys::files::read(path).ok()?;
        let verified = ocsp::verify(&der, leaf, issuer, now).ok()?;
        let fetched = std::fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        Some(Stored {
            der,
            verified,
            fetched,
        })
    }

    fn due(&self) -> i64 {
        self.verified.due(self.fetched)
    }
}

/// Asks the responder and checks the answer. One older than the stored response is refused:
/// over plain HTTP anyone on the path could replay a stale (still valid) answer.
async fn fetch(
    url: &str,
    leaf: &[u8],
    issuer: &[u8],
    stored: Option<&Stored>,
) -> Result<(Vec<u8>, Verified), OcspError> {
    let request = ocsp::request(leaf, issuer)?;
    let der = ocsp::fetch(url, request, FETCH_TIMEOUT).await?;
    let verified = ocsp::verify(&der, leaf, issuer, crate::sys::clock::unix_now())?;
    if stored.is_some_and(|s| verified.this_update < s.verified.this_update) {
        return Err(OcspError::Fetch {
            url: url.to_string(),
            message: "the answer is older than the one stored (a replay?)".into(),
        });
    }
    Ok((der, verified))
}

/// The leaf and its issuer (DER) from a certificate file, and the leaf's OCSP responder.
fn read_certificate(path: &Path) -> Option<(Vec<u8>, Vec<u8>, String)> {
    let pem = crate::sys::files::read(path).ok()?;
    let mut chain = CertificateDer::pem_slice_iter(&pem);
    let leaf = chain.next()?.ok()?.to_vec();
    let issuer = chain.next()?.ok()?.to_vec();
    let url = ocsp::responder_url(&leaf)?;
    Some((leaf, issuer, url))
}

/// A positive number of seconds as a duration; `None` when it is not positive.
fn seconds(s: i64) -> Option<Duration> {
    (s > 0).then(|| Duration::from_secs(s.unsigned_abs()))
}
