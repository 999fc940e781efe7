//! Buffers: the per-worker pools and the queues built on them.

pub(crate) mod buf_pool;
pub(crate) mod buf_queue;
