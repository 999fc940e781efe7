//! DNS that is followed: each host name among the backends is looked up at start and again
//! every `dns_refresh` (or when its answer's TTL ends), by one task per name per process on the
//! main thread's runtime. Every address of an answer (A and AAAA) becomes a member of the pools
//! (`backend::dns`); a failed or empty answer keeps the last good one. An address an answer may
//! not name (`backend::dns::refusal`: 0.0.0.0, multicast, and without
//! `dns_allow_special_addresses` loopback, link-local, metadata) is left out and counted; an
//! answer of only those keeps the last good one too. One log line per change of state, never
//! one per lookup.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use hickory_resolver::config::{
    LookupIpStrategy, NameServerConfig, ResolveHosts, ResolverConfig, ServerOrderingStrategy,
};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::proto::xfer::Protocol;
use hickory_resolver::TokioResolver;

use super::health_checks::Checkers;
use crate::backend::dns::{refusal, Refused};
use crate::config::backend::{HostPort, MAX_TTL_REFRESH, MIN_DNS_REFRESH};
use crate::config::{DnsLookups, Frontend};
use crate::metrics::Metrics;
use crate::worker::Engine;

/// How long a start or a reload waits for the first answers of new names.
const FIRST_ANSWER_WAIT: Duration = Duration::from_secs(5);
/// When a lookup failed and the answers' TTL sets the pace: the next attempt.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// Addresses taken from one answer at most (a pool has at most 128 members).
const MAX_ADDRESSES: usize = 64;

/// The followers running, by name; `sync` makes them match a configuration.
#[derive(Default)]
pub(crate) struct Followers {
    running: HashMap<HostPort, Following>,
    lookups: DnsLookups,
    on: Option<Context>,
}

/// What a follower needs: where it runs, what it counts into, whom it tells of a change.
#[derive(Clone)]
struct Context {
    rt: tokio::runtime::Handle,
    metrics: Arc<Metrics>,
    checkers: Arc<Mutex<Checkers>>,
    /// Where answers are published (`engine.dns`).
    engine: Arc<Engine>,
}

struct Following {
    period: Period,
    task: tokio::task::JoinHandle<()>,
}

/// How often a name is looked up: at most every `fixed` (the shortest `dns_refresh` of the sets
/// naming it), and no later than its TTL says when some set follows the TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Period {
    fixed: Option<Duration>,
    follows_ttl: bool,
}

impl Period {
    /// The wait after an answer valid for `ttl`.
    fn after_answer(self, ttl: Duration) -> Duration {
        let ttl = ttl.clamp(MIN_DNS_REFRESH, MAX_TTL_REFRESH);
        match (self.fixed, self.follows_ttl) {
            (Some(f), true) => f.min(ttl),
            (Some(f), false) => f,
            (None, _) => ttl,
        }
    }

    /// The wait after a failed lookup: soon, whatever the period (a name with no answer has no
    /// members).
    fn after_failure(self) -> Duration {
        self.fixed
            .map_or(RETRY_AFTER_FAILURE, |f| f.min(RETRY_AFTER_FAILURE))
    }
}

impl Followers {
    /// From now on, followers run on `rt`, publish to `engine`, count into `metrics` and
    /// resync `checkers`.
    pub(crate) fn start(
        &mut self,
        rt: tokio::runtime::Handle,
        engine: Arc<Engine>,
        metrics: Arc<Metrics>,
        checkers: Arc<Mutex<Checkers>>,
    ) {
        self.on = Some(Context {
            rt,
            metrics,
            checkers,
            engine,
        });
    }

