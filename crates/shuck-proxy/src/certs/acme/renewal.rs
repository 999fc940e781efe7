//! When to order: at once when the frontend has no certificate of its own (or one for other
//! names, or expired), else at two thirds of the certificate's lifetime less a random part of a
//! thirtieth (so a fleet that got its certificates together does not renew together). A failed
//! order is retried with back-off; the certificate in place keeps serving meanwhile.

use std::sync::Arc;
use std::time::Duration;

use instant_acme::CertificateIdentifier;
use tokio::sync::mpsc::UnboundedSender;

use super::challenge::Challenges;
use super::fleet::{Fleet, FleetEvents, Lease};
use super::state::Stored;
use super::{ari, order, AcmeError};
use crate::config::Acme;
use crate::store::fleet::Found;

/// The first retry after a failure, doubled after each further one up to `MAX_RETRY`.
const FIRST_RETRY: Duration = Duration::from_secs(10);
const MAX_RETRY: Duration = Duration::from_secs(3600);
/// The longest a whole order may take: the ACME client bounds its polling, not each request, and
/// a CA that accepts a connection and never answers must not stall renewals for good.
const ORDER_LIMIT: Duration = Duration::from_secs(300);
/// The longest sleep between looks at the stored certificate (it may have been replaced or
/// removed by hand, and the clock may have jumped).
const LOOK_AGAIN: Duration = Duration::from_secs(3600);

/// How often a host of a fleet looks for the fleet's certificate in the store when no
/// notification comes (the host that stores one publishes it; the poll is the fallback).
const FLEET_POLL: Duration = Duration::from_secs(30);
/// The same for an on-demand name's job, which has no subscription: a frontend may have
/// thousands, and one connection (and one read every 30 s) each would load the store.
const ON_DEMAND_POLL: Duration = Duration::from_secs(600);
/// How often a host whose certificate is due tries the lease another host holds.
const LEASE_POLL: Duration = Duration::from_secs(3);
/// How long a host whose certificate is missing or close to its end waits for the host holding
/// the lease before it orders alone, beyond the longest an order may take ([`order_limit`]):
/// two lease lifetimes, so a holder still ordering is never raced (two orders at once would
/// answer each other's validators with the wrong challenge); a lease held past that is held by
/// a host that hangs while renewing it, or by someone else.
const ALONE_AFTER: Duration = Duration::from_secs(30);
/// The least time between two looks at the store that notifications cause: a flood of them
/// (anyone who can PUBLISH) costs one look a second.
const MIN_WAKE: Duration = Duration::from_secs(1);

/// One frontend's certificate to keep current.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub frontend: String,
    pub acme: Acme,
    /// The fleet it shares its certificate with (through `session_store`), if any.
    pub fleet: Option<Fleet>,
    /// Where its challenges are published for the validators' handshakes.
    pub challenges: Arc<Challenges>,
    /// What the fleet's waits and refusals count into.
    pub events: FleetEvents,
    /// An on-demand certificate's: the endpoint asked before each renewal (a name no longer
    /// allowed is not renewed, and the job ends), and a first order that fails ends the job.
    pub ask: Option<super::ask::AskEndpoint>,
}

impl Job {
    /// Whether an on-demand name is still allowed (asked before a renewal); an endpoint that
    /// does not answer does not stop a renewal.
    async fn still_allowed(&self) -> bool {
        let Some(ask) = &self.ask else {
            return true;
        };
        let name = self.acme.names.first().map_or("", String::as_str);
        match ask.allows(name).await {
            Ok(true) => true,
            Ok(false) => {
                tracing::info!(frontend = %self.frontend, name, "the on-demand ask endpoint no longer allows this name: its certificate is not renewed and no longer served");
                false
            }
            Err(e) => {
                tracing::warn!(frontend = %self.frontend, name, error = %e, "the on-demand ask endpoint did not answer; renewing anyway");
                true
            }
        }
    }

    /// Whether a failed order ends the job: an on-demand name's first (it is asked for again
    /// by the next handshake, after a minute).
    fn gives_up(&self, had_certificate: bool) -> bool {
        self.ask.is_some() && !had_certificate
    }
}

