//! What a fleet keeps in its store besides sessions (ACME's certificates, account, challenges
//! and the lease on each order), for tasks of the main thread's runtime: its own connections (a
//! router like a worker's, bounded the same), every value sealed with the fleet's key and bound
//! to its key, every call within a deadline.
//!
//! What a Redis writer without the fleet's key can do is bounded here: every sealed value carries
//! its own expiry ([`FORMAT`]), so a value written back after its time (`DUMP` then `RESTORE`,
//! without a TTL) is refused as stale; a lease is a sealed value too (its holder and expiry), so
//! a lease no host of the fleet wrote, or one past its time, holds nobody off: it is taken over
//! with a compare-and-set.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::endpoint::Endpoint;
use super::seal::Sealer;
use super::Router;

/// How long one call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Replaces a value only while it is the one read (a lease renewed or taken over).
const SWAP: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) return 1 else return 0 end";
/// Deletes a key only while it holds the value given (a lease, a challenge's value).
const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// The fleet stores of this process, by URL and key file: one each, opened at start (before
/// privileges are dropped, the key file may be root's) and shared by the renewal task and the
/// workers answering validations. One value, owned by the engine (`worker::Engine`).
#[derive(Debug, Default)]
pub(crate) struct FleetStores(Mutex<HashMap<(String, PathBuf), Arc<FleetStore>>>);

impl FleetStores {
    /// The process's store at `url` sealed with `key_file`, opened on first use.
    pub(crate) fn shared(&self, url: &str, key_file: &Path) -> Result<Arc<FleetStore>, String> {
        let mut all = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let id = (url.to_string(), key_file.to_path_buf());
        if let Some(s) = all.get(&id) {
            return Ok(s.clone());
        }
        let store = Arc::new(FleetStore::open(url, key_file)?);
        all.insert(id, store.clone());
        Ok(store)
    }
}

/// The first byte of what a sealed value holds: `FORMAT | expires (Unix ms, u64 BE) | value`.
const FORMAT: u8 = 2;

/// `value` with its expiry, `ttl` from `now_ms`, to be sealed.
fn with_expiry(value: &[u8], ttl: Duration, now_ms: u64) -> Vec<u8> {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let mut out = Vec::with_capacity(9 + value.len());
    out.push(FORMAT);
    out.extend_from_slice(&now_ms.saturating_add(ttl_ms).to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// How far hosts' clocks may disagree: a value is stale only this long after its expiry, so a
/// host whose clock runs ahead never takes a live lease for a lapsed one (Redis's own TTL, one
/// clock, ends a lease on time; the sealed expiry only bounds a value written back later).
const CLOCK_SKEW_MS: u64 = 60_000;

/// The value of an opened envelope, unless it is of another format or past its expiry.
fn unexpired(plain: &[u8], now_ms: u64) -> Option<&[u8]> {
    let (&format, rest) = plain.split_first()?;
    let (expires, value) = rest.split_first_chunk::<8>()?;
    let live = u64::from_be_bytes(*expires).saturating_add(CLOCK_SKEW_MS) > now_ms;
    (format == FORMAT && live).then_some(value)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// What a read found under a key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    Value(Vec<u8>),
    Absent,
    /// A value that does not open under the fleet's key and this key, or past its expiry.
    Refused,
}

/// What an attempt to take a lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lease {
    /// It was free: this holder has it now.
    Taken,
    /// It held a value no host of the fleet wrote, or one past its expiry: replaced, this
    /// holder has it now.
    TakenOver,
    /// A host of the fleet holds it.
    Held,
}

/// The fleet's store, for one frontend's tasks.
pub(crate) struct FleetStore {
    router: Router,
    sealer: Sealer,
    endpoint: Endpoint,
}

impl std::fmt::Debug for FleetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetStore").finish_non_exhaustive()
    }
}

impl FleetStore {
    /// The store at `url`, its values sealed with the key in `key_file` (no connection is made
    /// here). Needs a runtime when used.
    pub(crate) fn open(url: &str, key_file: &Path) -> Result<FleetStore, String> {
        let endpoint = Endpoint::parse_supported(url)?;
        let sealer = Sealer::from_file(key_file)?;
        Ok(FleetStore {
            router: Router::new(&endpoint),
            sealer,
            endpoint,
        })
    }

