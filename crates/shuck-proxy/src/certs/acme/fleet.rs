//! ACME for a fleet through its store (a frontend with both `acme` and `session_store`): one
//! order per set of names at a time, under a lease in the store (taken if absent, renewed while
//! the order runs, released after; a host that dies loses it when it lapses); the challenge
//! certificate published for every host to answer the validator with, whichever host the
//! balancer sends it to; the issued chain and key stored once for every host to load; the ACME
//! account shared, so the fleet is one account. Everything is sealed with the fleet's key.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use crate::config::Acme;
pub(crate) use crate::store::fleet::Lease;
use crate::store::fleet::{FleetStore, Found};

/// How long a lease lasts unless renewed; it is renewed every third of that.
pub(crate) const LEASE: Duration = Duration::from_secs(15);
/// How long a published challenge stays in the store at most.
const CHALLENGE_TTL: Duration = Duration::from_secs(300);

/// What one frontend's fleet waits and refusals count into
/// (`shuck_acme_fleet_events_total{frontend,event}`).
#[derive(Debug, Clone, Default)]
pub(crate) struct FleetEvents {
    /// A wait for the certificate of the host holding the lease began.
    pub lease_wait: Counter,
    /// A lease no host of the fleet wrote (or one past its time) was taken over.
    pub lease_taken_over: Counter,
    /// An order made alone: the store unreachable, or the lease held too long, while this
    /// host's certificate was missing or close to its end.
    pub ordered_alone: Counter,
    /// Notifications of a new certificate beyond the one acted on (at most one a second is).
    pub notifications_dropped: Counter,
    /// Values in the store refused: not sealed by the fleet, or past their expiry.
    pub values_refused: Counter,
}

/// One frontend's view of the fleet's ACME state.
#[derive(Debug, Clone)]
pub(crate) struct Fleet {
    pub store: Arc<FleetStore>,
    /// Who this process is, in the leases it takes (host name, pid and a random part).
    holder: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn digest(parts: &[&str]) -> String {
    let joined = parts.join("\u{0}");
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, joined.as_bytes());
    hex(&d.as_ref()[..16])
}

/// The store key of `name`'s published challenge.
pub(crate) fn challenge_key(name: &str) -> String {
    format!("shuck:acme:challenge:{}", name.to_ascii_lowercase())
}

impl Fleet {
    pub(crate) fn new(store: Arc<FleetStore>) -> Fleet {
        let mut random = [0u8; 6];
        let _ = aws_lc_rs::rand::fill(&mut random);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        Fleet {
            store,
            holder: format!("{}:{}:{}", host.trim(), std::process::id(), hex(&random)),
        }
    }

    /// The key of the certificate for `acme`'s names from its directory.
    fn order_id(acme: &Acme) -> String {
        let mut parts = vec![acme.directory.as_str()];
        parts.extend(acme.names.iter().map(String::as_str));
        digest(&parts)
    }

    pub(crate) fn certificate_key(acme: &Acme) -> String {
        format!("shuck:acme:cert:{}", Self::order_id(acme))
    }

    /// Where the issue time (`not_before`, Unix seconds) of the newest certificate the fleet
    /// stored is kept: a sealed certificate written back after it was replaced is refused by
    /// comparing. Issue times only go forward across replacements, even when a CA shortens
    /// lifetimes (a later certificate may end sooner).
    fn newest_key(acme: &Acme) -> String {
        format!("shuck:acme:newest:{}", Self::order_id(acme))
    }

    fn lease_key(acme: &Acme) -> String {
        format!("shuck:acme:lease:{}", Self::order_id(acme))
    }

    /// Where the host that stored a new certificate says so.
    pub(crate) fn issued_channel(acme: &Acme) -> String {
        format!("shuck:acme:issued:{}", Self::order_id(acme))
    }

    /// Tells the fleet a new certificate is in the store (the others also look every so often).
    pub(crate) async fn announce(&self, acme: &Acme) {
        let _ = self
            .store
            .publish(&Self::issued_channel(acme), &Self::order_id(acme))
            .await;
    }

