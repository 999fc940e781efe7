//! The per-worker pool of copy buffers. A connection borrows one only while bytes move (a read
//! in progress, bytes waiting to be written) and gives it back at once, so an idle connection
//! holds none (the SSL_MODE_RELEASE_BUFFERS lesson of Bernat's stud benchmarks). The relay, the PROXY header reader
//! and the PROXY header writer all draw from it.

use std::cell::RefCell;
use std::thread::LocalKey;

/// One TLS record's worth of plaintext: reads never return more from rustls anyway.
pub(crate) const BUF_SIZE: usize = 16 * 1024;
/// One TLS record as it travels: the largest ciphertext record rustls accepts (16 KiB of
/// plaintext, 2 KiB of expansion, the 5-byte header), rounded up. The TLS stream's receive and
/// send buffers are of this size, so any single record fits and 16 KiB of plaintext encrypts
/// into one.
pub(crate) const RECORD_BUF_SIZE: usize = 16 * 1024 + 2 * 1024 + 64;
/// Four record buffers' worth: what a bulk transfer's records gather in before one send.
pub(crate) const BATCH_BUF_SIZE: usize = 4 * RECORD_BUF_SIZE;
/// Copy and record buffers kept for reuse per worker, in each of those two pools; more are freed
/// so a burst does not pin memory forever (the allocator's own caches serve the rest). 64 covers
/// the connections a worker moves bytes for at once at saturation in the shootout (32 clients,
/// two buffers each at most) and keeps at most 2.1 MiB per worker idle (64 of 16 KiB and 64 of
/// 18.1 KiB); 512 kept up to 17 MiB.
const POOL_MAX_IDLE: usize = 64;
/// Batch buffers kept per worker: one per bulk transfer in progress, 32 of them as for the other
/// pools (2.3 MiB at most idle).
const BATCH_POOL_MAX_IDLE: usize = 32;

thread_local! {
    // Workers are single-threaded runtimes, so a thread-local pool is a per-worker pool: no locks.
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    static RECORD_POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
    static BATCH_POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer borrowed from the worker's pool; returned on drop.
pub(crate) struct PooledBuf(Option<Box<[u8]>>);

impl PooledBuf {
    /// A buffer of at least `n` bytes plus room for one read after them: from the pool when that
    /// fits, else allocated for this use only (a PROXY header carrying a large client certificate).
    pub(crate) fn at_least(n: usize) -> PooledBuf {
        if n < BUF_SIZE / 2 {
            PooledBuf::take()
        } else {
            PooledBuf(Some(vec![0u8; n + BUF_SIZE].into_boxed_slice()))
        }
    }

    pub(crate) fn take() -> PooledBuf {
        PooledBuf::from_pool(&POOL, BUF_SIZE)
    }

    /// A buffer from `pool`, or a new one of `size` when it is empty.
    fn from_pool(pool: &'static LocalKey<RefCell<Vec<Box<[u8]>>>>, size: usize) -> PooledBuf {
        let b = pool
            .with(|p| p.borrow_mut().pop())
            .unwrap_or_else(|| vec![0u8; size].into_boxed_slice());
        PooledBuf(Some(b))
    }

    /// A buffer for TLS records of at least `n` bytes: from the record pool when `n` fits in
    /// [`RECORD_BUF_SIZE`], else allocated for this use only (a handshake message spanning
    /// several records, up to rustls' 64 KiB limit), so a peer's partial message pins no more
    /// than its size asks.
    pub(crate) fn record(n: usize) -> PooledBuf {
        if n > RECORD_BUF_SIZE {
            return PooledBuf(Some(vec![0u8; n].into_boxed_slice()));
        }
        PooledBuf::from_pool(&RECORD_POOL, RECORD_BUF_SIZE)
    }

    /// A buffer of [`BATCH_BUF_SIZE`] from the batch pool: room for four records to leave in
    /// one send (the TLS stream's bulk writes).
    pub(crate) fn batch() -> PooledBuf {
        PooledBuf::from_pool(&BATCH_POOL, BATCH_BUF_SIZE)
    }

    /// A buffer of exactly `n` bytes, never pooled: a few bytes kept for long.
    pub(crate) fn exact(n: usize) -> PooledBuf {
        PooledBuf(Some(vec![0u8; n].into_boxed_slice()))
    }

    pub(crate) fn capacity(&self) -> usize {
        self.bytes().len()
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or_default()
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let Some(b) = self.0.take() else { return };
        let (pool, max_idle) = match b.len() {
            BUF_SIZE => (&POOL, POOL_MAX_IDLE),
            RECORD_BUF_SIZE => (&RECORD_POOL, POOL_MAX_IDLE),
            BATCH_BUF_SIZE => (&BATCH_POOL, BATCH_POOL_MAX_IDLE),
            _ => return,
        };
        pool.with(|p| {
            let mut p = p.borrow_mut();
            if p.len() < max_idle {
                p.push(b);
            }
        });
    }
}

/// Buffers currently idle in this thread's pool.
#[cfg(test)]
pub(crate) fn pool_idle() -> usize {
    POOL.with(|p| p.borrow().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_reuses_and_bounds() {
        let a = PooledBuf::take();
        drop(a);
        let idle = pool_idle();
        assert!(idle >= 1);
        let b = PooledBuf::take();
        assert_eq!(pool_idle(), idle - 1);
        drop(b);
        let many: Vec<PooledBuf> = (0..POOL_MAX_IDLE + 10).map(|_| PooledBuf::take()).collect();
        drop(many);
        assert_eq!(pool_idle(), POOL_MAX_IDLE);
    }
}