    /// Follows every host name of `frontends` as `lookups` says (its `resolvers`, or the
    /// system's DNS servers when empty). With `prune`, stops following (and forgets) the names `frontends` do not
    /// have; without, keeps them (a reload adds names before it applies, and removes them
    /// after). Returns what to wait on for the first answers of names that have none.
    pub(crate) fn sync(
        &mut self,
        frontends: &[&Frontend],
        lookups: &DnsLookups,
        prune: bool,
    ) -> FirstAnswers {
        let (tx, rx) = mpsc::channel();
        let Some(on) = self.on.clone() else {
            return FirstAnswers { rx, count: 0 };
        };
        let wanted = wanted_names(frontends);
        if *lookups != self.lookups {
            // Other servers or rules: every name is looked up again under them.
            for (_, f) in self.running.drain() {
                f.task.abort();
            }
            if self.lookups.allow_special_addresses && !lookups.allow_special_addresses {
                // Special addresses taken while they were allowed go now, not at an answer
                // that may never come (a refused one keeps the last good answer).
                on.engine
                    .dns
                    .drop_refused(|name, a| refusal(&name.host, a.ip(), false).is_some());
            }
            self.lookups = lookups.clone();
        }
        self.running.retain(|name, f| match wanted.get(name) {
            Some(p) if *p == f.period => true,
            None if !prune => true,
            other => {
                f.task.abort();
                if other.is_none() {
                    on.engine.dns.forget(name);
                    on.metrics.forget_dns(&name.to_string());
                }
                false
            }
        });
        let mut resolver: Option<Arc<TokioResolver>> = None;
        let mut count = 0;
        for (name, period) in wanted {
            if self.running.contains_key(&name) {
                continue;
            }
            let first = on
                .engine
                .dns
                .addresses(&name)
                .is_empty()
                .then(|| tx.clone());
            count += usize::from(first.is_some());
            if first.is_some() {
                // A series from the start: 0 until the name resolves, for an alert to see.
                on.metrics.dns_addresses(&name.to_string(), 0);
            }
            let follower = Follower {
                name: name.clone(),
                period,
                resolver: resolver
                    .get_or_insert_with(|| Arc::new(build_resolver(&lookups.resolvers)))
                    .clone(),
                allow_special: lookups.allow_special_addresses,
                on: on.clone(),
            };
            let task = on.rt.spawn(follower.run(first));
            self.running.insert(name, Following { period, task });
        }
        FirstAnswers { rx, count }
    }
}

/// The first answers of names just followed, to wait for before listening or reloading: the
/// first connections then have their addresses.
pub(crate) struct FirstAnswers {
    rx: mpsc::Receiver<()>,
    count: usize,
}

impl FirstAnswers {
    /// Waits (blocking the thread) until each first answer came, failed, or the wait is over.
    pub(crate) fn wait(self) {
        let deadline = std::time::Instant::now() + FIRST_ANSWER_WAIT;
        for _ in 0..self.count {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if self.rx.recv_timeout(left).is_err() {
                return;
            }
        }
    }
}

/// Each host name of `frontends` and how often it is looked up (see [`Period`]).
fn wanted_names(frontends: &[&Frontend]) -> HashMap<HostPort, Period> {
    let mut wanted: HashMap<HostPort, Period> = HashMap::new();
    for fe in frontends {
        let sets = std::iter::once(&fe.backend).chain(fe.route.0.iter().map(|r| &r.backend));
        for backends in sets {
            for name in backends.names() {
                let p = wanted.entry(name.clone()).or_default();
                match backends.dns_refresh {
                    Some(d) => p.fixed = Some(p.fixed.map_or(d, |f| f.min(d))),
                    None => p.follows_ttl = true,
                }
            }
        }
    }
    wanted
}

/// A resolver asking `servers` (the system's when empty), both A and AAAA, with no cache of
/// its own: each lookup asks again, and the TTL is ours to follow.
fn build_resolver(servers: &[SocketAddr]) -> TokioResolver {
    let provider = TokioConnectionProvider::default();
    let mut builder = if servers.is_empty() {
        TokioResolver::builder(provider).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot read the system's DNS configuration; asking 127.0.0.1");
            TokioResolver::builder_with_config(only(&["127.0.0.1:53".parse().unwrap_or(SocketAddr::from(([127, 0, 0, 1], 53)))]), TokioConnectionProvider::default())
        })
    } else {
        TokioResolver::builder_with_config(only(servers), provider)
    };
    let opts = builder.options_mut();
    opts.ip_strategy = LookupIpStrategy::Ipv4AndIpv6;
    opts.cache_size = 0;
    opts.timeout = Duration::from_secs(2);
    opts.attempts = 1;
    // The servers in their order, one at a time; over TCP when UDP fails.
    opts.num_concurrent_reqs = 1;
    opts.server_ordering_strategy = ServerOrderingStrategy::UserProvidedOrder;
    opts.try_tcp_on_error = true;
    if !servers.is_empty() {
        // Servers named in the configuration are asked; /etc/hosts is not.
        opts.use_hosts_file = ResolveHosts::Never;
    }
    builder.build()
}

/// A configuration asking `servers`, over UDP and then TCP, in their order.
fn only(servers: &[SocketAddr]) -> ResolverConfig {
    let mut config = ResolverConfig::new();
    for &s in servers {
        config.add_name_server(NameServerConfig::new(s, Protocol::Udp));
        config.add_name_server(NameServerConfig::new(s, Protocol::Tcp));
    }
    config
}

/// One name followed.
struct Follower {
    name: HostPort,
    period: Period,
    resolver: Arc<TokioResolver>,
    /// `dns_allow_special_addresses`.
    allow_special: bool,
    on: Context,
}

