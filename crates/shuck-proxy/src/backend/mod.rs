//! Backend connections: a [`policy`] chooses among a frontend's backends, healthy ones first
//! (a backend whose connect failed sits out a cooldown), with a connect timeout. State is per
//! worker (no sharing, no locks); each worker learns about a dead backend on its own, which costs
//! at most one failed connect per worker per cooldown.

pub(crate) mod admin;
mod connect;
pub(crate) mod dns;
pub(crate) mod health;
pub(crate) mod policy;
pub(crate) mod tls_state;
mod upstream;

pub(crate) use upstream::{TlsToBackendError, Upstream};

use std::cell::Cell;
use std::io;
use std::time::{Duration, Instant};

use crate::config::backend::MAX_BACKENDS;
use crate::config::BackendPolicy;
use crate::config::{BackendAddr, Target};
use policy::Chooser;

// The health snapshot in `order` is a u128 with a bit per backend.
const _: () = assert!(MAX_BACKENDS <= u128::BITS as usize);

#[derive(Debug)]
pub(crate) struct BackendPool {
    addrs: Vec<BackendAddr>,
    down_until: Vec<Cell<Option<Instant>>>,
    /// Connections this worker has open to each backend (see [`Lease`]).
    open: Vec<Cell<u32>>,
    chooser: Chooser,
    connect_timeout: Duration,
    cooldown: Duration,
    /// The active checks' verdicts, when the backends are checked.
    health: Option<std::sync::Arc<health::Health>>,
    /// A bit per backend an operator drained or disabled: never chosen, even when every
    /// other one is down.
    out: u128,
}

/// A connection's claim on its backend: counted open until dropped.
#[derive(Debug)]
pub(crate) struct Lease<'p> {
    pool: &'p BackendPool,
    /// At most `MAX_BACKENDS`; with the next field 8 bytes, as the lease lives with every
    /// connection (its task's size is memory per idle connection).
    index: u32,
    /// How long the connect that succeeded took, in microseconds (zero until then).
    connected_us: u32,
}

impl<'p> Lease<'p> {
    fn take(pool: &'p BackendPool, index: usize) -> Lease<'p> {
        let open = &pool.open[index];
        open.set(open.get() + 1);
        Lease {
            pool,
            index: u32::try_from(index).unwrap_or(u32::MAX),
            connected_us: 0,
        }
    }

    /// The backend's position in the pool (and in the configuration's list).
    pub(crate) fn index(&self) -> usize {
        self.index as usize
    }

    /// How long the TCP connect to this backend took.
    pub(crate) fn connected_in(&self) -> Duration {
        Duration::from_micros(u64::from(self.connected_us))
    }

    /// The backend as written in the configuration.
    pub(crate) fn name(&self) -> &'p str {
        let pool: &'p BackendPool = self.pool;
        &pool.addrs[self.index()].name
    }

    /// What the connection showed of its backend, for `health_check.observe`.
    pub(crate) fn seen(&self, seen: health::Seen) {
        if let Some(h) = &self.pool.health {
            h.seen(self.index(), seen);
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let open = &self.pool.open[self.index()];
        open.set(open.get().saturating_sub(1));
    }
}

/// Every backend was tried and none answered.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// Every backend was tried and none answered.
    #[error("no backend reachable: {}", .attempts.iter().map(|(n, e)| format!("{n}: {e}")).collect::<Vec<_>>().join("; "))]
    Unreachable { attempts: Vec<(String, io::Error)> },
    /// This process (or the system) is out of descriptors: no backend is at fault, none is put
    /// in cooldown, and no other is tried.
    #[error("no descriptor for a backend connection: {0}")]
    NoDescriptors(io::Error),
    /// An operator took every backend out (`shuck ctl backend drain|disable`).
    #[error("no backend in service: an operator drained or disabled every one")]
    NoneInService,
}

/// EMFILE (the process's open-files limit) or ENFILE (the system's): this host's fault, never
/// the backend's.
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    const ENFILE: i32 = 23;
    const EMFILE: i32 = 24;
    matches!(e.raw_os_error(), Some(ENFILE | EMFILE))
}

