//! The certificate inventory operators see: what each frontend serves (`shuck_certificate_info`,
//! its expiry, its OCSP staple's age and next update), the staples that lapsed, and the expiry
//! warnings the twice-daily check logs.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{escaped, Labels};

/// What the certificate gauges say about one served certificate.
#[derive(Debug, Clone)]
pub(crate) struct CertRecord {
    pub path: String,
    pub subject: String,
    /// Unix seconds.
    pub not_after: i64,
    /// Renewed by shuck (ACME): no expiry warning, the renewal logs its own failures.
    pub managed: bool,
    /// The stapled OCSP response's thisUpdate and nextUpdate (Unix seconds), if any.
    pub staple: Option<(i64, i64)>,
    /// The DNS names it serves.
    pub names: Vec<String>,
}

/// `shuck_certificate_not_after_timestamp_seconds`, `shuck_ocsp_staple_age_seconds` (set when
/// scraped) and `shuck_ocsp_staple_next_update_timestamp_seconds`, per frontend and certificate
/// file; replaced whole for a frontend when what it serves changes.
#[derive(Debug, Default)]
pub(super) struct CertificateGauges {
    /// `shuck_certificate_info{frontend,certificate,subject,names}`, always 1.
    info: Family<Labels, Gauge>,
    not_after: Family<Labels, Gauge>,
    staple_age: Family<Labels, Gauge>,
    staple_next_update: Family<Labels, Gauge>,
    /// `shuck_certificate_loaded_timestamp_seconds{frontend,certificate}`.
    loaded: Family<Labels, Gauge>,
    /// `shuck_certificate_watch_errors_total{frontend}`: changed files not loaded.
    pub(super) watch_errors: Family<Labels, Counter>,
    /// `shuck_certificate_watch_healthy{frontend}`: 0 while changed files do not load.
    pub(super) watch_healthy: Family<Labels, Gauge>,
    served: std::sync::Mutex<std::collections::BTreeMap<String, Vec<CertRecord>>>,
}

impl CertificateGauges {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "certificate_info",
            "Each served certificate's subject and DNS names, by frontend and certificate file (always 1)",
            self.info.clone(),
        );
        registry.register(
            "certificate_not_after_timestamp_seconds",
            "When each served certificate expires (Unix time), by frontend and certificate file",
            self.not_after.clone(),
        );
        registry.register(
            "ocsp_staple_age_seconds",
            "Age of each stapled OCSP response (now minus its thisUpdate); absent when nothing is stapled",
            self.staple_age.clone(),
        );
        registry.register(
            "ocsp_staple_next_update_timestamp_seconds",
            "When each stapled OCSP response lapses (its nextUpdate, Unix time)",
            self.staple_next_update.clone(),
        );
        registry.register(
            "certificate_loaded_timestamp_seconds",
            "When each served certificate was last loaded (start, reload, or a change seen on disk), Unix time",
            self.loaded.clone(),
        );
        registry.register(
            "certificate_watch_errors",
            "Changed certificate files that were not loaded (inconsistent or unreadable): the previous ones stay served",
            self.watch_errors.clone(),
        );
        registry.register(
            "certificate_watch_healthy",
            "1 while what watch_certificates sees on disk loads (or is what is served), 0 while changed files do not load and the previous ones stay served",
            self.watch_healthy.clone(),
        );
    }

    fn labels(frontend: &str, r: &CertRecord) -> Labels {
        vec![
            ("frontend", frontend.to_string()),
            ("certificate", escaped(&r.path)),
        ]
    }

    fn info_labels(frontend: &str, r: &CertRecord) -> Labels {
        let mut l = Self::labels(frontend, r);
        l.push(("subject", escaped(&r.subject)));
        l.push(("names", escaped(&r.names.join(" "))));
        l
    }

    pub(super) fn set(&self, frontend: &str, records: Vec<CertRecord>) {
        let mut served = self.served_now();
        for old in served.get(frontend).into_iter().flatten() {
            self.info.remove(&Self::info_labels(frontend, old));
            let l = Self::labels(frontend, old);
            self.not_after.remove(&l);
            self.loaded.remove(&l);
            self.staple_age.remove(&l);
            self.staple_next_update.remove(&l);
        }
        for r in &records {
            self.info
                .get_or_create(&Self::info_labels(frontend, r))
                .set(1);
            let l = Self::labels(frontend, r);
            self.not_after.get_or_create(&l).set(r.not_after);
            self.loaded
                .get_or_create(&l)
                .set(crate::sys::clock::unix_now());
            if let Some((this, next)) = r.staple {
                self.staple_next_update.get_or_create(&l).set(next);
                self.staple_age
                    .get_or_create(&l)
                    .set(0.max(crate::sys::clock::unix_now() - this));
            }
        }
        served.insert(frontend.to_string(), records);
    }

    /// Whether any certificate served now names `host` (lower case).
    pub(super) fn serves(&self, host: &str) -> bool {
        let parent = host.split_once('.').map(|(_, p)| p);
        self.served_now().values().flatten().any(|r| {
            r.names
                .iter()
                .any(|n| n == host || (n.strip_prefix("*.").is_some_and(|p| Some(p) == parent)))
        })
    }

    /// What each frontend serves now.
    pub(super) fn served(&self) -> std::collections::BTreeMap<String, Vec<CertRecord>> {
        self.served_now().clone()
    }

    /// The records, locked (a poisoned lock still holds what was last set).
    fn served_now(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, Vec<CertRecord>>> {
        self.served
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn update_ages(&self, now: i64) {
        let served = self.served_now();
        for (frontend, records) in served.iter() {
            for r in records {
                if let Some((this, _)) = r.staple {
                    let l = Self::labels(frontend, r);
                    self.staple_age.get_or_create(&l).set(0.max(now - this));
                }
            }
        }
    }

    pub(super) fn lapsed(&self, now: i64) -> Vec<String> {
        let served = self.served_now();
        served
            .iter()
            .filter(|(_, records)| {
                records
                    .iter()
                    .any(|r| r.staple.is_some_and(|(_, next)| next <= now))
            })
            .map(|(frontend, _)| frontend.clone())
            .collect()
    }

    pub(super) fn warnings(&self, now: i64, within: Duration) -> Vec<String> {
        let within = i64::try_from(within.as_secs()).unwrap_or(i64::MAX);
        let served = self.served_now();
        served
            .iter()
            .flat_map(|(frontend, records)| records.iter().map(move |r| (frontend, r)))
            .filter(|(_, r)| !r.managed && r.not_after - now < within)
            .map(|(frontend, r)| expiry_message(frontend, r, now))
            .collect()
    }
}

/// "expires in N days" or "has EXPIRED", naming the frontend, the file and the subject.
fn expiry_message(frontend: &str, r: &CertRecord, now: i64) -> String {
    if r.not_after <= now {
        format!(
            "frontend {frontend:?}: certificate {} ({}) has EXPIRED: clients will refuse it",
            r.path, r.subject
        )
    } else {
        let days = (r.not_after - now).div_euclid(86_400);
        format!(
            "frontend {frontend:?}: certificate {} ({}) expires in {days} days",
            r.path, r.subject
        )
    }
}
