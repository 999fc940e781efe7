//! Backend connections: round-robin over a frontend's backends, skipping ones that failed
//! recently, with a connect timeout. State is per worker (no sharing, no locks); each worker learns
//! about a dead backend on its own, which costs at most one failed connect per worker per cooldown.

use std::cell::Cell;
use std::io;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::config::backend::MAX_BACKENDS;
use crate::config::BackendAddr;

// The health snapshot in `order` is a u128 with a bit per backend.
const _: () = assert!(MAX_BACKENDS <= u128::BITS as usize);

#[derive(Debug)]
pub struct BackendPool {
    addrs: Vec<BackendAddr>,
    down_until: Vec<Cell<Option<Instant>>>,
    next: Cell<usize>,
    connect_timeout: Duration,
    cooldown: Duration,
}

/// Every backend was tried and none answered.
#[derive(Debug, thiserror::Error)]
#[error("no backend reachable: {}", .attempts.iter().map(|(n, e)| format!("{n}: {e}")).collect::<Vec<_>>().join("; "))]
pub struct ConnectError {
    pub attempts: Vec<(String, io::Error)>,
}

impl BackendPool {
    pub fn new(addrs: Vec<BackendAddr>, connect_timeout: Duration, cooldown: Duration) -> Self {
        let down_until = addrs.iter().map(|_| Cell::new(None)).collect();
        BackendPool {
            addrs,
            down_until,
            next: Cell::new(0),
            connect_timeout,
            cooldown,
        }
    }

    /// The order to try backends in: healthy ones in ring order from the cursor, then the ones in
    /// cooldown (better a likely failure than a certain one). Health is read once, up front, so
    /// a backend that fails during this connection is not tried a second time.
    fn order(&self, now: Instant) -> impl Iterator<Item = usize> + '_ {
        let n = self.addrs.len();
        let start = self.next.get();
        // A bit per backend (config allows at most MAX_BACKENDS): no allocation per connection.
        let up: u128 = (0..n)
            .filter(|&i| self.down_until[i].get().is_none_or(|t| t <= now))
            .fold(0, |m, i| m | (1 << i));
        let ring = move || (0..n).map(move |k| (start + k) % n);
        let is_up = move |i: &usize| up & (1 << *i) != 0;
        ring()
            .filter(is_up)
            .chain(ring().filter(move |i| !is_up(i)))
    }

    pub async fn connect(&self) -> Result<(TcpStream, &BackendAddr), ConnectError> {
        let mut attempts = Vec::new();
        let now = Instant::now();
        let n = self.addrs.len();
        for (tried, i) in self.order(now).enumerate() {
            let b = &self.addrs[i];
            let res = match tokio::time::timeout(self.connect_timeout, TcpStream::connect(b.addr))
                .await
            {
                Ok(r) => r,
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connect timed out after {:?}", self.connect_timeout),
                )),
            };
            match res {
                Ok(s) => {
                    self.down_until[i].set(None);
                    // Next time start after the one chosen, so a down backend's share is spread
                    // over the healthy ones instead of all going to its successor.
                    self.next.set((i + 1) % n);
                    // Nagle would hold small answers back ~40 ms (seed round 2's stud latency).
                    let _ = s.set_nodelay(true);
                    return Ok((s, b));
                }
                Err(e) => {
                    let left = n - tried - 1;
                    if left > 0 && crate::log_limit::allow() {
                        tracing::warn!(backend = %b.name, error = %e, left, "backend connect failed; trying the next one");
                    }
                    self.down_until[i].set(Some(Instant::now() + self.cooldown));
                    attempts.push((b.name.clone(), e));
                }
            }
        }
        Err(ConnectError { attempts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize) -> BackendPool {
        let addrs = (0..n)
            .map(|i| BackendAddr {
                name: format!("b{i}"),
                addr: ([127, 0, 0, 1], 1000 + i as u16).into(),
            })
            .collect();
        BackendPool::new(addrs, Duration::from_secs(1), Duration::from_secs(5))
    }

    #[test]
    fn order_starts_at_the_cursor_and_puts_down_backends_last() {
        let p = pool(3);
        let now = Instant::now();
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![0, 1, 2]);
        p.next.set(1);
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![1, 2, 0]);
        p.down_until[2].set(Some(now + Duration::from_secs(5)));
        assert_eq!(p.order(now).collect::<Vec<_>>(), vec![1, 0, 2]);
        p.next.set(2);
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
    fn named(list: &[(&str, std::net::SocketAddr)], cooldown: Duration) -> BackendPool {
        let addrs = list
            .iter()
            .map(|(name, addr)| BackendAddr {
                name: (*name).to_string(),
                addr: *addr,
            })
            .collect();
        BackendPool::new(addrs, Duration::from_secs(2), cooldown)
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
            Duration::from_secs(60),
        );
        let mut counts = std::collections::HashMap::new();
        for _ in 0..12 {
            let (_s, b) = p.connect().await.unwrap();
            *counts.entry(b.name.clone()).or_insert(0) += 1;
        }
        assert_eq!(counts.get("a"), Some(&6), "{counts:?}");
        assert_eq!(counts.get("c"), Some(&6), "{counts:?}");
    }

    #[tokio::test]
    async fn each_backend_is_tried_once_per_connection() {
        let p = named(&[("dead", dead_addr())], Duration::from_secs(5));
        let e = p.connect().await.unwrap_err();
        assert_eq!(e.attempts.len(), 1, "{e}");
        // Also when it was already in cooldown before the attempt.
        let e = p.connect().await.unwrap_err();
        assert_eq!(e.attempts.len(), 1, "{e}");
    }

    #[tokio::test]
    async fn falls_over_to_the_next_backend() {
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = named(
            &[("dead", dead_addr()), ("live", live.local_addr().unwrap())],
            Duration::from_secs(5),
        );
        let (_s, b) = p.connect().await.unwrap();
        assert_eq!(b.name, "live");
        assert!(p.down_until[0].get().is_some());
    }
}
