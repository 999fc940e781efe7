//! Ports for what a test must name before it starts (pebble's validation port, a Redis, a DNS
//! server, a frontend the CA connects to) or must find closed, taken outside the kernel's
//! ephemeral range (below it), one after another from a random start. A port from
//! `bind(":0")`, let go and used later, is in that range, where the local port of any
//! connection a parallel test opens may land on it first (seen: "another process already
//! listens there" at a frontend's start). Outside the range only another pick could take it,
//! and picks in one process never repeat.

use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv4Addr, TcpListener, UdpSocket};
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

/// The kernel's ephemeral range, first and last port.
fn ephemeral() -> (u16, u16) {
    let setting = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok();
    let mut ports = setting
        .iter()
        .flat_map(|s| s.split_whitespace())
        .map_while(|p| p.parse::<u16>().ok());
    match (ports.next(), ports.next()) {
        (Some(first), Some(last)) => (first, last),
        _ => (EPHEMERAL_DEFAULT, 60_999),
    }
}

/// The ports picked from, as (first, how many): below the ephemeral range from [`LOWEST`],
/// else above it when the range starts lower than that (a host that widened it), else (no
/// room outside it) the 1000 ports from [`LOWEST`], where the race comes back.
fn range() -> (u16, u32) {
    const ROOM: u16 = 1000;
    let (first, last) = ephemeral();
    if first >= LOWEST + ROOM {
        (LOWEST, u32::from(first - LOWEST))
    } else if last <= u16::MAX - ROOM {
        (last + 1, u32::from(u16::MAX - last))
    } else {
        (LOWEST, u32::from(ROOM))
    }
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
    panic!("no free port outside the ephemeral range");
}

/// A TCP port free on 127.0.0.1.
pub fn tcp() -> u16 {
    tcp_on(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

/// A TCP port free on `ip` (`0.0.0.0` for a port no address of the host has taken, `::1`).
pub fn tcp_on(ip: IpAddr) -> u16 {
    pick(|p| TcpListener::bind((ip, p)).is_ok())
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
    fn picks_are_outside_the_ephemeral_range_and_never_repeat() {
        let picks: Vec<u16> = (0..50).map(|_| tcp()).collect();
        let mut unique = picks.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), picks.len(), "{picks:?}");
        let (first, last) = ephemeral();
        assert!(
            picks.iter().all(|p| !(first..=last).contains(p)),
            "{picks:?} in the ephemeral range {first}-{last}"
        );
    }
}