    /// The link for `key` and its connection, within the deadline.
    async fn conn(
        &self,
        key: &[u8],
        deadline: Instant,
    ) -> Result<(Arc<super::link::Link>, super::link::Conn), String> {
        let link = loop {
            if let Some(link) = self.router.link_for(key) {
                break link;
            }
            if Instant::now() >= deadline {
                return Err("no cluster slot map".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let conn = link
            .connected_by(deadline)
            .await
            .map_err(|e| format!("{e:?}"))?;
        Ok((link, conn))
    }

    /// One command. A connection that failed (an I/O error, a reply over the bound, READONLY
    /// from a demoted master, no answer in time) is closed: the next call makes a new one (and
    /// with Sentinel asks for the master again), as a worker's lookups do.
    async fn query<T: redis::FromRedisValue>(
        &self,
        key: &[u8],
        cmd: &redis::Cmd,
    ) -> Result<T, String> {
        let deadline = Instant::now() + CALL_TIMEOUT;
        let (link, conn) = self.conn(key, deadline).await?;
        let mut redis = conn.redis.clone();
        match tokio::time::timeout_at(deadline, cmd.query_async::<T>(&mut redis)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                if super::is_moved(&e) {
                    self.router.moved();
                }
                if conn.refused() || super::is_broken(&e) {
                    link.close(&conn);
                }
                Err(e.to_string())
            }
            Err(_) => {
                link.close(&conn);
                Err(format!("no answer within {CALL_TIMEOUT:?}"))
            }
        }
    }

    /// Tells every subscriber of `channel` (`message`: no secret, it names what changed).
    pub(crate) async fn publish(&self, channel: &str, message: &str) -> Result<(), String> {
        self.query::<i64>(
            channel.as_bytes(),
            redis::cmd("PUBLISH").arg(channel).arg(message),
        )
        .await
        .map(|_| ())
    }

    /// A counter bumped at every message on `channel`, kept subscribed (again after a lost
    /// connection or a failover, within a few seconds) by a task of the current runtime.
    pub(crate) fn subscribe(&self, channel: &str) -> tokio::sync::watch::Receiver<u64> {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let (endpoint, channel) = (self.endpoint.clone(), channel.to_string());
        tokio::spawn(async move {
            let mut failing = false;
            while !tx.is_closed() {
                if let Err(e) = listen(&endpoint, &channel, &tx).await {
                    if !failing {
                        tracing::debug!(error = %e, "fleet store subscription lost; polling meanwhile");
                    }
                    failing = true;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        rx
    }

    /// The value under `key` within `deadline` (a validator's handshake), `None` on any failure.
    pub(crate) async fn get_by(&self, key: &str, deadline: Instant) -> Option<Vec<u8>> {
        tokio::time::timeout_at(deadline, self.get(key))
            .await
            .ok()?
            .ok()?
    }

    /// The value under `key`, if any (one that does not open under the fleet's key, or is past
    /// its expiry, is none).
    pub(crate) async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(match self.read(key).await? {
            Found::Value(v) => Some(v),
            Found::Absent | Found::Refused => None,
        })
    }

    /// What is under `key`: a value, nothing, or a value refused.
    pub(crate) async fn read(&self, key: &str) -> Result<Found, String> {
        let sealed: Option<Vec<u8>> = self
            .query(key.as_bytes(), redis::cmd("GET").arg(key))
            .await?;
        Ok(match sealed {
            None => Found::Absent,
            Some(s) => self
                .open_value(key, &s)
                .map_or(Found::Refused, Found::Value),
        })
    }

    /// The value `sealed` holds, if it opens under `key` and is not past its expiry.
    fn open_value(&self, key: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        let plain = self.sealer.open(key.as_bytes(), sealed)?;
        unexpired(&plain, now_ms()).map(<[u8]>::to_vec)
    }

    /// `value` sealed under `key`, expiring `ttl` from now.
    fn seal_value(&self, key: &str, value: &[u8], ttl: Duration) -> Result<Vec<u8>, String> {
        self.sealer
            .seal(key.as_bytes(), &with_expiry(value, ttl, now_ms()))
            .ok_or_else(|| "cannot seal the value".into())
    }

    /// Stores `value` under `key` for `ttl`.
    pub(crate) async fn put(&self, key: &str, value: &[u8], ttl: Duration) -> Result<(), String> {
        self.put_sealed(key, value, ttl).await.map(|_| ())
    }

    /// The same, returning the sealed value as stored (for [`FleetStore::delete_if`]).
    pub(crate) async fn put_sealed(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> Result<Vec<u8>, String> {
        let sealed = self.seal_value(key, value, ttl)?;
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.query::<()>(
            key.as_bytes(),
            redis::cmd("SET").arg(key).arg(&sealed).arg("PX").arg(ms),
        )
        .await?;
        Ok(sealed)
    }

    /// Deletes `key` if it still holds `sealed` (what [`FleetStore::put_sealed`] stored).
    pub(crate) async fn delete_if(&self, key: &str, sealed: &[u8]) -> Result<(), String> {
        self.query::<i64>(
            key.as_bytes(),
            redis::cmd("EVAL").arg(RELEASE).arg(1).arg(key).arg(sealed),
        )
        .await
        .map(|_| ())
    }

    /// Takes the lease `key` for `holder` for `ttl` if no host of the fleet holds it.
    pub(crate) async fn lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Lease, String> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let new = self.seal_value(key, holder.as_bytes(), ttl)?;
        let set: Option<String> = self
            .query(
                key.as_bytes(),
                redis::cmd("SET")
                    .arg(key)
                    .arg(&new)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms),
            )
            .await?;
        if set.is_some() {
            return Ok(Lease::Taken);
        }
        let current: Option<Vec<u8>> = self
            .query(key.as_bytes(), redis::cmd("GET").arg(key))
            .await?;
        let Some(current) = current else {
            // Released in between: the next try takes it.
            return Ok(Lease::Held);
        };
        if self.open_value(key, &current).is_some() {
            return Ok(Lease::Held);
        }
        Ok(if self.swap(key, &current, &new, ms).await? {
            Lease::TakenOver
        } else {
            Lease::Held
        })
    }

    /// Replaces `old` under `key` with `new` (for `ms`), if `old` is still there.
    async fn swap(&self, key: &str, old: &[u8], new: &[u8], ms: u64) -> Result<bool, String> {
        let n: i64 = self
            .query(
                key.as_bytes(),
                redis::cmd("EVAL")
                    .arg(SWAP)
                    .arg(1)
                    .arg(key)
                    .arg(old)
                    .arg(new)
                    .arg(ms),
            )
            .await?;
        Ok(n == 1)
    }

    /// The lease value under `key` while it is `holder`'s (opened, unexpired), as stored.
    async fn held_by(&self, key: &str, holder: &str) -> Result<Option<Vec<u8>>, String> {
        let current: Option<Vec<u8>> = self
            .query(key.as_bytes(), redis::cmd("GET").arg(key))
            .await?;
        Ok(current.filter(|c| {
            self.open_value(key, c)
                .is_some_and(|h| h == holder.as_bytes())
        }))
    }

    /// Extends `holder`'s lease `key` to `ttl` from now; false when it is no longer held.
    pub(crate) async fn renew_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, String> {
        let Some(current) = self.held_by(key, holder).await? else {
            return Ok(false);
        };
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let new = self.seal_value(key, holder.as_bytes(), ttl)?;
        self.swap(key, &current, &new, ms).await
    }

    /// Gives `holder`'s lease `key` up.
    pub(crate) async fn release(&self, key: &str, holder: &str) -> Result<(), String> {
        let Some(current) = self.held_by(key, holder).await? else {
            return Ok(());
        };
        self.delete_if(key, &current).await
    }
}

/// Listens on `channel` until the connection ends; each message bumps `tx`.
async fn listen(
    endpoint: &Endpoint,
    channel: &str,
    tx: &tokio::sync::watch::Sender<u64>,
) -> Result<(), String> {
    use futures_util::StreamExt as _;
    let info = match endpoint {
        // Classic pub/sub reaches every node of a cluster: the first seed will do.
        Endpoint::Cluster { seeds, template } => {
            let (host, port) = seeds.first().ok_or("no cluster seed")?;
            (super::endpoint::at(template, host, *port), None)
        }
        other => other.resolve().await?,
    };
    let subscribed = async {
        let mut sub = super::transport::subscriber(&info.0, info.1.as_deref()).await?;
        sub.subscribe(channel).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(sub)
    };
    let mut sub = tokio::time::timeout(CALL_TIMEOUT, subscribed)
        .await
        .map_err(|_| format!("no subscription within {CALL_TIMEOUT:?}"))??;
    let mut messages = sub.on_message();
    while messages.next().await.is_some() {
        tx.send_modify(|n| *n = n.wrapping_add(1));
    }
    Err("the subscription ended".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shuck_test_support::redis::RedisServer;

    fn store(redis: &RedisServer, key_file: &Path) -> FleetStore {
        FleetStore::open(&format!("redis://127.0.0.1:{}", redis.port), key_file).expect("open")
    }

    fn key_file(dir: &Path, byte: u8) -> PathBuf {
        let p = dir.join(format!("fleet-{byte}.key"));
        std::fs::write(&p, [byte; 48]).expect("key");
        p
    }

    #[test]
    fn an_envelope_opens_until_its_expiry_and_only_in_its_format() {
        let e = with_expiry(b"v", Duration::from_secs(10), 1_000);
        assert_eq!(unexpired(&e, 11_000 + CLOCK_SKEW_MS - 1), Some(&b"v"[..]));
        assert_eq!(unexpired(&e, 11_000 + CLOCK_SKEW_MS), None);
        assert_eq!(unexpired(b"v", 0), None, "a value of the format before");
        let mut other = e.clone();
        other[0] = 1;
        assert_eq!(unexpired(&other, 0), None);
    }

    /// With a real redis-server: a lease written in the clear (by a writer without the
    /// fleet's key), or one of another fleet, is taken over; one of this fleet is held; a
    /// sealed value written back long after its expiry (as RESTORE of an old DUMP) is refused.
    #[tokio::test]
    async fn foreign_and_stale_values_hold_nobody_off() {
        let redis = RedisServer::start(&[]);
        let dir = tempfile::tempdir().expect("tempdir");
        let (ours, theirs) = (key_file(dir.path(), 7), key_file(dir.path(), 8));
        let (a, b, other_fleet) = (
            store(&redis, &ours),
            store(&redis, &ours),
            store(&redis, &theirs),
        );
        let ttl = Duration::from_secs(15);

        redis.cli(&["SET", "lease:1", "attacker"]);
        assert_eq!(
            a.lease("lease:1", "host-a", ttl).await,
            Ok(Lease::TakenOver)
        );
        assert_eq!(b.lease("lease:1", "host-b", ttl).await, Ok(Lease::Held));
        assert_eq!(a.renew_lease("lease:1", "host-a", ttl).await, Ok(true));
        assert_eq!(b.renew_lease("lease:1", "host-b", ttl).await, Ok(false));
        b.release("lease:1", "host-b").await.unwrap();
        assert_eq!(
            b.lease("lease:1", "host-b", ttl).await,
            Ok(Lease::Held),
            "not b's to release"
        );
        a.release("lease:1", "host-a").await.unwrap();
        assert_eq!(b.lease("lease:1", "host-b", ttl).await, Ok(Lease::Taken));
        assert_eq!(
            other_fleet.lease("lease:1", "x", ttl).await,
            Ok(Lease::TakenOver)
        );

        // A back-off recorded long ago (its sealed expiry two clock margins past), written back
        // without a TTL, as RESTORE of an old DUMP does.
        let old = with_expiry(b"1", Duration::from_secs(3), now_ms() - 2 * CLOCK_SKEW_MS);
        let sealed = a.sealer.seal(b"back-off", &old).unwrap();
        let url = format!("redis://127.0.0.1:{}", redis.port);
        let mut raw = redis::Client::open(url).unwrap().get_connection().unwrap();
        redis::cmd("SET")
            .arg("back-off")
            .arg(sealed)
            .query::<()>(&mut raw)
            .unwrap();
        assert_eq!(a.read("back-off").await, Ok(Found::Refused));
        a.put("back-off", b"1", Duration::from_secs(3))
            .await
            .unwrap();
        assert_eq!(a.read("back-off").await, Ok(Found::Value(b"1".to_vec())));
        redis::cmd("SET")
            .arg("back-off")
            .arg(a.sealer.seal(b"back-off", &old).unwrap())
            .query::<()>(&mut raw)
            .unwrap();
        assert_eq!(a.get("back-off").await, Ok(None));
        redis.cli(&["SET", "plain", "1"]);
        assert_eq!(a.read("plain").await, Ok(Found::Refused));
    }
}