    pub(crate) fn account_key(directory: &str) -> String {
        format!("shuck:acme:account:{}", digest(&[directory]))
    }

    fn back_off_key(acme: &Acme) -> String {
        format!("shuck:acme:back-off:{}", Self::order_id(acme))
    }

    /// Takes the order's lease if no host holds it; `None` while the fleet backs off a failure.
    pub(crate) async fn take_lease(&self, acme: &Acme) -> Result<Option<Lease>, String> {
        if self.store.get(&Self::back_off_key(acme)).await?.is_some() {
            return Ok(None);
        }
        self.store
            .lease(&Self::lease_key(acme), &self.holder, LEASE)
            .await
            .map(Some)
    }

    /// After a failed order: no host of the fleet orders again for `retry`.
    pub(crate) async fn back_off(&self, acme: &Acme, retry: Duration) {
        let _ = self.store.put(&Self::back_off_key(acme), b"1", retry).await;
    }

    /// Renews the lease every third of its life while the returned task runs (abort it when the
    /// order ends); a lease lost (lapsed, taken) is logged.
    pub(crate) fn keep_lease(&self, acme: &Acme, frontend: &str) -> tokio::task::JoinHandle<()> {
        let (me, key, frontend) = (self.clone(), Self::lease_key(acme), frontend.to_string());
        tokio::spawn(async move {
            let mut failing = false;
            loop {
                tokio::time::sleep(LEASE / 3).await;
                match me.store.renew_lease(&key, &me.holder, LEASE).await {
                    Ok(true) => failing = false,
                    Ok(false) => {
                        tracing::warn!(frontend = %frontend, "lost the fleet's ACME lease (it lapsed); the order is given up");
                        return;
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(frontend = %frontend, error = %e, "cannot renew the fleet's ACME lease");
                        }
                        failing = true;
                    }
                }
            }
        })
    }

    pub(crate) async fn release_lease(&self, acme: &Acme) {
        let _ = self
            .store
            .release(&Self::lease_key(acme), &self.holder)
            .await;
    }

    /// Publishes a challenge under `key` (`challenge_key`, or `http01::store_key`) for the
    /// fleet's hosts; what was stored, to withdraw it by.
    pub(crate) async fn publish_challenge(
        &self,
        key: &str,
        material: &[u8],
    ) -> Result<Vec<u8>, String> {
        self.store.put_sealed(key, material, CHALLENGE_TTL).await
    }

    /// The issue time of the newest certificate the fleet has stored, when the store holds a
    /// record of it sealed by the fleet.
    pub(crate) async fn newest(&self, acme: &Acme) -> Result<Option<i64>, String> {
        Ok(match self.store.read(&Self::newest_key(acme)).await? {
            Found::Value(v) => std::str::from_utf8(&v).ok().and_then(|s| s.parse().ok()),
            Found::Absent | Found::Refused => None,
        })
    }

    /// Records that a certificate issued at `not_before` and ending at `not_after` was stored
    /// (kept until its end), unless a newer one already was. Two hosts storing at once may
    /// leave the older record: the check is then only weaker for a while.
    pub(crate) async fn record_newest(&self, acme: &Acme, (not_before, not_after): (i64, i64)) {
        if matches!(self.newest(acme).await, Ok(Some(n)) if n >= not_before) {
            return;
        }
        let life = (not_after - crate::sys::clock::unix_now())
            .max(60)
            .unsigned_abs();
        let _ = self
            .store
            .put(
                &Self::newest_key(acme),
                not_before.to_string().as_bytes(),
                Duration::from_secs(life),
            )
            .await;
    }

    /// Withdraws a challenge published under `key`, unless another order has replaced it since.
    pub(crate) async fn withdraw_challenge(&self, key: &str, stored: &[u8]) {
        let _ = self.store.delete_if(key, stored).await;
    }
}
