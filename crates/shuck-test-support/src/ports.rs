//! Ports for what a test must name before it starts (pebble's validation port, a Redis, a DNS
//! server, a frontend the CA connects to), taken below the kernel's ephemeral range, one after
//! another from a random start. A port from `bind(":0")`, let go and used later, is in that
//! range, where the local port of any connection a parallel test opens may land on it first
//! (seen: "another process already listens there" at a frontend's start). Below the range only
//! another pick could take it, and picks in one process never repeat.

use std::hash::BuildHasher;
use std::net::{TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The lowest port picked.
const LOWEST: u16 = 10_000;
/// Where the ephemeral range starts when the kernel's setting cannot be read (Linux's default).
const EPHEMERAL_DEFAULT: u16 = 32_768;

/// The picks made so far in this process.
static PICKED: AtomicU32 = AtomicU32::new(0);
/// Where this process's picks start in the range (random, so two test binaries differ).
static START: OnceLock<u32> = OnceLock::new();

/// The ports picked from: `[LOWEST, start of the ephemeral range)`.
fn range() -> (u16, u32) {
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(EPHEMERAL_DEFAULT);
    let span = u32::from(ephemeral.saturating_sub(LOWEST)).max(1000);
    (LOWEST, span)
}

/// The next port to try.
fn candidate() -> u16 {
    let (lowest, span) = range();
    let start = *START.get_or_init(|| {
        let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        u32::try_from(random % u64::from(span)).unwrap_or(0)
    });
    let n = PICKED.fetch_add(1, Ordering::Relaxed);
    let offset = u16::try_from((start + n) % span).unwrap_or(0);
    lowest.saturating_add(offset)
}

/// The first candidate `free` accepts.
fn pick(free: impl Fn(u16) -> bool) -> u16 {
    for _ in 0..2000 {
        let port = candidate();
        if free(port) {
            return port;
        }
    }
    panic!("no free port below the ephemeral range");
}

/// A TCP port free on 127.0.0.1.
pub fn tcp() -> u16 {
    pick(|p| TcpListener::bind(("127.0.0.1", p)).is_ok())
}

/// A UDP port free on 127.0.0.1.
pub fn udp() -> u16 {
    pick(|p| UdpSocket::bind(("127.0.0.1", p)).is_ok())
}

/// A port free on 127.0.0.1 for both TCP and UDP (a DNS server answers on both).
pub fn tcp_and_udp() -> u16 {
    pick(|p| {
        TcpListener::bind(("127.0.0.1", p)).is_ok() && UdpSocket::bind(("127.0.0.1", p)).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_are_below_the_ephemeral_range_and_never_repeat() {
        let (lowest, span) = range();
        let picks: Vec<u16> = (0..50).map(|_| tcp()).collect();
        let mut unique = picks.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), picks.len(), "{picks:?}");
        let top = u32::from(lowest) + span;
        assert!(
            picks.iter().all(|&p| p >= lowest && u32::from(p) < top),
            "{picks:?} outside {lowest}..{top}"
        );
    }
}
