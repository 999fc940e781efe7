//! The relayed connections of one worker that it may close early when the process nears
//! `max_connections`: each registers while it relays, with its source (an address or the
//! prefix it is in) and when it last moved a byte. When slots must be freed, the worker closes
//! connections idle for at least a minimum time, always taking the next one from the source
//! that holds the most of them here, oldest idle first: a source holding hundreds of idle
//! connections loses them before a source holding one loses its only one.
//!
//! nginx does the same at its connection limit (it closes idle keep-alive connections, oldest
//! first); the source ordering is ours. One worker's connections only: the workers share no
//! lock, and SO_REUSEPORT spreads a source's connections over them, so each worker frees its
//! share. Entries live in a slab that grows to the most connections the worker relayed at once
//! and is reused after, so registering allocates nothing once warm.
//!
//! The same registry answers the admin socket: each entry carries what the worker wants shown
//! of its connection (`T`: the worker's own type), the bytes it moved, and an operator may close
//! the connections a filter picks (`shuck ctl connections close`).

use std::cell::RefCell;
use std::collections::{BinaryHeap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::task::{Context, Waker};
use std::time::Duration;

use slab::Slab;
use tokio::time::Instant;

/// Why the worker closes a connection before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Close {
    /// Idle, to free a slot near `max_connections`.
    Idle,
    /// An operator asked (`shuck ctl connections close`, a disabled backend).
    Operator,
}

/// One registered connection.
#[derive(Debug)]
struct Entry<T> {
    source: IpAddr,
    started: Instant,
    active_at: Instant,
    /// Set by the worker: the connection is to close, and why.
    closing: Option<Close>,
    /// The relay's task, woken when `closing` is set.
    waker: Option<Waker>,
    /// Bytes moved: client to backend, backend to client.
    moved: (u64, u64),
    info: T,
}

/// A worker's relayed connections.
#[derive(Debug)]
pub(crate) struct IdleSet<T = ()> {
    entries: RefCell<Slab<Entry<T>>>,
}

impl<T> Default for IdleSet<T> {
    fn default() -> Self {
        IdleSet {
            entries: RefCell::new(Slab::new()),
        }
    }
}

/// One connection's place in the set while it relays; dropping it leaves the set.
#[derive(Debug)]
pub(crate) struct Registration<'a, T = ()> {
    set: &'a IdleSet<T>,
    key: usize,
}

/// What the set knows of one connection, for a listing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seen {
    pub(crate) age: Duration,
    pub(crate) idle: Duration,
    /// Bytes moved: client to backend, backend to client.
    pub(crate) moved: (u64, u64),
    /// Told to close and not gone yet.
    pub(crate) closing: bool,
}

/// What one round of freeing slots did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Freed {
    /// Connections told to close.
    pub(crate) closed: usize,
    /// The source that held the most connections here, and how many, before the round.
    pub(crate) heaviest: Option<(IpAddr, usize)>,
}

/// The source `ip` counts as: the address with only its first `v4` (IPv4) or `v6` (IPv6) bits
/// kept; an IPv4-mapped IPv6 address counts as IPv4.
pub(crate) fn source_of(ip: IpAddr, (v4, v6): (u8, u8)) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(a) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(v4.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(v6.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
        }
    }
}