/// One answer: the addresses taken, those left out, how long it may be kept.
struct Answer {
    addrs: Vec<SocketAddr>,
    refused: Vec<(IpAddr, Refused)>,
    ttl: Duration,
}

/// Where a name's lookups stand, for one log line per change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unknown,
    Answering,
    Failing,
}

impl Follower {
    async fn run(self, mut first: Option<mpsc::Sender<()>>) {
        let name = self.name.to_string();
        let mut state = State::Unknown;
        let mut refused_before = Vec::new();
        loop {
            let answer = self.lookup().await.and_then(|a| {
                self.note_refused(&name, &a.refused, &mut refused_before);
                if a.addrs.is_empty() {
                    Err(("refused", "every address of the answer was refused".into()))
                } else {
                    Ok(a)
                }
            });
            let next = match answer {
                Ok(Answer { addrs, ttl, .. }) => {
                    self.on.metrics.dns_lookup(&name, "ok");
                    self.answered(&name, addrs, state);
                    state = State::Answering;
                    self.period.after_answer(ttl)
                }
                Err((result, why)) => {
                    self.on.metrics.dns_lookup(&name, result);
                    if state != State::Failing {
                        let kept = self.on.engine.dns.addresses(&self.name).len();
                        tracing::warn!(backend = %name, error = %why, kept_addresses = kept, "backend name lookup failed; keeping the last good answer until one comes");
                    }
                    state = State::Failing;
                    self.period.after_failure()
                }
            };
            if let Some(tx) = first.take() {
                let _ = tx.send(());
            }
            tokio::time::sleep(next).await;
        }
    }

    /// The addresses of one lookup, those refused, and how long they may be kept; an error's
    /// result label (`failed`, `empty`) and its reason.
    async fn lookup(&self) -> Result<Answer, (&'static str, String)> {
        let answer = self
            .resolver
            // As written: a short name (`db`, Kubernetes' `svc`) goes through the search domains.
            .lookup_ip(self.name.host.as_str())
            .await
            .map_err(|e| {
                if e.is_no_records_found() {
                    ("empty", format!("no address: {e}"))
                } else {
                    ("failed", e.to_string())
                }
            })?;
        let ttl = answer
            .valid_until()
            .saturating_duration_since(std::time::Instant::now());
        if answer.iter().next().is_none() {
            return Err(("empty", "no address in the answer".into()));
        }
        let (taken, refused): (Vec<_>, Vec<_>) = answer
            .iter()
            .map(|ip| (ip, refusal(&self.name.host, ip, self.allow_special)))
            .partition(|(_, why)| why.is_none());
        let refused = refused
            .into_iter()
            .filter_map(|(ip, why)| Some((ip, why?)))
            .collect();
        let addrs = taken
            .into_iter()
            .take(MAX_ADDRESSES)
            .map(|(ip, _)| SocketAddr::new(ip, self.name.port))
            .collect();
        Ok(Answer {
            addrs,
            refused,
            ttl,
        })
    }

    /// Counts the addresses an answer named and were refused; one line when they change.
    fn note_refused(
        &self,
        name: &str,
        refused: &[(IpAddr, Refused)],
        before: &mut Vec<(IpAddr, Refused)>,
    ) {
        self.on.metrics.dns_refused(name, refused.len());
        let mut refused = refused.to_vec();
        // Servers rotate answers: the same addresses in another order are no change.
        refused.sort_unstable_by_key(|(ip, _)| *ip);
        let refused = refused.as_slice();
        if refused.is_empty() || refused == before.as_slice() {
            before.clear();
            before.extend_from_slice(refused);
            return;
        }
        let shown: Vec<String> = refused
            .iter()
            .map(|(ip, why)| match why {
                Refused::NotUnicast => format!("{ip} (not a unicast address)"),
                Refused::Special => format!(
                    "{ip} (loopback, link-local or metadata; see dns_allow_special_addresses)"
                ),
            })
            .collect();
        tracing::warn!(backend = %name, refused = %shown.join(", "), "backend name resolves to refused addresses; they are not used");
        before.clear();
        before.extend_from_slice(refused);
    }

    /// Publishes a good answer; a change goes to the health checks and is one log line.
    fn answered(&self, name: &str, addrs: Vec<SocketAddr>, before: State) {
        let count = addrs.len();
        let shown: Vec<String> = addrs.iter().map(|a| a.ip().to_string()).collect();
        self.on.metrics.dns_addresses(name, count);
        if self.on.engine.dns.publish(&self.name, addrs) {
            tracing::info!(backend = %name, addresses = %shown.join(" "), "backend name resolves to new addresses; new connections use them");
            self.on
                .checkers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .resync();
        } else if before == State::Failing {
            tracing::info!(backend = %name, "backend name lookups answer again");
        }
    }
}
