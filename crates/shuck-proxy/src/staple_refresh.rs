//! `ocsp = "fetch"`: keeps each certificate's OCSP staple current. One task per certificate file,
//! on the main thread's runtime: it asks the responder named in the certificate, checks the answer
//! (`ocsp::verify`), keeps it in `state_dir` (so restarts and reloads staple it at once) and says
//! so, for the server to load the frontend again. A failed fetch is retried with back-off while
//! the last good staple keeps being served until its nextUpdate, then none.
//!
//! The certificate is read again at each round, so a renewed or replaced certificate gets its own
//! staple.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use tokio::sync::mpsc::UnboundedSender;

use crate::ocsp::{self, OcspError, Verified};
use crate::state_files;

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
pub struct Job {
    pub frontend: String,
    pub certificate: PathBuf,
    pub state_dir: PathBuf,
}

/// Keeps `job`'s staple current, forever; sends the frontend's name on `updated` whenever what it
/// should staple changed (a new response, or the last one lapsed).
pub async fn run(job: Job, updated: UnboundedSender<String>) {
    let mut failures = 0u32;
    let mut said_nothing_to_fetch = false;
    loop {
        let now = unix_now();
        let Some((leaf, issuer, url)) = read_certificate(&job.certificate) else {
            if !said_nothing_to_fetch {
                tracing::info!(frontend = %job.frontend, certificate = %job.certificate.display(), "no OCSP responder in the certificate (or no issuer in its file): nothing to staple");
                said_nothing_to_fetch = true;
            }
            tokio::time::sleep(LOOK_AGAIN).await;
            continue;
        };
        let target = ocsp::staple_path(&job.state_dir, &leaf);
        let stored = std::fs::read(&target)
            .ok()
            .and_then(|d| ocsp::verify(&d, &leaf, &issuer, now).ok());
        if let Some(wait) = stored.and_then(|v| seconds(v.due() - now)) {
            tokio::time::sleep(wait.min(LOOK_AGAIN)).await;
            continue;
        }
        match fetch(&url, &leaf, &issuer, &target).await {
            Ok(v) => {
                failures = 0;
                tracing::info!(frontend = %job.frontend, %url, next_update = v.next_update, "OCSP response fetched and stapled");
                if updated.send(job.frontend.clone()).is_err() {
                    return;
                }
                let wait = seconds(v.due() - unix_now()).unwrap_or_default();
                tokio::time::sleep(wait.max(MIN_INTERVAL)).await;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let retry = MIN_INTERVAL
                    .saturating_mul(1 << failures.saturating_sub(1).min(16))
                    .min(MAX_RETRY);
                tracing::warn!(frontend = %job.frontend, %url, error = %e, retry_in = ?retry, "OCSP fetch failed; the last good response stays stapled until its nextUpdate");
                // Wake when the stapled response lapses, so the frontend stops stapling it.
                let lapse = stored.and_then(|v| seconds(v.next_update + 1 - now));
                tokio::time::sleep(lapse.map_or(retry, |l| l.min(retry))).await;
                if stored.is_some_and(|v| v.next_update <= unix_now())
                    && updated.send(job.frontend.clone()).is_err()
                {
                    return;
                }
            }
        }
    }
}

/// Asks the responder, checks the answer and keeps it.
async fn fetch(
    url: &str,
    leaf: &[u8],
    issuer: &[u8],
    target: &Path,
) -> Result<Verified, OcspError> {
    let request = ocsp::request(leaf, issuer)?;
    let der = ocsp::fetch(url, request, FETCH_TIMEOUT).await?;
    let verified = ocsp::verify(&der, leaf, issuer, unix_now())?;
    state_files::write_private(target, &der).map_err(|e| OcspError::Fetch {
        url: url.to_string(),
        message: format!("cannot store it in {}: {e}", target.display()),
    })?;
    Ok(verified)
}

/// The leaf and its issuer (DER) from a certificate file, and the leaf's OCSP responder.
fn read_certificate(path: &Path) -> Option<(Vec<u8>, Vec<u8>, String)> {
    let pem = std::fs::read(path).ok()?;
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

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}
