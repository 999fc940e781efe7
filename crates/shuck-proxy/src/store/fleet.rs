//! What a fleet keeps in its store besides sessions (ACME's certificates, account, challenges
//! and the lease on each order), for tasks of the main thread's runtime: its own connections (a
//! router like a worker's, bounded the same), every value sealed with the fleet's key and bound
//! to its key, every call within a deadline.

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

/// Renews a lease only for its holder.
const RENEW: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";
/// Deletes a key only while it holds the value given (a lease's holder, a challenge's value).
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

    /// The value under `key`, if any (one that does not open under the fleet's key is none).
    pub(crate) async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let sealed: Option<Vec<u8>> = self
            .query(key.as_bytes(), redis::cmd("GET").arg(key))
            .await?;
        Ok(sealed.and_then(|s| self.sealer.open(key.as_bytes(), &s)))
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
        let sealed = self
            .sealer
            .seal(key.as_bytes(), value)
            .ok_or("cannot seal the value")?;
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

    /// Takes the lease `key` for `holder` for `ttl` if nobody holds it; whether it was taken.
    pub(crate) async fn lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, String> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let set: Option<String> = self
            .query(
                key.as_bytes(),
                redis::cmd("SET")
                    .arg(key)
                    .arg(holder)
                    .arg("NX")
                    .arg("PX")
                    .arg(ms),
            )
            .await?;
        Ok(set.is_some())
    }

    /// Extends `holder`'s lease `key` to `ttl` from now; false when it is no longer held.
    pub(crate) async fn renew_lease(
        &self,
        key: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<bool, String> {
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let n: i64 = self
            .query(
                key.as_bytes(),
                redis::cmd("EVAL")
                    .arg(RENEW)
                    .arg(1)
                    .arg(key)
                    .arg(holder)
                    .arg(ms),
            )
            .await?;
        Ok(n == 1)
    }

    /// Gives `holder`'s lease `key` up.
    pub(crate) async fn release(&self, key: &str, holder: &str) -> Result<(), String> {
        self.query::<i64>(
            key.as_bytes(),
            redis::cmd("EVAL").arg(RELEASE).arg(1).arg(key).arg(holder),
        )
        .await
        .map(|_| ())
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
            super::endpoint::at(template, host, *port)
        }
        other => other.resolve().await?,
    };
    let subscribed = async {
        let mut sub = super::transport::subscriber(&info).await?;
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
