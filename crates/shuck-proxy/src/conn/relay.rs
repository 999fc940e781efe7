//! Copying bytes both ways between the TLS client and the backend, honouring half-close.
//!
//! Memory: a connection holds a copy buffer only while data is in flight. Each read borrows a
//! buffer from the worker's pool and gives it back when the read would block or once the bytes
//! are written out, so an idle connection holds none (the SSL_MODE_RELEASE_BUFFERS lesson of Bernat's stud benchmarks).

use std::future::{poll_fn, Future};
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

// tokio's clock, the one the idle timer runs on (and the tests can pause).
use tokio::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::backend::health::Seen;
use crate::conn::idle::{Close, Watched};
use crate::mem::buf_pool::PooledBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The first bytes for the writer (a PROXY header) are in `buf[..end]`; client bytes that
    /// have already arrived are read in behind them so both leave in one segment.
    Prefix,
    Reading,
    Writing,
    Flushing,
    ShuttingDown,
    Done,
}

/// Which side a pump's failed read, and its failed write, are the fault of.
#[derive(Clone, Copy)]
struct Blame {
    read: fn(io::Error) -> RelayError,
    write: fn(io::Error) -> RelayError,
}

/// The up pump reads the client and writes the backend; the down pump the other way round.
const UP: Blame = Blame {
    read: RelayError::ClientAborted,
    write: RelayError::Backend,
};
const DOWN: Blame = Blame {
    read: RelayError::BackendAborted,
    write: RelayError::Client,
};

/// Which end of a pump failed: its reader or its writer.
enum PumpError {
    Read(io::Error),
    Write(io::Error),
}

/// One direction of the relay.
// Reason: four independent facts about one direction, each set and read in one place; a state
// enum of their combinations would be harder to follow.
#[allow(clippy::struct_excessive_bools)]
struct Pump {
    state: State,
    buf: Option<PooledBuf>,
    start: usize,
    end: usize,
    bytes: u64,
    /// Treat `UnexpectedEof` from the reader as a clean end: TLS clients that close TCP without
    /// close_notify (common for HTTP/1.0 clients) have still sent everything they meant to.
    lenient_eof: bool,
    /// The reader ended while the prefix was read in behind the PROXY header: shut down once
    /// it is written.
    eof_after_write: bool,
    /// The writer is plain TCP, closed as soon as the relay ends: once the other direction has
    /// ended too, its FIN comes with the close, and a shutdown first is a system call for
    /// nothing. (Not for the TLS client, which must get close_notify.)
    close_is_shutdown: bool,
    /// Written without a flush yet. Each write is followed by one more read before the flush,
    /// so what has already arrived leaves together: full reads gather into full records, and an
    /// answer whose end is already there goes out with the shutdown (the TLS stream sends the
    /// last record and close_notify in one system call). The read costs no system call when the
    /// socket has nothing (tokio clears its readiness after a short read). Flushed before this
    /// direction waits for its reader; at the reader's end the shutdown flushes.
    unflushed: bool,
}

impl Pump {
    fn new(lenient_eof: bool) -> Pump {
        Pump {
            state: State::Reading,
            buf: None,
            start: 0,
            end: 0,
            bytes: 0,
            lenient_eof,
            eof_after_write: false,
            close_is_shutdown: false,
            unflushed: false,
        }
    }

    fn with_prefix(lenient_eof: bool, buf: PooledBuf, len: usize) -> Pump {
        Pump {
            state: State::Prefix,
            buf: Some(buf),
            end: len,
            ..Pump::new(lenient_eof)
        }
    }

    fn done(&self) -> bool {
        self.state == State::Done
    }

    /// Whether nothing this direction read waits to be written or flushed.
    fn holds_nothing(&self) -> bool {
        matches!(self.state, State::Reading | State::Done) && !self.unflushed
    }

