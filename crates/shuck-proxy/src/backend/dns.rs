//! The addresses host-name backends have now ([`Directory`]): written by the DNS followers
//! (`server::dns_follow`, one per name per process), read by every worker when it builds a pool.
//! A worker reads one relaxed counter per accept to learn that an answer changed; the answers
//! themselves are read only then, lock-free.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
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
    /// Per set cut to [`MAX_BACKENDS`] (by its first backend's name), how many members it had
    /// when last said: one line per set and count, whichever worker builds the pool.
    cut: std::sync::Mutex<HashMap<String, usize>>,
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

    /// Drops from every answer the addresses `refused` names (rules made stricter by a reload:
    /// what was taken under the old ones must not stay a member); a name left without any
    /// has no members until its next answer.
    pub(crate) fn drop_refused(&self, refused: impl Fn(&HostPort, &SocketAddr) -> bool) {
        let all = self.answers.load_full();
        let kept: Answers = all
            .iter()
            .map(|(name, addrs)| {
                let addrs: Arc<[SocketAddr]> = addrs
                    .iter()
                    .filter(|a| !refused(name, a))
                    .copied()
                    .collect();
                (name.clone(), addrs)
            })
            .filter(|(_, addrs)| !addrs.is_empty())
            .collect();
        if kept != *all {
            self.answers.store(Arc::new(kept));
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
        if out.len() > MAX_BACKENDS {
            // Every worker builds the same pools: one line for them all, again if it changes.
            let set = backends.first().map(|b| b.name.clone()).unwrap_or_default();
            let said = self
                .cut
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(set, out.len());
            if said != Some(out.len()) {
                tracing::warn!(
                    members = out.len(),
                    limit = MAX_BACKENDS,
                    first = %out[0].name,
                    "a backend set's host names resolve to more addresses than a pool holds; the ones past the limit are not used"
                );
            }
            out.truncate(MAX_BACKENDS);
        }
        out
    }
}

/// Whether the pool member `member` is the backend `written` (as the configuration writes it)
/// or one of the addresses a host name stands for (`name@address`, as [`Directory::members`]
/// names them).
pub(crate) fn stands_for(written: &str, member: &str) -> bool {
    member == written
        || member
            .strip_prefix(written)
            .is_some_and(|rest| rest.starts_with('@'))
}

/// Why an address a DNS answer names is not made a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// 0.0.0.0 or `::` (a connect to it reaches this host), multicast or broadcast: never.
    NotUnicast,
    /// Loopback, link-local or a cloud metadata service: only with
    /// `dns_allow_special_addresses`.
    Special,
}

/// The AWS instance metadata service over IPv6 (over IPv4 it is link-local, 169.254.169.254).
const METADATA_V6: std::net::Ipv6Addr =
    std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

/// Whether an answer for `host` may name `ip`. A name under `localhost` (RFC 6761: always
/// loopback) may name loopback addresses without `allow_special`.
pub(crate) fn refusal(host: &str, ip: IpAddr, allow_special: bool) -> Option<Refused> {
    let ip = ip.to_canonical();
    let not_unicast = match ip {
        IpAddr::V4(v4) => v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_unspecified() || v6.is_multicast(),
    };
    if not_unicast {
        return Some(Refused::NotUnicast);
    }
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let localhost = host == "localhost" || host.ends_with(".localhost");
    let special = match ip {
        IpAddr::V4(v4) => (v4.is_loopback() && !localhost) || v4.is_link_local(),
        IpAddr::V6(v6) => {
            (v6.is_loopback() && !localhost) || v6.is_unicast_link_local() || v6 == METADATA_V6
        }
    };
    (special && !allow_special).then_some(Refused::Special)
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

    #[test]
    fn answers_naming_this_host_or_no_host_are_refused() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for never in [
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "255.255.255.255",
            "ff02::1",
            "::ffff:0.0.0.0",
        ] {
            assert_eq!(
                refusal("a.test", ip(never), true),
                Some(Refused::NotUnicast),
                "{never}"
            );
        }
        for special in [
            "127.0.0.1",
            "127.8.0.1",
            "::1",
            "169.254.169.254",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
        ] {
            assert_eq!(
                refusal("a.test", ip(special), false),
                Some(Refused::Special),
                "{special}"
            );
            assert_eq!(refusal("a.test", ip(special), true), None, "{special}");
        }
        for fine in [
            "10.0.0.1",
            "192.168.1.1",
            "203.0.113.9",
            "2001:db8::1",
            "fd00::1",
        ] {
            assert_eq!(refusal("a.test", ip(fine), false), None, "{fine}");
        }
        assert_eq!(refusal("localhost", ip("127.0.0.1"), false), None);
        assert_eq!(refusal("db.localhost.", ip("::1"), false), None);
        assert_eq!(
            refusal("localhost", ip("169.254.169.254"), false),
            Some(Refused::Special)
        );
    }

    #[test]
    fn a_set_past_the_pool_limit_is_cut() {
        let dns = Directory::default();
        let (a, b) = (name("a.dns.test"), name("b.dns.test"));
        let many = |third: u8| -> Vec<SocketAddr> {
            (0..100u8)
                .map(|i| SocketAddr::from(([10, third, 0, i], 8080)))
                .collect()
        };
        dns.publish(&a, many(1));
        dns.publish(&b, many(2));
        let set = |n: &HostPort| BackendAddr {
            name: n.to_string(),
            addr: Target::Name(n.clone()),
            weight: 1,
        };
        let members = dns.members(&[set(&a), set(&b)]);
        assert_eq!(members.len(), MAX_BACKENDS);
        let said = dns.cut.lock().unwrap().get("a.dns.test:8080").copied();
        assert_eq!(said, Some(200));
    }
}
