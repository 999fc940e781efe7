//! Redis Cluster (`redis+cluster://HOST:PORT,HOST:PORT`): each key goes to the master that owns
//! its hash slot (CRC16 of the key, or of its `{hash tag}`, modulo 16384), on a connection of
//! that worker to that node (the same bounded [`Link`] as a single server's). The slot map comes
//! from `CLUSTER SLOTS`, asked of the seed nodes in turn (then of any node known), at the first
//! use and again after a `MOVED` reply (the slot moved: a resharding or a failover). A lookup
//! that meets `MOVED` or `ASK` fails open, as any store error does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo};

use super::endpoint::Endpoint;
use super::link::Link;

/// Slots of a Redis Cluster.
const SLOTS: u16 = 16384;
/// How long one node may take to give the slot map.
const MAP_TIMEOUT: Duration = Duration::from_millis(500);

const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);

/// The slot of `key`: only the part inside the first `{…}` counts when it is not empty.
pub(super) fn slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    CRC16.checksum(tagged.unwrap_or(key)) % SLOTS
}

/// One worker's view of the cluster: the slot map and a link per node.
pub(super) struct Cluster {
    seeds: Vec<(String, u16)>,
    template: ConnectionInfo,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// (first slot, last slot, node), sorted.
    map: Vec<(u16, u16, (String, u16))>,
    links: HashMap<(String, u16), Arc<Link>>,
    /// A refresh is under way, or due.
    refreshing: bool,
    /// When the last refresh started: one a second at most.
    last_refresh: Option<tokio::time::Instant>,
}

impl Cluster {
    pub(super) fn new(seeds: Vec<(String, u16)>, template: ConnectionInfo) -> Arc<Cluster> {
        Arc::new(Cluster {
            seeds,
            template,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The link to the node that owns `key`'s slot; `None` while the map is not known (a
    /// refresh is started). Needs the worker's runtime.
    pub(super) fn link_for(self: &Arc<Self>, key: &[u8]) -> Option<Arc<Link>> {
        let slot = slot(key);
        let node = {
            let s = self.state();
            s.map
                .iter()
                .find(|(first, last, _)| (*first..=*last).contains(&slot))
                .map(|(_, _, node)| node.clone())
        };
        let Some(node) = node else {
            self.refresh();
            return None;
        };
        Some(self.link_to(node))
    }

    fn link_to(&self, node: (String, u16)) -> Arc<Link> {
        let mut s = self.state();
        s.links
            .entry(node)
            .or_insert_with_key(|(host, port)| {
                Link::new(Endpoint::Direct(self.node_info(host, *port)))
            })
            .clone()
    }

    /// The settings of a connection to node `host:port` (TLS when the URL asks for it).
    fn node_info(&self, host: &str, port: u16) -> ConnectionInfo {
        super::endpoint::at(&self.template, host, port)
    }

    /// Asks for the slot map again (a `MOVED` reply, a node that cannot be reached, no map
    /// yet), at most one ask at a time and one a second.
    pub(super) fn refresh(self: &Arc<Self>) {
        {
            let mut s = self.state();
            let now = tokio::time::Instant::now();
            let recent = s
                .last_refresh
                .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1));
            if s.refreshing || recent {
                return;
            }
            s.refreshing = true;
            s.last_refresh = Some(now);
        }
        let me = self.clone();
        tokio::spawn(async move {
            let map = me.fetch_map().await;
            let mut s = me.state();
            s.refreshing = false;
            match map {
                Ok(map) => {
                    // Links to nodes no longer in the map go (their connections close).
                    s.links
                        .retain(|node, _| map.iter().any(|(_, _, n)| n == node));
                    s.map = map;
                }
                Err(e) => {
                    if crate::obs::log_limit::allow() {
                        tracing::warn!(error = %e, "session store cluster: no slot map");
                    }
                }
            }
        });
    }

    /// `CLUSTER SLOTS` from the seeds in turn, then from the nodes known.
    async fn fetch_map(&self) -> Result<Vec<(u16, u16, (String, u16))>, String> {
        let mut nodes = self.seeds.clone();
        nodes.extend(self.state().links.keys().cloned());
        let mut errors = Vec::new();
        for (host, port) in nodes {
            let info = self.node_info(&host, port);
            match tokio::time::timeout(MAP_TIMEOUT, slots_of(&info)).await {
                Ok(Ok(map)) if !map.is_empty() => return Ok(map),
                Ok(Ok(_)) => errors.push(format!("{host}:{port}: no slots assigned")),
                Ok(Err(e)) => errors.push(format!("{host}:{port}: {e}")),
                Err(_) => errors.push(format!("{host}:{port}: no answer within {MAP_TIMEOUT:?}")),
            }
        }
        Err(errors.join("; "))
    }
}

/// One node's `CLUSTER SLOTS`: each range with its master's address.
async fn slots_of(info: &ConnectionInfo) -> Result<Vec<(u16, u16, (String, u16))>, String> {
    let (mut conn, driver) = super::transport::open(info, None, Arc::default()).await?;
    let task = tokio::spawn(driver);
    let reply: Result<redis::Value, String> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string());
    task.abort();
    let redis::Value::Array(ranges) = reply? else {
        return Err("CLUSTER SLOTS: not an array".into());
    };
    let mut map = Vec::new();
    for range in ranges {
        let redis::Value::Array(parts) = range else {
            continue;
        };
        let (
            Some(redis::Value::Int(first)),
            Some(redis::Value::Int(last)),
            Some(redis::Value::Array(master)),
        ) = (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        let (Some(redis::Value::BulkString(ip)), Some(redis::Value::Int(port))) =
            (master.first(), master.get(1))
        else {
            continue;
        };
        let (Ok(first), Ok(last), Ok(port)) = (
            u16::try_from(*first),
            u16::try_from(*last),
            u16::try_from(*port),
        ) else {
            continue;
        };
        // An empty address means "the node you asked" (Redis 7).
        let host = match String::from_utf8_lossy(ip).into_owned() {
            h if h.is_empty() => match info.addr() {
                ConnectionAddr::Tcp(h, _) | ConnectionAddr::TcpTls { host: h, .. } => h.clone(),
                other => other.to_string(),
            },
            h => h,
        };
        map.push((first, last, (host, port)));
    }
    map.sort_unstable();
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_follow_redis_and_its_hash_tags() {
        // Values from the Redis Cluster specification's examples and `CLUSTER KEYSLOT`.
        assert_eq!(slot(b"123456789"), 0x31C3 % SLOTS);
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
        assert_eq!(
            slot(b"foo{}{bar}"),
            slot(b"foo{}{bar}"),
            "an empty tag: the whole key"
        );
        assert_ne!(slot(b"foo{}{bar}"), slot(b"bar"));
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
    }
}
