//! One worker's connection to the store, made by shuck (`transport`: TCP, TLS verified against
//! the system's CAs, or a Unix socket) and handed to the redis crate's multiplexed connection,
//! rather than through the crate's `ConnectionManager`, for two reasons:
//! - every byte the store sends passes [`replies::Bounded`] before the crate buffers it: a store
//!   that answers `$6000000000` and streams must not cost gigabytes;
//! - shuck decides when a connection ends: when it is suspect (a reply refused, a lookup that
//!   timed out may have left a reply half-read in front of the next ones), and when the store is
//!   no longer wanted (a reload replaced it). The connection's task is aborted, which closes the
//!   socket; the crate's manager kept its connection open for its own life.
//!
//! Connecting runs as a task of the worker's runtime, at most one at a time, retried with a
//! back-off of 100 ms doubling to 5 s after a failure.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::endpoint::{self, Endpoint};
use super::transport::{open, Driver};
use tokio::sync::watch;
use tokio::time::Instant;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const MIN_DELAY: Duration = Duration::from_millis(100);
const MAX_DELAY: Duration = Duration::from_secs(5);

/// A connection in use: the redis crate's handle, and whether the store sent a reply over the
/// bound on it (then it has ended).
#[derive(Clone)]
pub(super) struct Conn {
    pub redis: MultiplexedConnection,
    refused: Arc<AtomicBool>,
    id: u64,
}

impl Conn {
    /// Whether the connection ended because the store's reply was over the bound.
    pub(super) fn refused(&self) -> bool {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The connection of the moment and its task (aborted when it is replaced or dropped).
struct Open {
    conn: Conn,
    task: tokio::task::AbortHandle,
}

impl Drop for Open {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct State {
    open: Option<Open>,
    connecting: bool,
    /// No new attempt before this (after a failure).
    retry_at: Option<Instant>,
    delay: Duration,
    /// Why the last attempt failed, for the breaker's line.
    last_error: Option<String>,
    next_id: u64,
}

/// One worker's connection to the store.
pub(super) struct Link {
    endpoint: Endpoint,
    state: Mutex<State>,
    /// Bumped when an attempt ends (a connection, or a failure).
    settled: watch::Sender<u64>,
}

/// Why there is no connection to use now.
#[derive(Debug)]
pub(super) enum Unavailable {
    /// Still connecting when the caller's time was up.
    Connecting,
    /// The last attempt failed; the next waits for its back-off.
    Failed(String),
}

impl Link {
    pub(super) fn new(endpoint: Endpoint) -> Arc<Link> {
        Arc::new(Link {
            endpoint,
            state: Mutex::new(State::default()),
            settled: watch::Sender::new(0),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts connecting if there is no connection, none is being made and no back-off holds.
    /// Needs the worker's runtime.
    pub(super) fn warm_up(self: &Arc<Self>) {
        let mut s = self.state();
        let due = s.retry_at.is_none_or(|t| Instant::now() >= t);
        if s.open.is_some() || s.connecting || !due {
            return;
        }
        s.connecting = true;
        tokio::spawn(connect(Arc::downgrade(self)));
    }

    /// The connection, waiting for one being made until `deadline`.
    pub(super) async fn connected_by(
        self: &Arc<Self>,
        deadline: Instant,
    ) -> Result<Conn, Unavailable> {
        let mut settled = self.settled.subscribe();
        loop {
            self.warm_up();
            {
                let s = self.state();
                if let Some(o) = &s.open {
                    return Ok(o.conn.clone());
                }
                if !s.connecting {
                    let why = s
                        .last_error
                        .clone()
                        .unwrap_or_else(|| "not connected".into());
                    return Err(Unavailable::Failed(why));
                }
            }
            if tokio::time::timeout_at(deadline, settled.changed())
                .await
                .is_err()
            {
                return Err(Unavailable::Connecting);
            }
        }
    }

    /// Ends `conn` if it is still the connection in use (a reply refused or timed out on it):
    /// the next use connects again.
    pub(super) fn close(&self, conn: &Conn) {
        let mut s = self.state();
        if s.open.as_ref().is_some_and(|o| o.conn.id == conn.id) {
            s.open = None;
        }
    }

    fn settle(&self, result: Result<Open, String>) {
        let mut s = self.state();
        s.connecting = false;
        match result {
            Ok(open) => {
                s.open = Some(open);
                s.retry_at = None;
                s.delay = Duration::ZERO;
                s.last_error = None;
            }
            Err(e) => {
                s.delay = (s.delay * 2).clamp(MIN_DELAY, MAX_DELAY);
                s.retry_at = Some(Instant::now() + s.delay);
                s.last_error = Some(e);
            }
        }
        drop(s);
        self.settled.send_modify(|n| *n += 1);
    }
}

/// Settles an attempt that ended without settling (its task panicked or was aborted with its
/// runtime), so the link does not wait for it for ever.
struct Unsettled(Weak<Link>);

impl Drop for Unsettled {
    fn drop(&mut self) {
        if let Some(l) = self.0.upgrade() {
            if l.state().connecting {
                l.settle(Err("the connection attempt ended early".into()));
            }
        }
    }
}

/// One attempt; the link may be gone by the time it ends (a reload replaced the store).
async fn connect(link: Weak<Link>) {
    let _unsettled = Unsettled(link.clone());
    let Some(endpoint) = link.upgrade().map(|l| l.endpoint.clone()) else {
        return;
    };
    let id = link.upgrade().map_or(0, |l| {
        let mut s = l.state();
        s.next_id += 1;
        s.next_id
    });
    let refused = Arc::new(AtomicBool::new(false));
    let attempt = tokio::time::timeout(CONNECT_TIMEOUT, open_at(&endpoint, refused.clone())).await;
    let result = match attempt {
        Ok(Ok((redis, driver))) => Ok(Open {
            conn: Conn { redis, refused, id },
            task: tokio::spawn(driver).abort_handle(),
        }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(format!("no connection within {CONNECT_TIMEOUT:?}")),
    };
    if let Some(l) = link.upgrade() {
        l.settle(result);
    }
}

/// Connects to the server `endpoint` names now; with Sentinel, only to a master.
async fn open_at(
    endpoint: &Endpoint,
    refused: Arc<AtomicBool>,
) -> Result<(MultiplexedConnection, Driver), String> {
    let (info, tls_name) = endpoint.resolve().await?;
    let (mut conn, mut driver) = open(&info, tls_name.as_deref(), refused).await?;
    if endpoint.needs_master_check() {
        // The driver runs beside the check (a connection's task is spawned only once it is kept).
        let master = tokio::select! {
            m = endpoint::is_master(&mut conn) => m?,
            () = &mut driver => return Err("closed during the ROLE check".into()),
        };
        if !master {
            return Err(format!(
                "{} is not the master (a failover under way?); asking the sentinels again",
                info.addr()
            ));
        }
    }
    Ok((conn, driver))
}