    /// Polls this direction unless it is done. A read error is returned (the stream is broken and
    /// the relay ends); a write error ends only this direction and is kept in `write_error`.
    /// `blame` maps a read error and a write error to the side at fault.
    fn drive<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        moved: &mut bool,
        (blame, other_done): (Blame, bool),
        write_error: &mut Option<RelayError>,
    ) -> Result<(), RelayError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        if self.done() {
            return Ok(());
        }
        match self.poll(cx, reader, writer, moved, other_done) {
            Poll::Ready(Err(PumpError::Read(e))) => Err((blame.read)(e)),
            Poll::Ready(Err(PumpError::Write(e))) => {
                self.abandon();
                write_error.get_or_insert((blame.write)(e));
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Gives up on this direction after a write error; its unsent bytes are dropped.
    fn abandon(&mut self) {
        self.buf = None;
        self.state = State::Done;
    }

    /// One read into a pooled buffer, and the state it leads to: Writing with the bytes,
    /// Flushing before the wait after writes, ShuttingDown at the end, or the wait
    /// itself, holding no buffer.
    fn poll_next_read<R: AsyncRead + Unpin>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        moved: &mut bool,
    ) -> Poll<Result<(), PumpError>> {
        let mut buf = PooledBuf::take();
        let mut rb = ReadBuf::new(buf.bytes_mut());
        match Pin::new(&mut *reader).poll_read(cx, &mut rb) {
            // Nothing more for now: what was written goes out before the wait.
            Poll::Pending if self.unflushed => self.state = State::Flushing,
            // `buf` goes back to the pool here: nothing held while idle.
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) if self.lenient_eof && e.kind() == io::ErrorKind::UnexpectedEof => {
                self.state = State::ShuttingDown;
            }
            Poll::Ready(Err(e)) => return Poll::Ready(Err(PumpError::Read(e))),
            Poll::Ready(Ok(())) => {
                let n = rb.filled().len();
                if n == 0 {
                    self.state = State::ShuttingDown;
                } else {
                    self.unflushed = true;
                    self.buf = Some(buf);
                    self.start = 0;
                    self.end = n;
                    self.bytes += n as u64;
                    self.state = State::Writing;
                    *moved = true;
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    fn poll<R, W>(
        &mut self,
        cx: &mut Context<'_>,
        reader: &mut R,
        writer: &mut W,
        moved: &mut bool,
        other_done: bool,
    ) -> Poll<Result<(), PumpError>>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        loop {
            match self.state {
                State::Prefix => {
                    let len = self.end;
                    let buf = self.buf.as_mut().map_or(&mut [][..], PooledBuf::bytes_mut);
                    let mut rb = ReadBuf::new(&mut buf[len..]);
                    // One poll, never a wait: a server-speaks-first backend must get the
                    // header even if the client says nothing.
                    match Pin::new(&mut *reader).poll_read(cx, &mut rb) {
                        Poll::Pending => {}
                        Poll::Ready(Err(e))
                            if self.lenient_eof && e.kind() == io::ErrorKind::UnexpectedEof =>
                        {
                            self.eof_after_write = true;
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(PumpError::Read(e))),
                        Poll::Ready(Ok(())) => {
                            let n = rb.filled().len();
                            if n == 0 {
                                self.eof_after_write = true;
                            }
                            self.end += n;
                            self.bytes += n as u64;
                        }
                    }
                    self.start = 0;
                    self.state = State::Writing;
                    *moved = true;
                }
                State::Reading => ready!(self.poll_next_read(cx, reader, moved))?,
                State::Writing => {
                    let buf = self.buf.as_ref().map_or(&[][..], PooledBuf::bytes);
                    while self.start < self.end {
                        let n = match Pin::new(&mut *writer)
                            .poll_write(cx, &buf[self.start..self.end])
                        {
                            Poll::Pending => return Poll::Pending,
                            Poll::Ready(r) => r.map_err(PumpError::Write)?,
                        };
                        if n == 0 {
                            return Poll::Ready(Err(PumpError::Write(
                                io::ErrorKind::WriteZero.into(),
                            )));
                        }
                        self.start += n;
                        *moved = true;
                    }
                    self.buf = None;
                    self.unflushed = true;
                    self.state = if self.eof_after_write {
                        State::ShuttingDown
                    } else {
                        State::Reading
                    };
                }
                State::Flushing => {
                    match Pin::new(&mut *writer).poll_flush(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(r) => r.map_err(PumpError::Write)?,
                    }
                    self.unflushed = false;
                    self.state = State::Reading;
                }
                State::ShuttingDown if self.close_is_shutdown && other_done => {
                    if self.unflushed {
                        ready!(Pin::new(&mut *writer).poll_flush(cx)).map_err(PumpError::Write)?;
                        self.unflushed = false;
                    }
                    self.state = State::Done;
                }
                State::ShuttingDown => {
                    // Half-close: the peer's EOF reaches the other side as FIN (or close_notify
                    // then FIN towards the TLS client), while the other direction keeps flowing.
                    // A shutdown flushes first (AsyncWrite's contract).
                    match Pin::new(&mut *writer).poll_shutdown(cx) {
                        Poll::Pending => return Poll::Pending,
                        // Bytes this shutdown was to send did not go: the writer's failure.
                        // (tokio's TCP shutdown reports an already reset peer, ENOTCONN, as
                        // success: the FIN alone did not matter.)
                        Poll::Ready(Err(e)) if self.unflushed => {
                            return Poll::Ready(Err(PumpError::Write(e)));
                        }
                        // Everything was sent before; the other side may be gone since. The
                        // direction is finished anyway.
                        Poll::Ready(_) => {}
                    }
                    self.unflushed = false;
                    self.state = State::Done;
                }
                State::Done => return Poll::Ready(Ok(())),
            }
        }
    }
}

/// Why a relay ended early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RelayError {
    /// Reading the client failed (a reset, a TLS error): its stream is broken mid-way, and the
    /// backend should learn that by an abort, not by an EOF it could take for a complete request.
    #[error("client aborted: {0}")]
    ClientAborted(io::Error),
    /// Reading the backend failed (usually a reset): the client should see an abort too.
    #[error("backend aborted: {0}")]
    BackendAborted(io::Error),
    /// Writing to the client failed; the other direction was still carried to its end.
    #[error("client side: {0}")]
    Client(io::Error),
    /// Writing to the backend failed; the other direction was still carried to its end.
    #[error("backend side: {0}")]
    Backend(io::Error),
    #[error("idle for longer than {0:?}")]
    Idle(Duration),
    /// The worker closed it, idle, to free a slot near `max_connections` (`conn::idle`);
    /// `in_flight`: bytes were still waiting for a peer that did not read them (the close is
    /// then an abort, as an idle timeout's, so no peer takes a cut stream for a whole one).
    #[error("closed while idle to free a slot near max_connections")]
    Evicted { in_flight: bool },
    /// An operator closed it (`shuck ctl connections close`, a disabled backend); `in_flight`
    /// as for `Evicted`.
    #[error("closed by an operator")]
    ClosedByOperator { in_flight: bool },
}

/// Bytes moved: client to backend, backend to client.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Moved {
    pub up: u64,
    pub down: u64,
}