/// A failure of this host rather than of the backend: out of descriptors, memory or buffers, or
/// of local ports (EADDRNOTAVAIL: every ephemeral port in use). Traffic takes no backend out for
/// it (`health_check.observe`).
fn local_failure(e: &io::Error) -> bool {
    out_of_descriptors(e)
        || matches!(
            e.raw_os_error(),
            Some(libc::ENOMEM | libc::ENOBUFS | libc::EADDRNOTAVAIL)
        )
}

/// Whether an error on an established backend connection is the backend's (or its path's): a
/// reset, a broken pipe, a timeout or an unreachable host, not one of this host's resources.
pub(crate) fn peer_failure(e: &io::Error) -> bool {
    use io::ErrorKind as K;
    !local_failure(e)
        && matches!(
            e.kind(),
            K::ConnectionReset
                | K::ConnectionAborted
                | K::BrokenPipe
                | K::NotConnected
                | K::TimedOut
                | K::HostUnreachable
                | K::NetworkUnreachable
        )
}

/// A connection to `target`: TCP with Nagle off, or a Unix socket.
pub(crate) async fn connect_to(target: &Target) -> io::Result<Upstream> {
    match target {
        Target::Tcp(addr) => connect::connect(*addr).await.map(Upstream::Tcp),
        Target::Unix(path) => tokio::net::UnixStream::connect(path)
            .await
            .map(Upstream::Unix),
        // Pools hold a host name's addresses (`dns::members`), never the name itself.
        Target::Name(name) => Err(io::Error::new(
            io::ErrorKind::AddrNotAvailable,
            format!("{name} is a host name, not an address"),
        )),
    }
}

impl BackendPool {
    #[cfg(test)]
    pub(crate) fn new(
        addrs: Vec<BackendAddr>,
        policy: BackendPolicy,
        connect_timeout: Duration,
        cooldown: Duration,
    ) -> Self {
        Self::checked(addrs, policy, connect_timeout, cooldown, None)
    }

    /// A pool whose backends the active checks may also take out (`health`).
    pub(crate) fn checked(
        addrs: Vec<BackendAddr>,
        policy: BackendPolicy,
        connect_timeout: Duration,
        cooldown: Duration,
        health: Option<std::sync::Arc<health::Health>>,
    ) -> Self {
        BackendPool {
            down_until: addrs.iter().map(|_| Cell::new(None)).collect(),
            open: addrs.iter().map(|_| Cell::new(0)).collect(),
            chooser: Chooser::new(policy, &addrs.iter().map(|a| a.weight).collect::<Vec<_>>()),
            addrs,
            connect_timeout,
            cooldown,
            health,
            out: 0,
        }
    }

    /// The same pool with the backends whose bits `out` has taken out by an operator.
    pub(crate) fn without(mut self, out: u128) -> Self {
        self.out = out;
        self
    }

    /// The name of backend `i`, as the configuration writes it (a host name's addresses as
    /// `name (address)`).
    pub(crate) fn name_of(&self, i: usize) -> Option<&str> {
        self.addrs.get(i).map(|a| a.name.as_str())
    }

    /// The active checks' verdicts this pool reads, if its backends are checked.
    pub(crate) fn health(&self) -> Option<&std::sync::Arc<health::Health>> {
        self.health.as_ref()
    }

