//! The addresses host-name backends have now: written by the DNS followers
//! (`server::dns_follow`, one per name per process), read by every worker when it builds a pool.
//! A worker reads one relaxed counter per accept to learn that an answer changed; the answers
//! themselves are read only then, lock-free.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;

use crate::config::backend::{HostPort, MAX_BACKENDS};
use crate::config::{BackendAddr, Target};

type Answers = HashMap<HostPort, Arc<[SocketAddr]>>;

static ANSWERS: LazyLock<ArcSwap<Answers>> = LazyLock::new(ArcSwap::default);

/// Bumped after every change of an answer, and when health sets are dropped.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Changes whenever an answer does, or a set of health verdicts goes: a worker that saw another
/// value rebuilds its pools (keeping those whose members and verdicts are still current).
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Tells the workers to look at their pools again.
pub(crate) fn touch() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Forgets a name no longer followed (a later follower starts from no answer).
pub(crate) fn forget(name: &HostPort) {
    if ANSWERS.load().contains_key(name) {
        ANSWERS.rcu(|all| {
            let mut all = Answers::clone(all);
            all.remove(name);
            all
        });
        touch();
    }
}

/// Records `addrs` as what `name` resolves to; whether that changed anything. The order of an
/// answer does not count (DNS servers rotate it).
pub(crate) fn publish(name: &HostPort, mut addrs: Vec<SocketAddr>) -> bool {
    addrs.sort_unstable();
    addrs.dedup();
    let addrs: Arc<[SocketAddr]> = addrs.into();
    let same = ANSWERS.load().get(name).is_some_and(|now| **now == *addrs);
    if same {
        return false;
    }
    ANSWERS.rcu(|all| {
        let mut all = Answers::clone(all);
        all.insert(name.clone(), addrs.clone());
        all
    });
    touch();
    true
}

/// What `name` resolves to now (empty before its first answer).
pub(crate) fn addresses(name: &HostPort) -> Arc<[SocketAddr]> {
    ANSWERS
        .load()
        .get(name)
        .cloned()
        .unwrap_or_else(|| Arc::from([]))
}

/// The members of a pool of `backends`: each host name stands for every address it resolves
/// to now (`host:port@ip`, with the name's weight), the rest as they are; at most
/// [`MAX_BACKENDS`] in all.
pub(crate) fn members(backends: &[BackendAddr]) -> Vec<BackendAddr> {
    let answers = ANSWERS.load();
    let mut out = Vec::with_capacity(backends.len());
    for b in backends {
        let Target::Name(name) = &b.addr else {
            out.push(b.clone());
            continue;
        };
        for addr in answers.get(name).map(|a| &a[..]).unwrap_or_default() {
            out.push(BackendAddr {
                name: format!("{}@{}", b.name, addr.ip()),
                addr: Target::Tcp(*addr),
                weight: b.weight,
            });
        }
    }
    out.truncate(MAX_BACKENDS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(host: &str) -> HostPort {
        HostPort {
            host: host.into(),
            port: 8080,
        }
    }

    #[test]
    fn a_name_stands_for_each_of_its_addresses() {
        let n = name("members.dns.test");
        let a: SocketAddr = "127.0.0.2:8080".parse().unwrap();
        let b: SocketAddr = "127.0.0.3:8080".parse().unwrap();
        let before = generation();
        assert!(publish(&n, vec![b, a]));
        assert!(generation() > before);
        assert!(!publish(&n, vec![a, b]), "the same set in another order");
        let listed = vec![
            BackendAddr {
                name: "unix:/run/app.sock".into(),
                addr: Target::Unix("/run/app.sock".into()),
                weight: 1,
            },
            BackendAddr {
                name: "members.dns.test:8080".into(),
                addr: Target::Name(n.clone()),
                weight: 3,
            },
        ];
        let got: Vec<(String, u32)> = members(&listed)
            .into_iter()
            .map(|m| (m.name, m.weight))
            .collect();
        assert_eq!(
            got,
            [
                ("unix:/run/app.sock".to_string(), 1),
                ("members.dns.test:8080@127.0.0.2".to_string(), 3),
                ("members.dns.test:8080@127.0.0.3".to_string(), 3),
            ]
        );
        assert!(publish(&n, vec![b]));
        assert_eq!(&*addresses(&n), &[b]);
        assert!(addresses(&name("unknown.dns.test")).is_empty());
    }
}
