//! When to order: at once when the frontend has no certificate of its own (or one for other
//! names, or expired), else at two thirds of the certificate's lifetime less a random part of a
//! thirtieth (so a fleet that got its certificates together does not renew together). A failed
//! order is retried with back-off; the certificate in place keeps serving meanwhile.

use std::time::Duration;

use tokio::sync::mpsc::UnboundedSender;

use super::state::Stored;
use super::{order, AcmeError};
use crate::config::Acme;

/// The first retry after a failure, doubled after each further one up to `MAX_RETRY`.
const FIRST_RETRY: Duration = Duration::from_secs(10);
const MAX_RETRY: Duration = Duration::from_secs(3600);
/// The longest a whole order may take: the ACME client bounds its polling, not each request, and
/// a CA that accepts a connection and never answers must not stall renewals for good.
const ORDER_LIMIT: Duration = Duration::from_secs(300);
/// The longest sleep between looks at the stored certificate (it may have been replaced or
/// removed by hand, and the clock may have jumped).
const LOOK_AGAIN: Duration = Duration::from_secs(3600);

/// One frontend's certificate to keep current.
#[derive(Debug, Clone)]
pub struct Job {
    pub frontend: String,
    pub acme: Acme,
}

/// Keeps `job`'s certificate current, forever; sends the frontend's name on `renewed` each time
/// a new certificate is stored.
pub async fn run(job: Job, renewed: UnboundedSender<String>) {
    let jitter = random_fraction();
    let mut failures = 0u32;
    loop {
        let stored = Stored::read(&job.acme.bundle).filter(|s| s.covers(&job.acme.names));
        let now = crate::sys::clock::unix_now();
        if let Some(wait) = stored
            .as_ref()
            .and_then(|s| wait_before_renewal(s, now, jitter))
        {
            tokio::time::sleep(wait.min(LOOK_AGAIN)).await;
            continue;
        }
        let what = if stored.is_some() {
            "renewing"
        } else {
            "ordering"
        };
        tracing::info!(frontend = %job.frontend, names = ?job.acme.names, directory = %job.acme.directory, "{what} an ACME certificate");
        let attempt = tokio::time::timeout(ORDER_LIMIT, order::obtain(&job.acme)).await;
        let attempt = attempt.unwrap_or_else(|_| {
            Err(AcmeError::Refused(format!(
                "no certificate within {}s",
                ORDER_LIMIT.as_secs()
            )))
        });
        match attempt {
            Ok(()) => {
                failures = 0;
                let not_after = Stored::read(&job.acme.bundle).map_or(0, |s| s.not_after);
                tracing::info!(frontend = %job.frontend, not_after, "ACME certificate issued and stored");
                if renewed.send(job.frontend.clone()).is_err() {
                    return; // the server is gone
                }
                // Never order twice in a row: a certificate that reads as due at once (a clock
                // ahead of the CA's) would otherwise be ordered until the CA's rate limit.
                tokio::time::sleep(FIRST_RETRY).await;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let retry = retry_delay(failures, &e);
                tracing::warn!(frontend = %job.frontend, error = %e, retry_in = ?retry, "ACME order failed; the current certificate keeps serving");
                tokio::time::sleep(retry).await;
            }
        }
    }
}

/// How long until `stored` is due for renewal at `now` (Unix seconds); `None` when it is due.
fn wait_before_renewal(stored: &Stored, now: i64, jitter: f64) -> Option<Duration> {
    let lifetime = (stored.not_after - stored.not_before).max(0);
    let early = (lifetime as f64 / 30.0 * jitter) as i64;
    let due = stored.not_before + lifetime * 2 / 3 - early;
    (due > now).then(|| Duration::from_secs((due - now).unsigned_abs()))
}

fn retry_delay(failures: u32, error: &AcmeError) -> Duration {
    if error.is_rate_limit() {
        return MAX_RETRY;
    }
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_RETRY.saturating_mul(1 << doublings).min(MAX_RETRY)
}

/// A random number in [0, 1).
fn random_fraction() -> f64 {
    let mut b = [0u8; 4];
    let _ = aws_lc_rs::rand::fill(&mut b);
    f64::from(u32::from_le_bytes(b)) / (f64::from(u32::MAX) + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(not_before: i64, not_after: i64) -> Stored {
        Stored {
            not_before,
            not_after,
            names: vec!["a.example".into()],
        }
    }

    #[test]
    fn renewal_falls_due_at_two_thirds_less_the_jitter() {
        const DAY: u64 = 86_400;
        let day = 86_400;
        let s = stored(0, 90 * day);
        assert_eq!(
            wait_before_renewal(&s, 0, 0.0),
            Some(Duration::from_secs(60 * DAY))
        );
        // The most jitter takes a thirtieth of the lifetime off: three days of ninety.
        assert_eq!(
            wait_before_renewal(&s, 0, 0.999_999),
            Some(Duration::from_secs(57 * DAY + 1))
        );
        assert_eq!(wait_before_renewal(&s, 60 * day, 0.0), None);
        assert_eq!(wait_before_renewal(&stored(0, 10), 100, 0.5), None);
    }

    #[test]
    fn retries_back_off_to_an_hour() {
        let e = AcmeError::Refused("no".into());
        assert_eq!(retry_delay(1, &e), Duration::from_secs(10));
        assert_eq!(retry_delay(2, &e), Duration::from_secs(20));
        assert_eq!(retry_delay(12, &e), MAX_RETRY);
        assert_eq!(retry_delay(u32::MAX, &e), MAX_RETRY);
    }
}
