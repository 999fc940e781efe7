//! One worker's handles for one frontend (`FrontendMetrics`): its connection counters and
//! handshake histograms, and its per-backend connect histograms and error counters, taken
//! once per worker so the hot path counts without a lock.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::{get, ja4_top, snapshot, ConnectTime, DurationFamily, Labels, Metrics};
use crate::conn::conn_error::{CountedIn, Reason};
use crate::sessions::resumption::Mechanism;

/// One worker's handles for one frontend.
#[derive(Debug, Clone)]
pub(crate) struct FrontendMetrics {
    pub accepted: Counter,
    pub active: Gauge,
    /// Completed handshakes by kind (full, resumed) and version (TLS 1.2, TLS 1.3).
    pub(super) handshakes: [[Counter; 2]; 2],
    /// Resumptions by [`Mechanism`] (`mechanism as usize - 1`).
    resumptions: [Counter; 3],
    /// By [`Reason`] (`reason as usize`); `None` for reasons not counted.
    pub(super) ends: [Option<Counter>; Reason::ALL.len()],
    pub bytes_up: Counter,
    pub bytes_down: Counter,
    pub accept_errors: Counter,
    /// Connections accepted with 90% of `max_connections` taken (shorter timeouts).
    pub pressured: Counter,
    pub proxy_headers_proxy: Counter,
    pub proxy_headers_local: Counter,
    pub client_certs_unverified: Counter,
    /// Connections that asked for kTLS (`ktls = true`), by where their records were protected.
    pub ktls_kernel: Counter,
    pub ktls_user_space: Counter,
    /// From accept to the end of the handshake, full and resumed.
    handshake_durations: [Histogram; 2],
    /// This worker's backend-connect histograms are taken per backend when its pool is built.
    pub(super) backend_connects: BackendConnects,
    /// This worker's counters of the most frequent JA4 fingerprints.
    pub ja4: std::sync::Arc<ja4_top::Ja4Counts>,
    /// `shuck_acme_fleet_events_total`, for the series a worker counts into.
    pub(super) acme_fleet: Family<Labels, Counter>,
}

/// Where one worker's per-backend connect histograms and error counters come from.
#[derive(Debug, Clone)]
pub(crate) struct BackendConnects {
    family: DurationFamily,
    /// `shuck_backend_errors_total`, whose per-backend series these add to.
    errors: Family<Labels, Counter>,
    made: snapshot::Connects,
    pub(super) frontend: String,
    worker: usize,
}

/// One backend's error counters for one worker, by kind.
#[derive(Debug, Clone)]
pub(crate) struct BackendErrorCounts {
    /// Connects that failed (every backend a failed connection tried counts one).
    pub connect: Counter,
    /// Relays it broke.
    pub relay: Counter,
    /// PROXY headers that could not be sent to it.
    pub proxy_header: Counter,
    /// TLS handshakes with it that failed (`backend_tls`).
    pub tls: Counter,
}

/// The kinds a backend is counted under, as labels.
const BACKEND_ERROR_KINDS: [&str; 4] = ["connect", "relay", "proxy_header", "tls"];

impl BackendConnects {
    /// One histogram per backend, in the order given (at start and reload, not per connection:
    /// the label lookup takes the family's lock).
    pub(crate) fn for_backends<'a>(
        &self,
        route: &str,
        names: impl Iterator<Item = &'a str>,
    ) -> Vec<ConnectTime> {
        names
            .map(|b| {
                let key = (self.frontend.clone(), route.to_string(), b.to_string());
                self.made.get(key, self.worker, || {
                    let l: Labels = vec![
                        ("frontend", self.frontend.clone()),
                        ("worker", self.worker.to_string()),
                        ("route", route.to_string()),
                        ("backend", b.to_string()),
                    ];
                    ConnectTime::new(self.family.get_or_create(&l).clone())
                })
            })
            .collect()
    }
}

impl BackendConnects {
    fn error_labels(&self, route: &str, backend: &str, kind: &str) -> Labels {
        self.error_labels_of(self.worker, route, backend, kind)
    }

    fn error_labels_of(&self, worker: usize, route: &str, backend: &str, kind: &str) -> Labels {
        vec![
            ("frontend", self.frontend.clone()),
            ("worker", worker.to_string()),
            ("route", route.to_string()),
            ("backend", backend.to_string()),
            ("kind", kind.to_string()),
        ]
    }