/// Keeps `job`'s certificate current, forever; sends the frontend's name on `renewed` each time
/// a new certificate is stored.
/// Why a job ended (only an on-demand name's ends while the server runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// The server is gone.
    ServerGone,
    /// The endpoint no longer allows the name: not renewed.
    NotAllowed,
    /// This host's first order of the name failed.
    OrderFailed,
    /// Another host's order of the name failed: the fleet backs off.
    FleetBacksOff,
}

pub(crate) async fn run(job: Job, renewed: UnboundedSender<String>) -> End {
    match job.fleet.clone() {
        Some(fleet) => run_in_fleet(&job, &fleet, &renewed).await,
        None => run_alone(job, renewed).await,
    }
}

/// The longest one order may take: [`ORDER_LIMIT`], and the time DNS-01 may wait for its
/// records to reach every server.
fn order_limit(acme: &Acme) -> Duration {
    ORDER_LIMIT
        + acme
            .dns_update
            .as_ref()
            .map_or(Duration::ZERO, |d| d.propagation_timeout)
}

/// Keeps the certificate current on this host alone.
async fn run_alone(job: Job, renewed: UnboundedSender<String>) -> End {
    let mut schedule = Schedule::new();
    let mut failures = 0u32;
    loop {
        let stored = Stored::read(&job.acme.bundle).filter(|s| s.covers(&job.acme.names));
        let (wait, replaces) = schedule.wait(&job.acme, None, stored.as_ref()).await;
        if let Some(wait) = wait {
            tokio::time::sleep(wait.min(LOOK_AGAIN)).await;
            continue;
        }
        if stored.is_some() && !job.still_allowed().await {
            return End::NotAllowed;
        }
        let what = if stored.is_some() {
            "renewing"
        } else {
            "ordering"
        };
        tracing::info!(frontend = %job.frontend, names = ?job.acme.names, directory = %job.acme.directory, "{what} an ACME certificate");
        match obtain(&job.challenges, &job.acme, None, replaces).await {
            Ok(_) => {
                failures = 0;
                let not_after = Stored::read(&job.acme.bundle).map_or(0, |s| s.not_after);
                tracing::info!(frontend = %job.frontend, not_after, "ACME certificate issued and stored");
                if renewed.send(job.frontend.clone()).is_err() {
                    return End::ServerGone;
                }
                // Never order twice in a row: a certificate that reads as due at once (a clock
                // ahead of the CA's) would otherwise be ordered until the CA's rate limit.
                tokio::time::sleep(FIRST_RETRY).await;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let retry = retry_delay(failures, &e);
                if job.gives_up(stored.is_some()) {
                    tracing::warn!(frontend = %job.frontend, names = ?job.acme.names, error = %e, "on-demand ACME order failed");
                    return End::OrderFailed;
                }
                tracing::warn!(frontend = %job.frontend, error = %e, retry_in = ?retry, "ACME order failed; the current certificate keeps serving");
                tokio::time::sleep(retry).await;
            }
        }
    }
}

