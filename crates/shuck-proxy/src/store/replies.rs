//! A bound on what the store may send: every reply is scanned (RESP framing only, the redis
//! crate still parses it) as its bytes arrive, before the redis crate buffers them, and a reply
//! larger than any session could be (a bulk string of `$6000000000`, an endless simple string,
//! an array of a million elements) ends the connection with an error instead of growing a buffer
//! until memory runs out. The redis crate has no such limit of its own.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A sealed session is a few hundred bytes to a few KiB (a client certificate chain at most):
/// no reply shuck asks for comes near this.
pub(super) const MAX_REPLY: usize = 64 * 1024;
/// Elements of one array reply, and arrays within arrays: shuck's commands answer with none.
const MAX_ELEMENTS: i64 = 1024;
const MAX_DEPTH: usize = 4;
/// The longest header line (`$65536`, `*1024`, `:-9223372036854775808`).
const MAX_HEADER: usize = 32;

/// A store reply over the bound, or not RESP at all.
#[derive(Debug, thiserror::Error)]
#[error("session store reply refused: {0}")]
pub(super) struct Refused(&'static str);

/// Where the scanner is within the current reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// The type byte of the next element.
    Type,
    /// A header or simple line, up to its CR LF.
    Line { kind: u8, len: usize },
    /// A bulk string's bytes and their CR LF.
    Bulk { left: usize },
}

/// The RESP framing of the replies seen so far: enough to know where each reply ends and how
/// large it is, nothing of what it says.
#[derive(Debug)]
pub(super) struct Scanner {
    at: At,
    /// Elements still to come in each open array.
    open: Vec<i64>,
    /// The header line being read (a number).
    header: [u8; MAX_HEADER],
    /// Bytes of the current top-level reply so far.
    reply: usize,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            at: At::Type,
            open: Vec::with_capacity(MAX_DEPTH),
            header: [0; MAX_HEADER],
            reply: 0,
        }
    }
}

impl Scanner {
    /// Scans `bytes`, the next ones from the store.
    pub(super) fn scan(&mut self, bytes: &[u8]) -> Result<(), Refused> {
        for &b in bytes {
            self.reply += 1;
            if self.reply > MAX_REPLY {
                return Err(Refused("larger than 64 KiB"));
            }
            self.step(b)?;
        }
        Ok(())
    }

    fn step(&mut self, b: u8) -> Result<(), Refused> {
        match self.at {
            At::Type => match b {
                b'+' | b'-' | b':' | b'$' | b'*' | b'_' | b',' | b'#' | b'(' | b'=' | b'!' => {
                    self.at = At::Line { kind: b, len: 0 };
                }
                // RESP3 maps, sets, pushes and attributes: shuck speaks RESP2.
                _ => return Err(Refused("not a RESP2 reply")),
            },
            At::Line { kind, len } => {
                if b == b'\n' {
                    return self.line_done(kind, len);
                }
                let numeric = matches!(kind, b':' | b'$' | b'*' | b'=' | b'!');
                if numeric {
                    let slot = self.header.get_mut(len).ok_or(Refused("header too long"))?;
                    *slot = b;
                }
                self.at = At::Line { kind, len: len + 1 };
            }
            At::Bulk { left } => {
                if left == 1 {
                    if b != b'\n' {
                        return Err(Refused("bulk string not ended by CR LF"));
                    }
                    self.element_done();
                } else {
                    self.at = At::Bulk { left: left - 1 };
                }
            }
        }
        Ok(())
    }

    /// A line ended (`len` bytes before its LF, CR included).
    fn line_done(&mut self, kind: u8, len: usize) -> Result<(), Refused> {
        match kind {
            b'$' | b'=' | b'!' => {
                let n = self.number(len)?;
                if n < 0 {
                    self.element_done();
                } else {
                    let n = usize::try_from(n).map_err(|_| Refused("bad length"))?;
                    if n > MAX_REPLY {
                        return Err(Refused("bulk string longer than 64 KiB"));
                    }
                    self.at = At::Bulk { left: n + 2 };
                }
            }
            b'*' => {
                let n = self.number(len)?;
                if n > MAX_ELEMENTS {
                    return Err(Refused("array of more than 1024 elements"));
                }
                if n <= 0 {
                    self.element_done();
                } else if self.open.len() >= MAX_DEPTH {
                    return Err(Refused("arrays nested too deep"));
                } else {
                    self.open.push(n);
                    self.at = At::Type;
                }
            }
            b':' => {
                self.number(len)?;
                self.element_done();
            }
            _ => self.element_done(),
        }
        Ok(())
    }

