//! Where TLS 1.2 session IDs (and TLS 1.3 stateful resumptions when tickets are off) are kept:
//! one cache per frontend per process, shared by every worker, so a client resumes on whichever
//! worker the kernel hands its next connection to. The cache is sharded (one lock per shard, the
//! shard picked by the session ID's hash), so workers meet on a lock only when they touch the
//! same shard at the same moment. Bounded by count; entries expire with the session lifetime.
//! The one place that chooses a store: a remote store plugs in here.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, UnitWeighter};
use rustls::server::StoresServerSessions;

/// What the cache counts; the handles are registered by the metrics module.
#[derive(Debug, Clone, Default)]
pub(crate) struct SessionCounters {
    pub hits: Counter,
    pub misses: Counter,
    pub evictions: Counter,
}

#[derive(Clone)]
struct Entry {
    /// Unix seconds when the session was stored.
    stored_at: u64,
    value: Vec<u8>,
}

/// Counts what the cache drops to stay within its size.
#[derive(Clone)]
struct CountEvictions(Counter);

impl Lifecycle<Vec<u8>, Entry> for CountEvictions {
    type RequestState = ();

    fn on_evict(&self, (): &mut (), _key: Vec<u8>, _val: Entry) {
        self.0.inc();
    }
}

/// The share of the cache kept for sessions already resumed once. quick_cache's default (97%)
/// suits data read again and again; a session is stored, then resumed a few times within
/// minutes, so a new one must survive most of the cache's turnover before its first resumption:
/// 80% of the room goes to sessions not yet resumed.
const HOT_SHARE: f64 = 0.2;

type Shards = Cache<Vec<u8>, Entry, UnitWeighter, DefaultHashBuilder, CountEvictions>;

/// One frontend's session cache. Kept across reloads (resized, or emptied when the client
/// certificate trust changes).
pub(crate) struct SessionCache {
    entries: arc_swap::ArcSwapOption<Shards>,
    /// The size asked for (the shards round it up, so it is kept to compare with).
    size: AtomicUsize,
    lifetime_secs: AtomicU64,
    counters: SessionCounters,
}

impl std::fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCache")
            .field("lifetime_secs", &self.lifetime_secs)
            .finish_non_exhaustive()
    }
}

impl SessionCache {
    /// A cache of at most `size` sessions (none when 0), each resumable for `lifetime`.
    pub(crate) fn new(
        size: usize,
        lifetime: Duration,
        counters: SessionCounters,
    ) -> Arc<SessionCache> {
        let cache = SessionCache {
            entries: arc_swap::ArcSwapOption::empty(),
            size: AtomicUsize::new(size),
            lifetime_secs: AtomicU64::new(lifetime.as_secs()),
            counters,
        };
        cache.resize(size);
        Arc::new(cache)
    }

    /// A new size (0 turns the cache off) and lifetime, on reload. A new size starts empty.
    pub(crate) fn reconfigure(&self, size: usize, lifetime: Duration) {
        self.lifetime_secs
            .store(lifetime.as_secs(), Ordering::Relaxed);
        if self.size.swap(size, Ordering::Relaxed) != size {
            self.resize(size);
        }
    }

    /// An empty cache with the same settings and counters: for a change of client-certificate
    /// trust, where the old cache must not be filled further by handshakes still running under
    /// the old trust (a resumed session is not checked again).
    pub(crate) fn fresh(&self) -> Arc<SessionCache> {
        Self::new(
            self.size.load(Ordering::Relaxed),
            Duration::from_secs(self.lifetime_secs.load(Ordering::Relaxed)),
            self.counters.clone(),
        )
    }

    fn resize(&self, size: usize) {
        let shards = (size > 0).then(|| {
            let lifecycle = CountEvictions(self.counters.evictions.clone());
            let options = quick_cache::OptionsBuilder::new()
                .estimated_items_capacity(size)
                .weight_capacity(size as u64)
                .hot_allocation(HOT_SHARE)
                .build();
            Arc::new(match options {
                Ok(o) => {
                    Shards::with_options(o, UnitWeighter, DefaultHashBuilder::default(), lifecycle)
                }
                Err(_) => Shards::with(
                    size,
                    size as u64,
                    UnitWeighter,
                    DefaultHashBuilder::default(),
                    lifecycle,
                ),
            })
        });
        self.entries.store(shards);
    }

    /// Whether a live entry is there (not counted: the remote store asks before a lookup).
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        let lifetime = self.lifetime_secs.load(Ordering::Relaxed);
        self.entries.load().as_ref().is_some_and(|c| {
            c.peek(key).is_some_and(|e| {
                crate::sys::clock::unix_now()
                    .unsigned_abs()
                    .saturating_sub(e.stored_at)
                    < lifetime
            })
        })
    }

    /// The entry's value if it is there and not expired; counts the lookup.
    fn lookup(&self, key: &[u8], remove: bool) -> Option<Vec<u8>> {
        let guard = self.entries.load();
        let shards = guard.as_ref()?;
        let found = if remove {
            shards.remove(key).map(|(_, e)| e)
        } else {
            shards.get(key)
        };
        let now = crate::sys::clock::unix_now().unsigned_abs();
        let lifetime = self.lifetime_secs.load(Ordering::Relaxed);
        match found {
            Some(e) if now.saturating_sub(e.stored_at) < lifetime => {
                self.counters.hits.inc();
                Some(e.value)
            }
            _ => {
                self.counters.misses.inc();
                None
            }
        }
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let guard = self.entries.load();
        let Some(shards) = guard.as_ref() else {
            return false;
        };
        let stored_at = crate::sys::clock::unix_now().unsigned_abs();
        shards.insert(key, Entry { stored_at, value });
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, false)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, true)
    }

    fn can_cache(&self) -> bool {
        self.entries.load().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_expiring_and_counted() {
        let counters = SessionCounters::default();
        let cache = SessionCache::new(100, Duration::from_secs(60), counters.clone());
        for i in 0..1000u32 {
            assert!(cache.put(i.to_be_bytes().to_vec(), vec![1; 100]));
        }
        let kept = (0..1000u32)
            .filter(|i| cache.get(&i.to_be_bytes()).is_some())
            .count();
        assert!(kept <= 100, "at most the cache's size is kept: {kept}");
        assert!(
            counters.evictions.get() >= 900,
            "{}",
            counters.evictions.get()
        );
        assert_eq!(counters.hits.get() + counters.misses.get(), 1000);
        // take removes: a TLS 1.3 stateful session resumes once.
        cache.put(b"once".to_vec(), b"v".to_vec());
        assert_eq!(cache.take(b"once").as_deref(), Some(&b"v"[..]));
        assert_eq!(cache.take(b"once"), None);
        // Expired entries are not served.
        cache.put(b"old".to_vec(), b"v".to_vec());
        cache.reconfigure(100, Duration::ZERO);
        assert_eq!(cache.get(b"old"), None, "expired");
        // Size 0 turns it off.
        cache.reconfigure(0, Duration::from_secs(60));
        assert!(!cache.can_cache());
        assert!(!cache.put(b"k".to_vec(), b"v".to_vec()));
    }
}