/// What a relay's end showed of the backend (`health_check.observe`): failed when the backend's
/// side broke (a reset, a broken pipe: not one of this host's resources) before it sent a byte;
/// answered when it sent one, or when both directions ended in order; nothing otherwise (the
/// client went away, or everything idled, before the backend said anything).
pub(crate) fn backend_seen(moved: Moved, res: &Result<(), RelayError>) -> Seen {
    match res {
        Err(RelayError::BackendAborted(e) | RelayError::Backend(e))
            if moved.down == 0 && crate::backend::peer_failure(e) =>
        {
            Seen::Failed
        }
        Err(RelayError::BackendAborted(_) | RelayError::Backend(_)) => Seen::Nothing,
        Ok(()) => Seen::Answered,
        Err(_) if moved.down > 0 => Seen::Answered,
        Err(_) => Seen::Nothing,
    }
}

/// Relays until both directions have ended (each with EOF and shutdown of the other side), an
/// error occurs on either side, or nothing moves for `idle`.
#[cfg(test)]
pub(crate) async fn relay<C, B>(
    client: &mut C,
    backend: &mut B,
    idle: Duration,
) -> (Moved, Result<(), RelayError>)
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    relay_with_prefix(client, backend, (idle, &()), None, |_| {}).await
}

/// Like [`relay`], sending `prefix` (a buffer and the length of the bytes in it) to the backend
/// first, together with whatever the client has already sent. `on_moved` hears of the bytes
/// read as they move (the increments since its last call), so counters follow long-lived
/// connections instead of jumping when they close. `watched` hears when bytes last moved, and
/// the relay ends with [`RelayError::Evicted`] when it says so (the worker frees a slot).
pub(crate) async fn relay_with_prefix<C, B, F, W>(
    client: &mut C,
    backend: &mut B,
    (idle, watched): (Duration, &W),
    prefix: Option<(PooledBuf, usize)>,
    mut on_moved: F,
) -> (Moved, Result<(), RelayError>)
where
    C: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
    F: FnMut(Moved),
    W: Watched,
{
    let mut up = match prefix {
        Some((buf, len)) => Pump::with_prefix(true, buf, len),
        None => Pump::new(true),
    };
    up.close_is_shutdown = true;
    let mut down = Pump::new(false);
    let mut last_activity = Instant::now();
    // One timer re-armed lazily, instead of resetting it on every read.
    let sleep = tokio::time::sleep(idle);
    tokio::pin!(sleep);
    // A write error ends only its own direction: the other one may still carry an answer the
    // peer sent before closing (a backend's 413 to an upload it refused, say). A read error means
    // the stream itself is broken and ends the relay.
    let mut write_error: Option<RelayError> = None;
    let mut reported = Moved::default();
    let result = poll_fn(|cx| {
        let mut moved = false;
        // Blame the side whose socket failed (see UP and DOWN).
        let down_done = down.done();
        let driven = up
            .drive(
                cx,
                client,
                backend,
                &mut moved,
                (UP, down_done),
                &mut write_error,
            )
            .and_then(|()| {
                let up_done = up.done();
                down.drive(
                    cx,
                    backend,
                    client,
                    &mut moved,
                    (DOWN, up_done),
                    &mut write_error,
                )
            });
        // Reading the client can make TLS want to answer on its own (a no_renegotiation
        // warning, a KeyUpdate): send that now, not when the backend next has something to say.
        // Nothing to send costs nothing; a write error surfaces in the down pump.
        let _ = Pin::new(&mut *client).poll_flush(cx);
        let delta = Moved {
            up: up.bytes - reported.up,
            down: down.bytes - reported.down,
        };
        let counted = delta.up != 0 || delta.down != 0;
        if counted {
            on_moved(delta);
            reported = Moved {
                up: up.bytes,
                down: down.bytes,
            };
        }
        if let Err(e) = driven {
            return Poll::Ready(Err(e));
        }
        if up.done() && down.done() {
            return Poll::Ready(write_error.take().map_or(Ok(()), Err));
        }
        if moved || counted {
            last_activity = Instant::now();
            watched.touch(last_activity, delta.up, delta.down);
        }
        if let Some(why) = watched.poll_evicted(cx) {
            let in_flight = !(up.holds_nothing() && down.holds_nothing());
            return Poll::Ready(Err(match why {
                Close::Idle => RelayError::Evicted { in_flight },
                Close::Operator => RelayError::ClosedByOperator { in_flight },
            }));
        }
        while sleep.as_mut().poll(cx).is_ready() {
            let deadline = last_activity + idle;
            if Instant::now() >= deadline {
                return Poll::Ready(Err(RelayError::Idle(idle)));
            }
            sleep.as_mut().reset(deadline);
        }
        Poll::Pending
    })
    .await;
    (
        Moved {
            up: up.bytes,
            down: down.bytes,
        },
        result,
    )
}

#[cfg(test)]
mod tests;
