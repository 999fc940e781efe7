//! Where TLS 1.2 session IDs (and TLS 1.3 stateful resumptions when tickets are off) are kept.
//! The one place that chooses a store: a shared or remote store plugs in here.

use std::sync::Arc;

use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, StoresServerSessions};

/// The store for one worker's configuration of a frontend: today a cache of `size` sessions in
/// the worker's own memory (no lock shared by the workers on the handshake path), or none.
pub(crate) fn store_for_worker(size: usize) -> Arc<dyn StoresServerSessions> {
    if size == 0 {
        Arc::new(NoServerSessionStorage {})
    } else {
        ServerSessionMemoryCache::new(size)
    }
}
