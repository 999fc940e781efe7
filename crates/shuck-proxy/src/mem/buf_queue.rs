//! Bytes waiting in a buffer borrowed from the worker's record pool: TLS records received and
//! not yet processed, records encoded and not yet sent, plaintext not yet read. The buffer is
//! given back the moment the queue is empty, so an idle connection holds none.

use std::io;

use crate::mem::buf_pool::{PooledBuf, RECORD_BUF_SIZE};

/// The most a queue grows to: a handshake message rustls joins from several records stays in
/// the receive buffer until it is whole (rustls refuses messages over 64 KiB), with the records'
/// headers and expansion around it. (Growth doubles the record buffer: 18.5, 37, 74 KiB.)
pub(crate) const QUEUE_MAX: usize = 64 * 1024 + RECORD_BUF_SIZE;
/// Bytes few enough to move out of a record buffer while they wait (see `shrink_small`).
const SMALL: usize = 1024;

/// The bytes in `buf[start..end]`.
#[derive(Default)]
pub(crate) struct BufQueue {
    buf: Option<PooledBuf>,
    start: usize,
    end: usize,
}

impl BufQueue {
    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.end
    }

    pub(crate) fn len(&self) -> usize {
        self.end - self.start
    }

    pub(crate) fn data(&self) -> &[u8] {
        self.buf
            .as_ref()
            .map_or(&[][..], |b| &b.bytes()[self.start..self.end])
    }

    pub(crate) fn data_mut(&mut self) -> &mut [u8] {
        match &mut self.buf {
            Some(b) => &mut b.bytes_mut()[self.start..self.end],
            None => &mut [],
        }
    }

    /// Drops `n` bytes from the front; an emptied queue gives its buffer back.
    pub(crate) fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.is_empty() {
            self.clear();
        }
    }

    pub(crate) fn clear(&mut self) {
        self.buf = None;
        self.start = 0;
        self.end = 0;
    }

    /// An empty queue takes a batch buffer (four records) now, so the records pushed next do
    /// not grow it by copies.
    pub(crate) fn reserve_batch(&mut self) {
        if self.buf.is_none() {
            self.buf = Some(PooledBuf::batch());
            (self.start, self.end) = (0, 0);
        }
    }

    /// Free space behind the bytes, at least `n` of it: the bytes move to the front of the
    /// buffer, or to a larger one, when they must. `None` past [`QUEUE_MAX`].
    pub(crate) fn room(&mut self, n: usize) -> Option<&mut [u8]> {
        if self.buf.is_none() {
            if n > QUEUE_MAX {
                return None;
            }
            self.buf = Some(PooledBuf::record(n));
        }
        let cap = self.buf.as_ref().map_or(0, PooledBuf::capacity);
        if cap - self.end < n {
            let len = self.len();
            if len + n > QUEUE_MAX {
                return None;
            }
            if cap < len + n {
                // At least double, so a message joined from many records is copied few times.
                let mut bigger = PooledBuf::record((len + n).max(2 * cap).min(QUEUE_MAX));
                bigger.bytes_mut()[..len].copy_from_slice(self.data());
                self.buf = Some(bigger);
            } else if let Some(b) = &mut self.buf {
                b.bytes_mut().copy_within(self.start..self.end, 0);
            }
            (self.start, self.end) = (0, len);
        }
        let end = self.end;
        self.buf.as_mut().map(|b| &mut b.bytes_mut()[end..])
    }

    /// Room for one socket read: the rest of the buffer, or a larger buffer when it is full.
    pub(crate) fn read_room(&mut self) -> io::Result<&mut [u8]> {
        let cap = self.buf.as_ref().map_or(0, PooledBuf::capacity);
        let len = self.len();
        let want = if cap < RECORD_BUF_SIZE {
            // No buffer, or a few waiting bytes in a small one: a record buffer from the pool.
            RECORD_BUF_SIZE - len
        } else if len < cap {
            // Whatever is free once the bytes are at the front.
            cap - len
        } else {
            // Full, with no whole message in it: twice the size.
            cap
        };
        self.room(want)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "TLS message too large"))
    }

    /// Moves a few waiting bytes (a partial record a client left) out of the record buffer into
    /// an allocation of their size, so a stalled peer does not pin 18.5 KiB.
    pub(crate) fn shrink_small(&mut self) {
        let len = self.len();
        if len == 0 || len > SMALL || self.buf.as_ref().map_or(0, PooledBuf::capacity) <= SMALL {
            return;
        }
        let mut small = PooledBuf::exact(len);
        small.bytes_mut().copy_from_slice(self.data());
        self.buf = Some(small);
        (self.start, self.end) = (0, len);
    }

    /// Marks `n` bytes written into the room as queued.
    pub(crate) fn filled(&mut self, n: usize) {
        self.end += n;
        if self.is_empty() {
            self.clear();
        }
    }

    /// Appends `bytes`.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let room = self
            .room(bytes.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "TLS message too large"))?;
        room[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_holds_a_buffer_only_while_it_holds_bytes() {
        let mut q = BufQueue::default();
        assert!(q.buf.is_none());
        q.push(b"hello").unwrap();
        assert_eq!(q.data(), b"hello");
        q.consume(2);
        assert_eq!(q.data(), b"llo");
        q.consume(3);
        assert!(q.buf.is_none(), "emptied: the buffer went back");
        // A read that found nothing leaves no buffer behind.
        let _ = q.read_room().unwrap();
        q.filled(0);
        assert!(q.buf.is_none());
    }

    #[test]
    fn room_comes_with_a_buffer() {
        let mut q = BufQueue::default();
        assert_eq!(q.room(0).map(|r| r.len()), Some(RECORD_BUF_SIZE));
        q.filled(0);
        assert!(q.buf.is_none());
        assert!(q.room(100_000).is_none());
    }

    #[test]
    fn a_queue_grows_for_a_large_message_and_stops_at_its_limit() {
        let mut q = BufQueue::default();
        let record = vec![7u8; RECORD_BUF_SIZE];
        q.push(&record).unwrap();
        // Full: the next read gets a larger buffer, the bytes kept in order.
        let room = q.read_room().unwrap().len();
        assert!(room >= RECORD_BUF_SIZE);
        q.push(&[8u8; 100]).unwrap();
        assert_eq!(q.len(), RECORD_BUF_SIZE + 100);
        assert!(q.data()[..RECORD_BUF_SIZE].iter().all(|&b| b == 7));
        assert!(q.data()[RECORD_BUF_SIZE..].iter().all(|&b| b == 8));
        assert!(q.push(&vec![0u8; QUEUE_MAX]).is_err());
    }

    #[test]
    fn a_few_waiting_bytes_leave_the_record_buffer() {
        let mut q = BufQueue::default();
        q.push(b"\x17\x03\x03").unwrap();
        q.shrink_small();
        assert_eq!(q.buf.as_ref().unwrap().capacity(), 3);
        // The next read gets a full record's room again, the bytes in front.
        assert!(q.read_room().unwrap().len() >= RECORD_BUF_SIZE - 3);
        q.filled(2);
        assert_eq!(q.data(), b"\x17\x03\x03\0\0");
        // Many bytes stay where they are.
        let mut big = BufQueue::default();
        big.push(&[1u8; 4000]).unwrap();
        big.shrink_small();
        assert_eq!(big.buf.as_ref().unwrap().capacity(), RECORD_BUF_SIZE);
    }

    #[test]
    fn consumed_bytes_make_room_at_the_front() {
        let mut q = BufQueue::default();
        q.push(&vec![1u8; RECORD_BUF_SIZE - 10]).unwrap();
        q.consume(RECORD_BUF_SIZE - 20);
        // 10 bytes left near the end: room for 100 more comes from moving them to the front.
        q.push(&[2u8; 100]).unwrap();
        assert_eq!(q.len(), 110);
        assert_eq!(q.buf.as_ref().unwrap().capacity(), RECORD_BUF_SIZE);
    }
}
