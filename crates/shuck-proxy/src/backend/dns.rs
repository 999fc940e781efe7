//! The addresses host-name backends have now ([`Directory`]): written by the DNS followers
//! (`server::dns_follow`, one per name per process), read by every worker when it builds a pool.
//! A worker reads one relaxed counter per accept to learn that an answer changed; the answers
//! themselves are read only then, lock-free.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::backend::{HostPort, MAX_BACKENDS};
use crate::config::{BackendAddr, Target};

type Answers = HashMap<HostPort, Arc<[SocketAddr]>>;

/// What every followed name resolves to now, for the whole process: one value, owned by the
/// engine (`worker::Engine`), written by the followers, read by the workers.
#[derive(Debug, Default)]
pub(crate) struct Directory {
    answers: ArcSwap<Answers>,
    /// Bumped after every change of an answer, and when health sets are dropped.
    generation: AtomicU64,
}

impl Directory {
    /// Changes whenever an answer does, or a set of health verdicts goes: a worker that saw
    /// another value rebuilds its pools (keeping those whose members and verdicts are still
    /// current).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Tells the workers to look at their pools again.
    pub(crate) fn touch(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Forgets a name no longer followed (a later follower starts from no answer).
    pub(crate) fn forget(&self, name: &HostPort) {
        if self.answers.load().contains_key(name) {
            self.answers.rcu(|all| {
                let mut all = Answers::clone(all);
                all.remove(name);
                all
            });
            self.touch();
        }
    }

    /// Records `addrs` as what `name` resolves to; whether that changed anything. The order of
    /// an answer does not count (DNS servers rotate it).
    pub(crate) fn publish(&self, name: &HostPort, mut addrs: Vec<SocketAddr>) -> bool {
        addrs.sort_unstable();
        addrs.dedup();
        let addrs: Arc<[SocketAddr]> = addrs.into();
        let same = self
            .answers
            .load()
            .get(name)
            .is_some_and(|now| **now == *addrs);
        if same {
            return false;
        }
        self.answers.rcu(|all| {
            let mut all = Answers::clone(all);
            all.insert(name.clone(), addrs.clone());
            all
        });
        self.touch();
        true
    }

    /// What `name` resolves to now (empty before its first answer).
    pub(crate) fn addresses(&self, name: &HostPort) -> Arc<[SocketAddr]> {
        self.answers
            .load()
            .get(name)
            .cloned()
            .unwrap_or_else(|| Arc::from([]))
    }

    /// The members of a pool of `backends`: each host name stands for every address it
    /// resolves to now (`host:port@ip`, with the name's weight), the rest as they are; at most
    /// [`MAX_BACKENDS`] in all.
    pub(crate) fn members(&self, backends: &[BackendAddr]) -> Vec<BackendAddr> {
        let answers = self.answers.load();
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
        let dns = Directory::default();
        let before = dns.generation();
        assert!(dns.publish(&n, vec![b, a]));
        assert!(dns.generation() > before);
        assert!(
            !dns.publish(&n, vec![a, b]),
            "the same set in another order"
        );
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
        let got: Vec<(String, u32)> = dns
            .members(&listed)
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
        assert!(dns.publish(&n, vec![b]));
        assert_eq!(&*dns.addresses(&n), &[b]);
        assert!(dns.addresses(&name("unknown.dns.test")).is_empty());
    }
}