    /// The header line's number (its bytes before the CR).
    fn number(&self, len: usize) -> Result<i64, Refused> {
        let digits = self
            .header
            .get(..len.saturating_sub(1))
            .filter(|_| len >= 1 && self.header.get(len - 1) == Some(&b'\r'))
            .ok_or(Refused("header not ended by CR LF"))?;
        std::str::from_utf8(digits)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(Refused("header is not a number"))
    }

    /// An element ended: the array it is in has one fewer to come; a top-level one ends the
    /// reply.
    fn element_done(&mut self) {
        self.at = At::Type;
        while let Some(left) = self.open.last_mut() {
            *left -= 1;
            if *left > 0 {
                return;
            }
            self.open.pop();
        }
        self.reply = 0;
    }
}

/// The store's stream with every byte read passed through a [`Scanner`]; a reply over the bound
/// fails the read (the connection ends) and sets `refused`, which the caller reads to count it.
pub(super) struct Bounded<S> {
    inner: S,
    scanner: Scanner,
    refused: Arc<AtomicBool>,
}

impl<S> Bounded<S> {
    pub(super) fn new(inner: S, refused: Arc<AtomicBool>) -> Bounded<S> {
        Bounded {
            inner,
            scanner: Scanner::default(),
            refused,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if let Err(e) = this.scanner.scan(&buf.filled()[before..]) {
                    this.refused.store(true, Ordering::Relaxed);
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, e)));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan_all(chunks: &[&[u8]]) -> Result<(), Refused> {
        let mut s = Scanner::default();
        for c in chunks {
            s.scan(c)?;
        }
        Ok(())
    }

    #[test]
    fn the_replies_shucks_commands_get_pass_in_any_split() {
        let value = vec![b'v'; MAX_REPLY - 16];
        let mut bulk = format!("${}\r\n", value.len()).into_bytes();
        bulk.extend_from_slice(&value);
        bulk.extend_from_slice(b"\r\n");
        let mut all =
            b"+OK\r\n+PONG\r\n$-1\r\n:1\r\n-ERR wrong\r\n*2\r\n+OK\r\n$3\r\nabc\r\n*0\r\n".to_vec();
        all.extend_from_slice(&bulk);
        all.extend_from_slice(&bulk);
        for split in [1, 7, 4096, all.len()] {
            let chunks: Vec<&[u8]> = all.chunks(split).collect();
            assert!(scan_all(&chunks).is_ok(), "split {split}");
        }
    }

    #[test]
    fn a_bulk_string_over_the_bound_is_refused_at_its_header() {
        let e = scan_all(&[b"$6000000000\r\n"]).expect_err("refused");
        assert!(e.to_string().contains("64 KiB"), "{e}");
        assert!(scan_all(&[format!("${}\r\n", MAX_REPLY + 1).as_bytes()]).is_err());
    }

    #[test]
    fn endless_lines_many_elements_and_deep_nesting_are_refused() {
        let endless = vec![b'x'; MAX_REPLY + 1];
        assert!(
            scan_all(&[b"+", &endless]).is_err(),
            "a simple string without end"
        );
        assert!(scan_all(&[b"$12345678901234567890123456789012345\r\n"]).is_err());
        assert!(scan_all(&[b"*1000000\r\n"]).is_err(), "a million elements");
        assert!(
            scan_all(&[b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n"]).is_err(),
            "five deep"
        );
        let many_small: Vec<u8> = std::iter::once(b"*1024\r\n".to_vec())
            .chain(std::iter::repeat_n(
                b"$100\r\n"
                    .iter()
                    .copied()
                    .chain([b'a'; 100])
                    .chain(*b"\r\n")
                    .collect(),
                1024,
            ))
            .flatten()
            .collect();
        assert!(
            scan_all(&[&many_small]).is_err(),
            "a reply of 1024 × 100 bytes is over 64 KiB"
        );
        assert!(scan_all(&[b"%1\r\n"]).is_err(), "RESP3 map");
        assert!(
            scan_all(&[b"$3\r\nabcXY"]).is_err(),
            "bulk not ended by CR LF"
        );
        assert!(scan_all(&[b":12x\r\n"]).is_err(), "integer garbage");
    }

    #[test]
    fn the_bound_is_per_reply_not_per_connection() {
        let value = vec![b'v'; 60_000];
        let mut one = format!("${}\r\n", value.len()).into_bytes();
        one.extend_from_slice(&value);
        one.extend_from_slice(b"\r\n");
        let mut s = Scanner::default();
        for _ in 0..100 {
            s.scan(&one).expect("each reply is under the bound");
        }
    }
}