    /// Each backend's error counters, in the order given (made with the pool, as the
    /// histograms are).
    pub(crate) fn errors_for<'a>(
        &self,
        route: &str,
        names: impl Iterator<Item = &'a str>,
    ) -> Vec<BackendErrorCounts> {
        names
            .map(|b| {
                let [connect, relay, proxy_header, tls] =
                    BACKEND_ERROR_KINDS.map(|k| get(&self.errors, &self.error_labels(route, b, k)));
                BackendErrorCounts {
                    connect,
                    relay,
                    proxy_header,
                    tls,
                }
            })
            .collect()
    }

    /// This worker dropped one backend (its member left the pool): its series go once every
    /// worker has dropped it, all at once (summed over the workers, a series that shrank one
    /// worker at a time would look like a counter reset).
    pub(crate) fn forget(&self, route: &str, backend: &str) {
        let key = (
            self.frontend.clone(),
            route.to_string(),
            backend.to_string(),
        );
        for worker in self.made.forget(&key, self.worker) {
            for kind in BACKEND_ERROR_KINDS {
                self.errors
                    .remove(&self.error_labels_of(worker, route, backend, kind));
            }
            let l: Labels = vec![
                ("frontend", self.frontend.clone()),
                ("worker", worker.to_string()),
                ("route", route.to_string()),
                ("backend", backend.to_string()),
            ];
            self.family.remove(&l);
        }
    }
}

impl FrontendMetrics {
    /// Counts a completed handshake: full or resumed (and by what), TLS 1.3 or not.
    pub(crate) fn handshake(&self, resumed_by: Option<Mechanism>, resumed: bool, tls13: bool) {
        self.handshakes[usize::from(resumed)][usize::from(tls13)].inc();
        if let Some(m) = resumed_by {
            self.resumptions[m as usize - 1].inc();
        }
    }

    /// Times a handshake, from accept to its end.
    pub(crate) fn handshake_took(&self, resumed: bool, took: Duration) {
        self.handshake_durations[usize::from(resumed)].observe(took.as_secs_f64());
    }

    pub(crate) fn backend_connects(&self) -> &BackendConnects {
        &self.backend_connects
    }

    /// Counts a connection that ended early, in the family its reason belongs to.
    pub(crate) fn ended(&self, why: Reason) {
        if let Some(c) = &self.ends[why as usize] {
            c.inc();
        }
    }
}

impl Metrics {
    /// Handles for one worker and one frontend. Called once per worker at start: the label
    /// lookup takes the family's lock, the handles do not.
    pub(crate) fn for_frontend(&self, frontend: &str, worker: usize) -> FrontendMetrics {
        let base = || -> Labels {
            vec![
                ("frontend", frontend.to_string()),
                ("worker", worker.to_string()),
            ]
        };
        let with = |k: &'static str, v: &str| -> Labels {
            let mut l = base();
            l.push((k, v.to_string()));
            l
        };
        let ends = Reason::ALL.map(|r| {
            r.metric().map(|(family, label)| match family {
                CountedIn::ProxyHeaderErrors => {
                    get(&self.proxy_header_errors, &with("reason", label))
                }
                CountedIn::HandshakeFailures => {
                    get(&self.handshake_failures, &with("reason", label))
                }
                // Counted per backend (`BackendErrorCounts`) where there is one; these, for the
                // status page, are exported only for what has none (no route, a route whose
                // TLS policy is not the handshake's).
                CountedIn::BackendErrors if matches!(label, "no_route" | "policy_mismatch") => {
                    get(&self.backend_errors, &with("kind", label))
                }
                CountedIn::BackendErrors => Counter::default(),
                CountedIn::ClientErrors => get(&self.client_errors, &base()),
                CountedIn::IdleTimeouts => get(&self.idle_timeouts, &base()),
                CountedIn::ResourceErrors => get(&self.resource_errors, &with("kind", label)),
                CountedIn::Refusals => get(&self.refused, &with("reason", label)),
            })
        });
        let handles = FrontendMetrics {
            accepted: get(&self.accepted, &base()),
            active: get(&self.active, &base()),
            handshakes: ["full", "resumed"].map(|kind| {
                ["TLSv1.2", "TLSv1.3"].map(|version| {
                    let mut l = with("kind", kind);
                    l.push(("version", version.to_string()));
                    get(&self.handshakes, &l)
                })
            }),
            resumptions: Mechanism::ALL
                .map(|m| get(&self.resumptions, &with("mechanism", m.label()))),
            ends,
            bytes_up: get(&self.bytes, &with("direction", "up")),
            bytes_down: get(&self.bytes, &with("direction", "down")),
            accept_errors: get(&self.accept_errors, &base()),
            pressured: get(&self.pressured, &base()),
            proxy_headers_proxy: get(&self.proxy_headers, &with("command", "proxy")),
            proxy_headers_local: get(&self.proxy_headers, &with("command", "local")),
            client_certs_unverified: get(&self.client_certs_unverified, &base()),
            ktls_kernel: get(&self.ktls, &with("records", "kernel")),
            ktls_user_space: get(&self.ktls, &with("records", "user_space")),
            handshake_durations: ["full", "resumed"].map(|kind| {
                self.handshake_duration
                    .get_or_create(&with("kind", kind))
                    .clone()
            }),
            backend_connects: BackendConnects {
                family: self.backend_connect_duration.clone(),
                errors: self.backend_errors.clone(),
                made: self.index.connects(),
                frontend: frontend.to_string(),
                worker,
            },
            ja4: self.ja4_top.counts(frontend),
            acme_fleet: self.acme_fleet.clone(),
        };
        self.index.frontend(frontend, worker, &handles);
        handles
    }
}