    /// The order to try backends in: as the policy chooses among the healthy ones (not in
    /// cooldown, not taken out by the active checks), then among the rest (better a likely
    /// failure than a certain one). Health is read once, up front, so a backend that fails
    /// during this connection is not tried a second time.
    fn order(&self, now: Instant) -> impl Iterator<Item = usize> + '_ {
        let n = self.addrs.len();
        let all: u128 = if n == 128 { u128::MAX } else { (1 << n) - 1 } & !self.out;
        // A bit per backend (config allows at most MAX_BACKENDS): no allocation per connection.
        let up: u128 = (0..n)
            .filter(|&i| self.down_until[i].get().is_none_or(|t| t <= now))
            .filter(|&i| self.health.as_ref().is_none_or(|h| h.is_up(i)))
            .fold(0, |m, i| m | (1 << i))
            & all;
        let mut tried: u128 = 0;
        std::iter::from_fn(move || {
            let i = self
                .chooser
                .pick(up & !tried, &self.open)
                .or_else(|| self.chooser.pick(all & !up & !tried, &self.open))?;
            tried |= 1 << i;
            Some(i)
        })
    }

    pub(crate) async fn connect(&self) -> Result<(Upstream, Lease<'_>), ConnectError> {
        let mut attempts = Vec::new();
        let now = Instant::now();
        let n = self.addrs.len();
        for (tried, i) in self.order(now).enumerate() {
            let b = &self.addrs[i];
            // Counted and passed before the wait: connections choosing while this one connects
            // (a burst of handshakes finishing together) see it and go elsewhere.
            let mut lease = Lease::take(self, i);
            self.chooser.chose(i, n);
            let started = Instant::now();
            let res = match tokio::time::timeout(self.connect_timeout, connect_to(&b.addr)).await {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect timed out after {:?}", self.connect_timeout),
                )),
            };
            match res {
                Ok(s) => {
                    self.down_until[i].set(None);
                    let took = started.elapsed().as_micros();
                    lease.connected_us = u32::try_from(took).unwrap_or(u32::MAX);
                    return Ok((s, lease));
                }
                Err(e) if out_of_descriptors(&e) => return Err(ConnectError::NoDescriptors(e)),
                Err(e) => {
                    let left = n - tried - 1;
                    if left > 0 && crate::obs::log_limit::allow() {
                        tracing::warn!(backend = %b.name, error = %e, left, "backend connect failed; trying the next one");
                    }
                    self.down_until[i].set(Some(Instant::now() + self.cooldown));
                    if !local_failure(&e) {
                        lease.seen(health::Seen::Failed);
                    }
                    attempts.push((b.name.clone(), e));
                }
            }
        }
        if attempts.is_empty() {
            return Err(ConnectError::NoneInService);
        }
        Err(ConnectError::Unreachable { attempts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> BackendPool {
        let addrs = (0..n)
            .map(|i| BackendAddr {
                name: format!("b{i}"),
                addr: Target::Tcp(([127, 0, 0, 1], 1000 + i as u16).into()),
                weight: 1,
            })
            .collect();
        BackendPool::new(
            addrs,
            BackendPolicy::RoundRobin,
            Duration::from_secs(1),
            Duration::from_secs(5),
        )
    }

    #[test]
    fn order_starts_at_the_cursor_and_puts_down_backends_last() {
        let p = pool(3);
        let now = Instant::now();
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![0, 1, 2]);
        p.chooser.chose(0, 3);
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![1, 2, 0]);
        p.down_until[2].set(Some(now + Duration::from_secs(5)));
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![1, 0, 2]);
        p.chooser.chose(1, 3);
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![0, 1, 2]);
        // The cooldown is over: back in the ring.
        assert_eq!(
            p.order(now + Duration::from_secs(6)).collect::<Vec<_>>(),
            vec![2, 0, 1]
        );
    }

    /// A loopback address that was just free: nothing listens there.
    fn dead_addr() -> std::net::SocketAddr {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    }

    /// A pool of named addresses with a 2 s connect timeout.
    fn named(
        list: &[(&str, std::net::SocketAddr)],
        policy: BackendPolicy,
        cooldown: Duration,
    ) -> BackendPool {
        let addrs = list
            .iter()
            .map(|(name, addr)| BackendAddr {
                name: (*name).to_string(),
                addr: Target::Tcp(*addr),
                weight: 1,
            })
            .collect();
        BackendPool::new(addrs, policy, Duration::from_secs(2), cooldown)
    }

    #[tokio::test]
    async fn a_down_backend_shares_its_load_evenly() {
        let a = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = named(
            &[
                ("a", a.local_addr().unwrap()),
                ("dead", dead_addr()),
                ("c", c.local_addr().unwrap()),
            ],
            BackendPolicy::RoundRobin,
            Duration::from_secs(60),
        );
        let mut counts = std::collections::HashMap::new();
        for _ in 0..12 {
            let (_s, b) = p.connect().await.unwrap();
            *counts.entry(b.name().to_string()).or_insert(0) += 1;
        }
        assert_eq!(counts.get("a"), Some(&6), "{counts:?}");
        assert_eq!(counts.get("c"), Some(&6), "{counts:?}");
    }

    #[test]
    fn a_backend_taken_out_by_an_operator_is_never_tried() {
        let p = pool(3).without(0b010);
        let now = Instant::now();
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![0, 2]);
        // Not even as the last resort when the others are in cooldown.
        p.down_until[0].set(Some(now + Duration::from_secs(5)));
        p.down_until[2].set(Some(now + Duration::from_secs(5)));
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![0, 2]);
    }

    #[tokio::test]
    async fn each_backend_is_tried_once_per_connection() {
        let p = named(
            &[("dead", dead_addr())],
            BackendPolicy::RoundRobin,
            Duration::from_secs(5),
        );
        let attempts = |e: ConnectError| match e {
            ConnectError::Unreachable { attempts } => attempts.len(),
            ConnectError::NoDescriptors(e) => panic!("{e}"),
            ConnectError::NoneInService => panic!("none in service"),
        };
        assert_eq!(attempts(p.connect().await.unwrap_err()), 1);
        // Also when it was already in cooldown before the attempt.
        assert_eq!(attempts(p.connect().await.unwrap_err()), 1);
    }

    #[test]
    fn running_out_of_descriptors_is_told_from_a_backend_failure() {
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(24)));
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(23)));
        assert!(!out_of_descriptors(&io::Error::from(
            io::ErrorKind::ConnectionRefused
        )));
    }

    #[tokio::test]
    async fn falls_over_to_the_next_backend() {
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = named(
            &[("dead", dead_addr()), ("live", live.local_addr().unwrap())],
            BackendPolicy::RoundRobin,
            Duration::from_secs(5),
        );
        let (_s, b) = p.connect().await.unwrap();
        assert_eq!(b.name(), "live");
        assert!(p.down_until[0].get().is_some());
    }

    /// Three live backends; `held` connections are opened and kept, then `more` are opened.
    /// Returns how many of each went to each backend, by name.
    async fn spread(policy: BackendPolicy, release_a: bool) -> Vec<(String, usize)> {
        let ls: Vec<tokio::net::TcpListener> = listeners(3).await;
        let names = ["a", "b", "c"];
        let list: Vec<(&str, std::net::SocketAddr)> = names
            .iter()
            .zip(&ls)
            .map(|(n, l)| (*n, l.local_addr().unwrap()))
            .collect();
        let p = named(&list, policy, Duration::from_secs(5));
        // Six long-lived connections: two on each backend either way.
        let mut held = Vec::new();
        for _ in 0..6 {
            held.push(p.connect().await.unwrap());
        }
        if release_a {
            held.retain(|(_, lease)| lease.name() != "a");
        }
        let mut later = Vec::new();
        for _ in 0..3 {
            later.push(p.connect().await.unwrap());
        }
        names
            .iter()
            .map(|n| {
                let count = later.iter().filter(|(_, l)| l.name() == *n).count();
                ((*n).to_string(), count)
            })
            .collect()
    }

    async fn listeners(n: usize) -> Vec<tokio::net::TcpListener> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap());
        }
        v
    }

    #[tokio::test]
    async fn least_connections_fills_the_backend_whose_connections_ended() {
        // Backend a's two connections end while b's and c's stay open: the next connections go
        // to a until it is level with the others, where round-robin keeps taking turns.
        let lc = spread(BackendPolicy::LeastConnections, true).await;
        assert_eq!(
            lc,
            vec![("a".into(), 2), ("b".into(), 1), ("c".into(), 0)],
            "least_connections"
        );
        let rr = spread(BackendPolicy::RoundRobin, true).await;
        assert_eq!(
            rr,
            vec![("a".into(), 1), ("b".into(), 1), ("c".into(), 1)],
            "round_robin"
        );
    }

    #[tokio::test]
    async fn connections_still_connecting_count_for_least_connections() {
        // Three handshakes finish in the same tick and connect at once: each must see the
        // others' choice, not all go to the backend that looked least loaded before any of them.
        let ls = listeners(3).await;
        let list: Vec<(&str, std::net::SocketAddr)> = ["a", "b", "c"]
            .into_iter()
            .zip(&ls)
            .map(|(n, l)| (n, l.local_addr().unwrap()))
            .collect();
        let p = named(
            &list,
            BackendPolicy::LeastConnections,
            Duration::from_secs(5),
        );
        let (x, y, z) = tokio::join!(p.connect(), p.connect(), p.connect());
        let mut names: Vec<&str> = [&x, &y, &z]
            .iter()
            .map(|r| r.as_ref().unwrap().1.name())
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["a", "b", "c"]);
    }
}