impl<T> IdleSet<T> {
    /// Registers a connection from `source` that starts relaying now, described by `info`.
    pub(crate) fn register(&self, source: IpAddr, info: T) -> Registration<'_, T> {
        let now = Instant::now();
        let key = self.entries.borrow_mut().insert(Entry {
            source,
            started: now,
            active_at: now,
            closing: None,
            waker: None,
            moved: (0, 0),
            info,
        });
        Registration { set: self, key }
    }

    /// Calls `f` with each connection's description and what the set knows of it.
    pub(crate) fn each(&self, mut f: impl FnMut(&T, Seen)) {
        let now = Instant::now();
        for (_, e) in self.entries.borrow().iter() {
            let seen = Seen {
                age: now.saturating_duration_since(e.started),
                idle: now.saturating_duration_since(e.active_at),
                moved: e.moved,
                closing: e.closing.is_some(),
            };
            f(&e.info, seen);
        }
    }

    /// Tells every connection `pick` chooses to close (an operator's close); how many.
    pub(crate) fn close_where(&self, mut pick: impl FnMut(&T) -> bool) -> usize {
        let mut closed = 0;
        for (_, e) in self.entries.borrow_mut().iter_mut() {
            if e.closing == Some(Close::Operator) || !pick(&e.info) {
                continue;
            }
            e.closing = Some(Close::Operator);
            if let Some(w) = e.waker.take() {
                w.wake();
            }
            closed += 1;
        }
        closed
    }

    /// Connections registered now.
    pub(crate) fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    /// Tells connections idle for at least `min_idle` to close until `want` are on their way
    /// out (those told before and still closing count), each time taking the oldest idle one
    /// of the source that holds the most connections still open here; when that source has
    /// no connection idle long enough, the next one's. Work in proportion to the connections
    /// registered; called once a second at most, and only near the limit.
    pub(crate) fn free(&self, want: usize, min_idle: Duration) -> Freed {
        let now = Instant::now();
        let mut entries = self.entries.borrow_mut();
        let closing = entries.iter().filter(|(_, e)| e.closing.is_some()).count();
        let want = want.saturating_sub(closing);
        let mut held: HashMap<IpAddr, usize> = HashMap::new();
        let mut idle: HashMap<IpAddr, Vec<(Instant, usize)>> = HashMap::new();
        for (key, e) in entries.iter().filter(|(_, e)| e.closing.is_none()) {
            *held.entry(e.source).or_default() += 1;
            if now.saturating_duration_since(e.active_at) >= min_idle {
                idle.entry(e.source).or_default().push((e.active_at, key));
            }
        }
        let heaviest = held.iter().max_by_key(|(_, n)| **n).map(|(s, n)| (*s, *n));
        // Newest last, so `pop` takes the oldest.
        for list in idle.values_mut() {
            list.sort_unstable_by(|a, b| b.cmp(a));
        }
        let mut heap: BinaryHeap<(usize, IpAddr)> = idle.keys().map(|s| (held[s], *s)).collect();
        let mut closed = 0;
        while closed < want {
            let Some((n, source)) = heap.pop() else { break };
            let Some((_, key)) = idle.get_mut(&source).and_then(Vec::pop) else {
                continue;
            };
            let e = &mut entries[key];
            e.closing = Some(Close::Idle);
            if let Some(w) = e.waker.take() {
                w.wake();
            }
            closed += 1;
            if n > 1 {
                heap.push((n - 1, source));
            }
        }
        Freed { closed, heaviest }
    }
}

/// What a relay tells of its activity, and asks: a registered connection, or `()` for one
/// nobody may close early (a generic rather than an `Option`, so a relay without one stays
/// `Send`).
pub(crate) trait Watched {
    /// The connection moved bytes at `now` (`up` from the client, `down` from the backend,
    /// since the last call): it is no longer idle, and a close asked of it to free a slot is
    /// called off (an operator's is not).
    fn touch(&self, now: Instant, up: u64, down: u64);
    /// Whether it is to close, and why; if not, `cx`'s task is woken when it is.
    fn poll_evicted(&self, cx: &Context<'_>) -> Option<Close>;
}

impl Watched for () {
    fn touch(&self, _: Instant, _: u64, _: u64) {}
    fn poll_evicted(&self, _: &Context<'_>) -> Option<Close> {
        None
    }
}

impl<T> Watched for Registration<'_, T> {
    fn touch(&self, now: Instant, up: u64, down: u64) {
        if let Some(e) = self.set.entries.borrow_mut().get_mut(self.key) {
            e.active_at = now;
            e.moved.0 += up;
            e.moved.1 += down;
            if e.closing == Some(Close::Idle) {
                e.closing = None;
            }
        }
    }

    fn poll_evicted(&self, cx: &Context<'_>) -> Option<Close> {
        let mut entries = self.set.entries.borrow_mut();
        let e = entries.get_mut(self.key)?;
        if e.closing.is_some() {
            return e.closing;
        }
        match &e.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => e.waker = Some(cx.waker().clone()),
        }
        None
    }
}

