//! The ACME families' handles: what a fleet's renewal waits for (`acme_fleet_events`), what
//! on-demand issuance counts (`on_demand_events`) and the plain-HTTP listener's requests
//! (`redirect_requests`).

use super::{get, FrontendMetrics, Metrics};

impl FrontendMetrics {
    /// `acme_fleet_events{event="challenge_lookup_busy"}` of this frontend: taken only for a
    /// frontend whose ACME a fleet shares, so no other shows the series.
    pub(crate) fn challenge_lookups_busy(&self) -> prometheus_client::metrics::counter::Counter {
        get(
            &self.acme_fleet,
            &vec![
                ("frontend", self.backend_connects.frontend.clone()),
                ("event", "challenge_lookup_busy".to_string()),
            ],
        )
    }
}

impl Metrics {
    /// The counters of one frontend's fleet ACME: its waits and refusals.
    pub(crate) fn acme_fleet_events(
        &self,
        frontend: &str,
    ) -> crate::certs::acme::fleet::FleetEvents {
        let c = |event: &str| {
            get(
                &self.acme_fleet,
                &vec![
                    ("frontend", frontend.to_string()),
                    ("event", event.to_string()),
                ],
            )
        };
        crate::certs::acme::fleet::FleetEvents {
            lease_wait: c("lease_wait"),
            lease_taken_over: c("lease_taken_over"),
            ordered_alone: c("ordered_alone"),
            notifications_dropped: c("notification_dropped"),
            values_refused: c("value_refused"),
        }
    }

    /// What `frontend`'s on-demand issuance counts into.
    pub(crate) fn on_demand_events(
        &self,
        frontend: &str,
    ) -> crate::certs::acme::on_demand::OnDemandEvents {
        let c = |event: &str| {
            get(
                &self.on_demand,
                &vec![
                    ("frontend", frontend.to_string()),
                    ("event", event.to_string()),
                ],
            )
        };
        crate::certs::acme::on_demand::OnDemandEvents {
            allowed: c("allowed"),
            refused: c("refused"),
            ask_failed: c("ask_failed"),
            ordered: c("ordered"),
            issued: c("issued"),
            order_failed: c("order_failed"),
            held_too_long: c("held_too_long"),
            rate_limited: c("rate_limited"),
            full: c("full"),
            busy: c("busy"),
            reserved: c("reserved"),
        }
    }

    /// Counts one request on the plain-HTTP listener at `listener`.
    pub(crate) fn redirect_request(&self, listener: &str, outcome: &str) {
        get(
            &self.redirect_requests,
            &vec![
                ("listener", listener.to_string()),
                ("outcome", outcome.to_string()),
            ],
        )
        .inc();
    }
}