/// One order, bounded by [`order_limit`].
async fn obtain(
    challenges: &Arc<Challenges>,
    acme: &Acme,
    fleet: Option<&Fleet>,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<Vec<u8>, AcmeError> {
    let limit = order_limit(acme);
    let order = order::obtain(challenges, acme, fleet, replaces);
    let attempt = tokio::time::timeout(limit, order).await;
    attempt.unwrap_or_else(|_| {
        Err(AcmeError::Refused(format!(
            "no certificate within {}s",
            limit.as_secs()
        )))
    })
}

/// Keeps the certificate current with the fleet: loads the fleet's certificate whenever it is
/// newer than this host's (and puts this host's there when it is the newer); when due, orders
/// only under the fleet's lease, and stores what it got for the others. A store that cannot be
/// reached delays nothing but the sharing: when the certificate is close to its end (a sixth
/// of its life left) or there is none, the host orders alone; so it does after [`order_limit`]
/// and [`ALONE_AFTER`]
/// of a lease held by another host.
async fn run_in_fleet(job: &Job, fleet: &Fleet, renewed: &UnboundedSender<String>) -> End {
    let (mut issued, poll) = if job.ask.is_some() {
        // No sender: `nap` sleeps its time out. A host waiting for another's first order
        // still tries the lease every LEASE_POLL and loads the result then.
        (tokio::sync::watch::channel(0).1, ON_DEMAND_POLL)
    } else {
        (
            fleet.store.subscribe(&Fleet::issued_channel(&job.acme)),
            FLEET_POLL,
        )
    };
    let mut wake = Wake::new();
    let mut schedule = Schedule::new();
    let mut failures = 0u32;
    let mut store_failing = false;
    let mut refusing_older = false;
    let mut waiting = Waiting::default();
    loop {
        let reached = match adopt(job, fleet).await {
            Ok(adoption) => {
                if store_failing {
                    tracing::info!(frontend = %job.frontend, "the fleet's store answers again");
                }
                let first_refusal =
                    matches!(adoption, Adoption::RefusedOlder { .. }) && !refusing_older;
                refusing_older = adoption.say_refused(job, refusing_older);
                if first_refusal {
                    // A store that missed a write is repaired by the host holding the newer
                    // certificate within a poll: wait one before ordering.
                    store_failing = false;
                    nap(&mut issued, poll, &mut wake, &job.events).await;
                    continue;
                }
                if matches!(adoption, Adoption::Loaded)
                    && renewed.send(job.frontend.clone()).is_err()
                {
                    return End::ServerGone;
                }
                true
            }
            Err(e) => {
                if !store_failing {
                    tracing::warn!(frontend = %job.frontend, error = %e, "cannot read the fleet's ACME certificate from the store; keeping ours");
                }
                false
            }
        };
        store_failing = !reached;
        let stored = Stored::read(&job.acme.bundle).filter(|s| s.covers(&job.acme.names));
        let (wait, replaces) = schedule.wait(&job.acme, Some(fleet), stored.as_ref()).await;
        if let Some(wait) = wait {
            waiting = Waiting::default();
            nap(&mut issued, wait.min(poll), &mut wake, &job.events).await;
            continue;
        }
        // Due, or none yet: the host that takes the lease orders; the others wait for its
        // certificate to reach the store.
        let lease = fleet.take_lease(&job.acme).await;
        if matches!(lease, Ok(None)) && job.gives_up(stored.is_some()) {
            // Another host's order of this on-demand name failed: the fleet backs off, and so
            // does this host (asked again by a later handshake).
            return End::FleetBacksOff;
        }
        let Some(turn) = waiting.turn(job, &lease, urgent(stored.as_ref())) else {
            nap(&mut issued, LEASE_POLL, &mut wake, &job.events).await;
            continue;
        };
        waiting = Waiting::default();
        if stored.is_some() && !job.still_allowed().await {
            fleet.release_lease(&job.acme).await;
            return End::NotAllowed;
        }
        let what = if stored.is_some() {
            "renewing"
        } else {
            "ordering"
        };
        let attempt = match turn {
            Turn::Alone(why) => {
                job.events.ordered_alone.inc();
                tracing::warn!(frontend = %job.frontend, "{why}; {what} the certificate alone");
                obtain(&job.challenges, &job.acme, None, replaces.clone()).await
            }
            Turn::UnderLease => {
                tracing::info!(frontend = %job.frontend, names = ?job.acme.names, directory = %job.acme.directory, "took the fleet's ACME lease; {what} its certificate");
                under_lease(job, fleet, replaces.clone()).await
            }
        };
        match attempt {
            Ok(bundle) => {
                failures = 0;
                let not_after = share(job, fleet, &bundle).await;
                tracing::info!(frontend = %job.frontend, not_after, "ACME certificate issued and stored for the fleet");
                fleet.release_lease(&job.acme).await;
                fleet.announce(&job.acme).await;
                if renewed.send(job.frontend.clone()).is_err() {
                    return End::ServerGone;
                }
                tokio::time::sleep(FIRST_RETRY).await;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                let retry = retry_delay(failures, &e);
                // The fleet waits out the back-off too, so N hosts do not make N orders of it.
                fleet.back_off(&job.acme, retry).await;
                fleet.release_lease(&job.acme).await;
                if replaces.is_some() {
                    // The CA may refuse what `replaces` names: the next order goes without it.
                    schedule.forget_replaces();
                }
                if job.gives_up(stored.is_some()) {
                    tracing::warn!(frontend = %job.frontend, names = ?job.acme.names, error = %e, "on-demand ACME order failed");
                    return End::OrderFailed;
                }
                tracing::warn!(frontend = %job.frontend, error = %e, retry_in = ?retry, "ACME order failed; the current certificate keeps serving");
                tokio::time::sleep(retry).await;
            }
        }
    }
}

/// How a due certificate is ordered this turn.
enum Turn {
    UnderLease,
    /// Without the fleet, and why (one log line).
    Alone(String),
}

/// A wait for another host's lease (or the fleet's back-off), said once when it begins.
#[derive(Default)]
struct Waiting {
    held_since: Option<tokio::time::Instant>,
    backing_off: bool,
}

impl Waiting {
    /// What to do with a due certificate (`urgent`: missing or close to its end), given what
    /// taking the lease found; `None`: wait.
    fn turn(
        &mut self,
        job: &Job,
        lease: &Result<Option<Lease>, String>,
        urgent: bool,
    ) -> Option<Turn> {
        match lease {
            Ok(Some(Lease::Taken)) => Some(Turn::UnderLease),
            Ok(Some(Lease::TakenOver)) => {
                job.events.lease_taken_over.inc();
                tracing::warn!(frontend = %job.frontend, "the fleet's ACME lease held a value no host of the fleet wrote, or one past its time; taken over");
                Some(Turn::UnderLease)
            }
            Ok(Some(Lease::Held)) => {
                let since = *self.held_since.get_or_insert_with(|| {
                    job.events.lease_wait.inc();
                    tracing::info!(frontend = %job.frontend, "another host holds the fleet's ACME lease; waiting for the certificate it orders");
                    tokio::time::Instant::now()
                });
                // Longer than any order may take, so a holder still ordering is never raced.
                let alone_after = order_limit(&job.acme) + ALONE_AFTER;
                (urgent && since.elapsed() >= alone_after).then(|| {
                    Turn::Alone(format!("another host has held the fleet's ACME lease for {}s and this host's certificate is missing or close to its end", alone_after.as_secs()))
                })
            }
            Ok(None) => {
                if !self.backing_off {
                    job.events.lease_wait.inc();
                    tracing::info!(frontend = %job.frontend, "the fleet is backing off a failed ACME order; waiting");
                }
                self.backing_off = true;
                None
            }
            Err(_) if urgent => Some(Turn::Alone(
                "the fleet's store is unreachable and the certificate is missing or close to its end".into(),
            )),
            Err(_) => None,
        }
    }
}

/// When a notification last woke the loop, and how many it had seen.
struct Wake {
    at: tokio::time::Instant,
    seen: u64,
}

impl Wake {
    fn new() -> Wake {
        Wake {
            at: tokio::time::Instant::now(),
            seen: 0,
        }
    }
}

/// Sleeps `d`, or until the fleet says a new certificate is in the store, but no sooner than
/// [`MIN_WAKE`] after the last wake; notifications beyond one are counted as dropped.
async fn nap(
    issued: &mut tokio::sync::watch::Receiver<u64>,
    d: Duration,
    wake: &mut Wake,
    events: &FleetEvents,
) {
    tokio::select! {
        () = tokio::time::sleep(d) => {}
        changed = issued.changed() => {
            if changed.is_err() {
                // No subscription task any more: the poll alone.
                tokio::time::sleep(d).await;
            } else {
                // Paced against the last wake a notification caused, not a poll's: the first
                // notification after quiet is acted on at once.
                tokio::time::sleep_until(wake.at + MIN_WAKE).await;
                wake.at = tokio::time::Instant::now();
            }
        }
    }
    let now_seen = *issued.borrow_and_update();
    events
        .notifications_dropped
        .inc_by(now_seen.wrapping_sub(wake.seen).saturating_sub(1));
    wake.seen = now_seen;
}

/// An order under the fleet's lease, given up when the lease is lost (another host may be
/// ordering by then).
async fn under_lease(
    job: &Job,
    fleet: &Fleet,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<Vec<u8>, AcmeError> {
    let mut keeper = fleet.keep_lease(&job.acme, &job.frontend);
    let attempt = tokio::select! {
        r = obtain(&job.challenges, &job.acme, Some(fleet), replaces) => r,
        _ = &mut keeper => Err(AcmeError::Refused("the fleet's lease was lost during the order".into())),
    };
    keeper.abort();
    attempt
}

/// Stores a new certificate for the fleet (until it expires); its end, Unix seconds.
async fn share(job: &Job, fleet: &Fleet, bundle: &[u8]) -> i64 {
    let (not_before, not_after) =
        Stored::parse(bundle).map_or((0, 0), |s| (s.not_before, s.not_after));
    let life = Duration::from_secs(
        (not_after - crate::sys::clock::unix_now())
            .max(60)
            .unsigned_abs(),
    );
    if let Err(e) = fleet
        .store
        .put(&Fleet::certificate_key(&job.acme), bundle, life)
        .await
    {
        tracing::warn!(frontend = %job.frontend, error = %e, "ACME certificate issued but not stored for the fleet yet; it is put there once the store answers");
    } else {
        fleet
            .record_newest(&job.acme, (not_before, not_after))
            .await;
    }
    not_after
}

/// Whether a certificate is so close to its end (a sixth of its life left, or none) that a host
/// cut off from the fleet's store orders alone.
fn urgent(stored: Option<&Stored>) -> bool {
    let Some(s) = stored else {
        return true;
    };
    let life = (s.not_after - s.not_before).max(0);
    s.not_after - crate::sys::clock::unix_now() < life / 6
}

/// What a look at the fleet's certificate did.
enum Adoption {
    /// The fleet's certificate is now this host's.
    Loaded,
    /// This host's was kept (newer, or the store has none).
    Kept,
    /// This host has none, and the fleet's was issued before the newest the fleet recorded
    /// storing: a replaced certificate written back by someone without the fleet's key (or a
    /// store that missed a write, which the host holding the newer one repairs).
    RefusedOlder { theirs: i64, newest: i64 },
}

impl Adoption {
    /// Says a refusal once when refusals begin (counting each); whether this one was refused.
    fn say_refused(&self, job: &Job, refusing_before: bool) -> bool {
        let Adoption::RefusedOlder { theirs, newest } = *self else {
            return false;
        };
        job.events.values_refused.inc();
        if !refusing_before {
            tracing::warn!(frontend = %job.frontend, not_before = theirs, newest, "refused the certificate in the fleet's store: it was issued before the newest the fleet stored (written back by someone without the fleet's key?)");
        }
        true
    }
}

/// Loads the fleet's certificate when it covers the names and ends later than this host's (or
/// this host has none and it is not older than the newest the fleet recorded); when this host's
/// ends later (the store missed a write), puts this host's there.
async fn adopt(job: &Job, fleet: &Fleet) -> Result<Adoption, String> {
    let key = Fleet::certificate_key(&job.acme);
    let ours = Stored::read(&job.acme.bundle).filter(|s| s.covers(&job.acme.names));
    let theirs_bytes = match fleet.store.read(&key).await? {
        Found::Value(v) => Some(v),
        Found::Absent => None,
        Found::Refused => {
            job.events.values_refused.inc();
            None
        }
    };
    let theirs = theirs_bytes
        .as_deref()
        .and_then(Stored::parse)
        .filter(|s| s.covers(&job.acme.names));
    match (&ours, &theirs) {
        (Some(o), Some(t)) if o.not_after >= t.not_after => {
            if o.not_after > t.not_after {
                repair(job, fleet, o).await;
            }
            Ok(Adoption::Kept)
        }
        (Some(o), None) => {
            repair(job, fleet, o).await;
            Ok(Adoption::Kept)
        }
        (_, Some(t)) => {
            // A host with a certificate only takes a later one, so only a host with none can be
            // handed a replaced one.
            if ours.is_none() {
                if let Some(newest) = fleet.newest(&job.acme).await? {
                    if newest > t.not_before {
                        return Ok(Adoption::RefusedOlder {
                            theirs: t.not_before,
                            newest,
                        });
                    }
                }
            }
            let bytes = theirs_bytes.unwrap_or_default();
            super::state::write_private(&job.acme.bundle, &bytes).map_err(|e| e.to_string())?;
            tracing::info!(frontend = %job.frontend, not_after = t.not_after, "loaded the fleet's ACME certificate from the store");
            Ok(Adoption::Loaded)
        }
        (None, None) => Ok(Adoption::Kept),
    }
}

/// Puts this host's certificate in the store, newer than what is there (a write that failed
/// after an order, or a host that had one before it joined the fleet).
async fn repair(job: &Job, fleet: &Fleet, ours: &Stored) {
    let now = crate::sys::clock::unix_now();
    if ours.not_after <= now {
        return;
    }
    if let Ok(bytes) = crate::sys::files::read(&job.acme.bundle) {
        let life = Duration::from_secs((ours.not_after - now).unsigned_abs());
        if fleet
            .store
            .put(&Fleet::certificate_key(&job.acme), &bytes, life)
            .await
            .is_ok()
        {
            fleet
                .record_newest(&job.acme, (ours.not_before, ours.not_after))
                .await;
            tracing::info!(frontend = %job.frontend, "put this host's ACME certificate in the fleet's store (newer than what was there)");
        }
    }
}

/// When a certificate falls due: in the window its CA suggests (ARI), else at two thirds of its
/// lifetime less this host's random part.
struct Schedule {
    jitter: f64,
    known: Option<ari::Known>,
}

/// How long asking the CA for a renewal window may take.
const ARI_LIMIT: Duration = Duration::from_secs(30);

impl Schedule {
    fn new() -> Schedule {
        Schedule {
            jitter: random_fraction(),
            known: None,
        }
    }

    /// After a failed order that named what it replaces: two thirds of the lifetime it is, until
    /// the CA is asked again.
    fn forget_replaces(&mut self) {
        if let Some(k) = &mut self.known {
            k.due = None;
        }
    }

    /// How long until `stored` is due (`None`: now, or there is none), and the certificate a
    /// renewal replaces when the CA's window set the time.
    async fn wait(
        &mut self,
        acme: &Acme,
        fleet: Option<&Fleet>,
        stored: Option<&Stored>,
    ) -> (Option<Duration>, Option<CertificateIdentifier<'static>>) {
        let Some(stored) = stored else {
            return (None, None);
        };
        let now = crate::sys::clock::unix_now();
        let fallback = wait_before_renewal(stored, now, self.jitter);
        let Some(id) = ari::identifier(stored) else {
            return (fallback, None);
        };
        if !self
            .known
            .as_ref()
            .is_some_and(|k| k.holds_for(stored, now))
        {
            // A CA that accepts and never answers must not stall the renewals.
            let asked =
                tokio::time::timeout(ARI_LIMIT, self.ask(acme, fleet, stored, &id, now)).await;
            self.known =
                Some(asked.unwrap_or_else(|_| {
                    ari::Known::new(stored, None, now, Duration::from_secs(600))
                }));
        }
        match self.known.as_ref().and_then(|k| k.due) {
            Some(due) => {
                let wait = (due > now).then(|| Duration::from_secs((due - now).unsigned_abs()));
                (wait, Some(id))
            }
            None => (fallback, None),
        }
    }

    /// Asks the CA for `stored`'s window (with the account there is; none yet: no ARI).
    async fn ask(
        &self,
        acme: &Acme,
        fleet: Option<&Fleet>,
        stored: &Stored,
        id: &CertificateIdentifier<'static>,
        now: i64,
    ) -> ari::Known {
        let Ok(Some(account)) = order::existing_account(acme, fleet).await else {
            return ari::Known::new(stored, None, now, ari::UNSUPPORTED_RECHECK);
        };
        match account.renewal_info(id).await {
            Ok((info, retry)) => {
                let due = ari::due_in_window(&info, self.jitter);
                tracing::info!(names = ?acme.names, due, "the CA's renewal window (ARI) sets the renewal");
                ari::Known::new(stored, Some(due), now, ari::recheck_after(retry))
            }
            Err(instant_acme::Error::Unsupported(_)) => {
                ari::Known::new(stored, None, now, ari::UNSUPPORTED_RECHECK)
            }
            Err(e) => {
                tracing::debug!(error = %e, "no renewal information from the CA; two thirds of the lifetime it is");
                ari::Known::new(stored, None, now, Duration::from_secs(600))
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
            ari: None,
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
