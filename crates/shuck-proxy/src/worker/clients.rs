//! Per-client counts for `per_client`, shared by every worker of a frontend: open connections
//! and the full-handshake rate of each client (an address, or the prefix it is in).
//!
//! The table is two rows of a fixed number of slots (`per_client_table`), allocated once: a
//! million source addresses cannot grow it. A client's slot in each row comes from a keyed hash
//! (random keys per process, so nobody can pick addresses that share slots); two clients share
//! a slot now and then, and a client is only held back when *both* its slots are at the limit
//! (a count-min sketch: counts are never under-estimated, and over-estimated only by the
//! clients it collides with in both rows). No lock: each slot is two atomics, so workers never
//! wait on one another. The rate is GCRA (one "theoretical arrival time" per slot): a burst of
//! `burst` handshakes at once, then one per `interval`.

use std::hash::{BuildHasher, Hash};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::config::{HandshakeRate, PerClient};

/// One slot: open connections, and when the rate's budget is next whole (µs since `epoch`).
#[derive(Debug, Default)]
struct Slot {
    connections: AtomicU32,
    tat_us: AtomicU64,
}

const ROWS: usize = 2;

/// The counts of one frontend's clients.
#[derive(Debug)]
pub(crate) struct ClientTable {
    slots: Box<[Slot]>,
    mask: usize,
    hasher: std::hash::RandomState,
    epoch: Instant,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

/// Where one client's counts are: its slot in each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientKey([u32; ROWS]);

/// An open connection counted against its client; the count goes back on drop.
#[derive(Debug)]
pub(crate) struct ClientHold {
    table: Arc<ClientTable>,
    key: ClientKey,
}

impl ClientTable {
    pub(crate) fn new(p: &PerClient) -> ClientTable {
        let per_row = p.table.next_power_of_two();
        ClientTable {
            slots: (0..per_row * ROWS).map(|_| Slot::default()).collect(),
            mask: per_row - 1,
            hasher: std::hash::RandomState::new(),
            epoch: Instant::now(),
            ipv4_prefix: p.ipv4_prefix,
            ipv6_prefix: p.ipv6_prefix,
        }
    }

    /// Whether this table was made for `p`'s size and prefixes (a reload keeps it then).
    pub(crate) fn fits(&self, p: &PerClient) -> bool {
        self.mask + 1 == p.table.next_power_of_two()
            && self.ipv4_prefix == p.ipv4_prefix
            && self.ipv6_prefix == p.ipv6_prefix
    }

    /// Bytes the table holds.
    #[cfg(test)]
    fn size(&self) -> usize {
        size_of_val(&*self.slots)
    }

    /// The client `ip` counts as: its prefix (IPv4-mapped IPv6 addresses as IPv4).
    pub(crate) fn key(&self, ip: IpAddr) -> ClientKey {
        let client = match ip.to_canonical() {
            IpAddr::V4(v4) => IpAddr::V4(mask_v4(v4, self.ipv4_prefix)),
            IpAddr::V6(v6) => IpAddr::V6(mask_v6(v6, self.ipv6_prefix)),
        };
        let mut h = self.hasher.build_hasher();
        client.hash(&mut h);
        let bits = std::hash::Hasher::finish(&h);
        // Two independent-enough indexes from the two halves of one 64-bit keyed hash.
        let per_row = self.mask + 1;
        let lo = (bits as usize) & self.mask;
        let hi = ((bits >> 32) as usize) & self.mask;
        ClientKey([to_u32(lo), to_u32(per_row + hi)])
    }

    fn slot(&self, i: u32) -> &Slot {
        &self.slots[i as usize]
    }

    /// Counts one more open connection for `key`, unless that takes it past `limit`.
    pub(crate) fn open(self: &Arc<Self>, key: ClientKey, limit: u32) -> Option<ClientHold> {
        // Add to every slot first, then look at them all again: of two workers admitting the
        // same client at once, each sees the other's additions in every slot, so the limit is
        // never passed (both may refuse; neither over-admits).
        for &i in &key.0 {
            self.slot(i).connections.fetch_add(1, Ordering::SeqCst);
        }
        let least = key
            .0
            .iter()
            .map(|&i| self.slot(i).connections.load(Ordering::SeqCst))
            .min()
            .unwrap_or(0);
        let hold = ClientHold {
            table: self.clone(),
            key,
        };
        (least <= limit).then_some(hold)
    }

    /// Open connections counted for `key` (the least of its slots).
    #[cfg(test)]
    fn connections(&self, key: ClientKey) -> u32 {
        key.0
            .iter()
            .map(|&i| self.slot(i).connections.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0)
    }

    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Whether `key` may go on to a handshake now under `rate`; if so it is charged as a full
    /// one (given back by [`ClientTable::refund`] when it resumed). A hello that offers no
    /// resumption needs budget; one that offers to resume is held back only when the client is
    /// twice its burst in debt, which only handshakes that offered resumption and did not get it
    /// (or did not finish: a client may close after the server's signature) can bring about. A
    /// client whose plain full handshakes were refused at its burst therefore keeps resuming. A
    /// client is held back when every one of its slots is out of budget.
    pub(crate) fn handshake(&self, key: ClientKey, rate: HandshakeRate, resuming: bool) -> bool {
        let now = self.now_us();
        let interval = u64::try_from(rate.interval.as_micros()).unwrap_or(u64::MAX);
        let burst = u64::from(rate.burst) * if resuming { 2 } else { 1 };
        let allowance = interval.saturating_mul(burst);
        let earliest = key
            .0
            .iter()
            .map(|&i| self.slot(i).tat_us.load(Ordering::Relaxed))
            .min()
            .unwrap_or(0);
        // GCRA: the budget after this handshake must not reach past now + burst × interval.
        if earliest.max(now).saturating_add(interval) > now.saturating_add(allowance) {
            return false;
        }
        self.charge(key, interval, now);
        true
    }

