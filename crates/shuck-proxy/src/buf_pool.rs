//! The per-worker pool of copy buffers. A connection borrows one only while bytes move (a read
//! in progress, bytes waiting to be written) and gives it back at once, so an idle connection
//! holds none (the seeds' SSL_MODE_RELEASE_BUFFERS lesson). The relay, the PROXY header reader
//! and the PROXY header writer all draw from it.

use std::cell::RefCell;

/// One TLS record's worth of plaintext: reads never return more from rustls anyway.
pub const BUF_SIZE: usize = 16 * 1024;
/// Buffers kept for reuse per worker; more are freed so a burst does not pin memory forever.
const POOL_MAX_IDLE: usize = 512;

thread_local! {
    // Workers are single-threaded runtimes, so a thread-local pool is a per-worker pool: no locks.
    static POOL: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer borrowed from the worker's pool; returned on drop.
pub struct PooledBuf(Option<Box<[u8]>>);

impl PooledBuf {
    /// A buffer of at least `n` bytes plus room for one read after them: from the pool when that
    /// fits, else allocated for this use only (a PROXY header carrying a large client certificate).
    pub fn at_least(n: usize) -> PooledBuf {
        if n < BUF_SIZE / 2 {
            PooledBuf::take()
        } else {
            PooledBuf(Some(vec![0u8; n + BUF_SIZE].into_boxed_slice()))
        }
    }

    pub fn take() -> PooledBuf {
        let b = POOL
            .with(|p| p.borrow_mut().pop())
            .unwrap_or_else(|| vec![0u8; BUF_SIZE].into_boxed_slice());
        PooledBuf(Some(b))
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.0.as_deref_mut().unwrap_or_default()
    }

    pub fn bytes(&self) -> &[u8] {
        self.0.as_deref().unwrap_or_default()
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        if let Some(b) = self.0.take().filter(|b| b.len() == BUF_SIZE) {
            POOL.with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < POOL_MAX_IDLE {
                    p.push(b);
                }
            });
        }
    }
}

/// Buffers currently idle in this thread's pool.
#[cfg(test)]
pub fn pool_idle() -> usize {
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