impl<T> Drop for Registration<'_, T> {
    fn drop(&mut self) {
        self.set.entries.borrow_mut().try_remove(self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn evicted(regs: &[Registration<'_>]) -> Vec<usize> {
        let cx = Context::from_waker(Waker::noop());
        (0..regs.len())
            .filter(|i| regs[*i].poll_evicted(&cx).is_some())
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn the_heaviest_source_loses_its_oldest_idle_connections_first() {
        let set = IdleSet::default();
        // 0: a light source, idle longest; 1..=4: a heavy one; 5, 6: a middling one.
        let mut regs = vec![set.register(ip("192.0.2.1"), ())];
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..4 {
            regs.push(set.register(ip("198.51.100.7"), ()));
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        regs.push(set.register(ip("203.0.113.5"), ()));
        regs.push(set.register(ip("203.0.113.5"), ()));
        tokio::time::advance(Duration::from_secs(6)).await;
        let freed = set.free(3, Duration::from_secs(5));
        assert_eq!(freed.closed, 3);
        assert_eq!(freed.heaviest, Some((ip("198.51.100.7"), 4)));
        // Two from the heavy source (4 → 2 held), then it ties with the middling one (2): either.
        let out = evicted(&regs);
        assert!(out.starts_with(&[1, 2]), "{out:?}");
        assert!(!out.contains(&0), "{out:?}");
        // Already told: not counted again; the rest: one more from each source of two.
        let freed = set.free(10, Duration::from_secs(5));
        assert_eq!(freed.closed, 4);
        assert_eq!(evicted(&regs).len(), 7);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_moved_bytes_lately_is_kept() {
        let set = IdleSet::default();
        let a = set.register(ip("192.0.2.1"), ());
        let b = set.register(ip("192.0.2.1"), ());
        tokio::time::advance(Duration::from_secs(8)).await;
        b.touch(Instant::now(), 0, 0);
        let freed = set.free(2, Duration::from_secs(5));
        assert_eq!(freed.closed, 1);
        let cx = Context::from_waker(Waker::noop());
        assert_eq!(a.poll_evicted(&cx), Some(Close::Idle));
        assert_eq!(b.poll_evicted(&cx), None);
        drop(a);
        assert_eq!(set.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn connections_still_closing_count_and_activity_calls_a_close_off() {
        let set = IdleSet::default();
        let regs: Vec<_> = (0..4).map(|_| set.register(ip("192.0.2.1"), ())).collect();
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(set.free(2, Duration::from_secs(5)).closed, 2);
        // Those two have not closed yet: asking for two again closes none more.
        assert_eq!(set.free(2, Duration::from_secs(5)).closed, 0);
        assert_eq!(set.free(3, Duration::from_secs(5)).closed, 1);
        // One of them moved a byte: no longer closing, and not idle.
        regs[0].touch(Instant::now(), 0, 0);
        let cx = Context::from_waker(Waker::noop());
        assert_eq!(regs[0].poll_evicted(&cx), None);
        assert_eq!(evicted(&regs), vec![1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_operator_closes_what_the_filter_picks_and_activity_does_not_call_it_off() {
        let set: IdleSet<u8> = IdleSet::default();
        let regs: Vec<_> = (0..4u8).map(|i| set.register(ip("192.0.2.1"), i)).collect();
        regs[1].touch(Instant::now(), 5, 7);
        assert_eq!(set.close_where(|i| i % 2 == 1), 2);
        // Asked again: those already closing are not counted twice.
        assert_eq!(set.close_where(|i| i % 2 == 1), 0);
        regs[1].touch(Instant::now(), 0, 0);
        let cx = Context::from_waker(Waker::noop());
        let closing: Vec<Option<Close>> = regs.iter().map(|r| r.poll_evicted(&cx)).collect();
        assert_eq!(
            closing,
            [None, Some(Close::Operator), None, Some(Close::Operator)]
        );
        let mut listed = Vec::new();
        set.each(|i, seen| listed.push((*i, seen.moved.0, seen.closing)));
        listed.sort_unstable();
        assert_eq!(
            listed,
            [(0, 0, false), (1, 5, true), (2, 0, false), (3, 0, true)]
        );
    }

    #[test]
    fn sources_are_prefixes() {
        assert_eq!(source_of(ip("10.1.2.3"), (24, 64)), ip("10.1.2.0"));
        assert_eq!(source_of(ip("::ffff:10.1.2.3"), (32, 64)), ip("10.1.2.3"));
        assert_eq!(
            source_of(ip("2001:db8:1:2:3::4"), (32, 64)),
            ip("2001:db8:1:2::")
        );
        assert_eq!(source_of(ip("10.1.2.3"), (0, 0)), ip("0.0.0.0"));
    }
}