    /// Whether `key`'s budget is not whole: it made full handshakes within the last intervals.
    pub(crate) fn in_debt(&self, key: ClientKey) -> bool {
        let now = self.now_us();
        key.0
            .iter()
            .all(|&i| self.slot(i).tat_us.load(Ordering::Relaxed) > now)
    }

    /// Gives back the charge of a handshake that resumed.
    pub(crate) fn refund(&self, key: ClientKey, rate: HandshakeRate) {
        let interval = u64::try_from(rate.interval.as_micros()).unwrap_or(u64::MAX);
        for &i in &key.0 {
            let _ = self
                .slot(i)
                .tat_us
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |tat| {
                    Some(tat.saturating_sub(interval))
                });
        }
    }

    fn charge(&self, key: ClientKey, interval: u64, now: u64) {
        for &i in &key.0 {
            let _ = self
                .slot(i)
                .tat_us
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |tat| {
                    Some(tat.max(now).saturating_add(interval))
                });
        }
    }
}

impl Drop for ClientHold {
    fn drop(&mut self) {
        for &i in &self.key.0 {
            self.table
                .slot(i)
                .connections
                .fetch_sub(1, Ordering::AcqRel);
        }
    }
}

fn to_u32(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

fn mask_v4(ip: std::net::Ipv4Addr, prefix: u8) -> std::net::Ipv4Addr {
    let bits = u32::from(ip) & (u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0));
    bits.into()
}

fn mask_v6(ip: std::net::Ipv6Addr, prefix: u8) -> std::net::Ipv6Addr {
    let bits = u128::from(ip) & (u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0));
    bits.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn table(rows: usize) -> Arc<ClientTable> {
        Arc::new(ClientTable::new(&PerClient {
            connections: Some(2),
            handshakes: None,
            ipv4_prefix: 24,
            ipv6_prefix: 64,
            table: rows,
        }))
    }

    #[test]
    fn connections_are_capped_per_prefix_and_come_back() {
        let t = table(1024);
        let a = t.key("10.0.0.1".parse().expect("ip"));
        assert_eq!(a, t.key("10.0.0.200".parse().expect("ip")), "one /24");
        assert_eq!(a, t.key("::ffff:10.0.0.9".parse().expect("ip")), "mapped");
        let first = t.open(a, 2).expect("first");
        let second = t.open(a, 2).expect("second");
        assert!(t.open(a, 2).is_none(), "a third past 2");
        assert_eq!(t.connections(a), 2, "the refused one is not counted");
        drop(first);
        let third = t.open(a, 2).expect("a freed one");
        drop((second, third));
        assert_eq!(t.connections(a), 0);
    }

    #[test]
    fn clients_are_held_back_by_others_only_when_both_their_slots_collide() {
        // 1,000 clients, each holding one connection, in 4,096 slots per row: a client is
        // refused at limit 1 only when both its slots hold others (about 5% expected; one row
        // alone would refuse about 22%).
        let t = table(4096);
        let keys: Vec<ClientKey> = (0..1000u32)
            .map(|i| t.key(IpAddr::from((i << 8).to_be_bytes())))
            .collect();
        let holds: Vec<Option<ClientHold>> = keys.iter().map(|&k| t.open(k, 1)).collect();
        let refused = holds.iter().filter(|h| h.is_none()).count();
        assert!(refused < 120, "{refused} of 1000 refused");
        assert_eq!(t.size(), 2 * 4096 * 16, "fixed: two rows of 16-byte slots");
    }

    #[test]
    fn the_rate_allows_a_burst_then_one_per_interval() {
        let t = table(1024);
        let k = t.key("192.0.2.1".parse().expect("ip"));
        let rate = HandshakeRate {
            interval: Duration::from_secs(3600),
            burst: 3,
        };
        for i in 0..3 {
            assert!(t.handshake(k, rate, false), "burst {i}");
        }
        assert!(!t.handshake(k, rate, false), "past the burst");
        for i in 0..10 {
            assert!(t.handshake(k, rate, true), "resumption {i} goes on");
            t.refund(k, rate);
        }
        let other = t.key("192.0.3.1".parse().expect("ip"));
        assert!(t.handshake(other, rate, false), "another client");
        // Offers that do not resume (or never finish) are not refunded: twice the burst of
        // them holds even offers back.
        let bogus = t.key("198.51.100.1".parse().expect("ip"));
        for i in 0..6 {
            assert!(t.handshake(bogus, rate, true), "bogus {i}");
        }
        assert!(!t.handshake(bogus, rate, true), "past twice the burst");
        assert!(!t.handshake(bogus, rate, false));
    }
}
