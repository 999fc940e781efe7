//! Process limits: raise the open-files soft limit to the hard limit, since every proxied
//! connection costs two descriptors.

/// Descriptors kept for listeners, logs and the runtime.
const RESERVED_FDS: u64 = 64;

/// Raises the limit and returns it (or the unchanged limit when raising is not possible).
pub fn raise_fd_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-files limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// How many proxied connections fit in `fd_limit` descriptors.
pub fn connection_capacity(fd_limit: u64) -> u64 {
    fd_limit.saturating_sub(RESERVED_FDS) / 2
}
