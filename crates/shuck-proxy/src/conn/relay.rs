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
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A backend end that records each write call separately.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl AsyncRead for Writes {
        fn poll_read(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            _: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(())) // EOF: the backend says nothing
        }
    }

    impl AsyncWrite for Writes {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A reader with `sizes` ready, one per read (a 0 is one Pending: nothing for now), then
    /// at its end when `eof`, else with nothing for now (Pending) from then on.
    struct Chunks {
        sizes: Vec<usize>,
        eof: bool,
    }

    impl Chunks {
        fn then_wait(sizes: Vec<usize>) -> Chunks {
            Chunks { sizes, eof: false }
        }

        fn then_eof(sizes: Vec<usize>) -> Chunks {
            Chunks { sizes, eof: true }
        }
    }

    impl AsyncRead for Chunks {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if self.sizes.is_empty() {
                return if self.eof {
                    Poll::Ready(Ok(()))
                } else {
                    Poll::Pending
                };
            }
            let n = self.sizes.remove(0);
            if n == 0 {
                return Poll::Pending;
            }
            buf.put_slice(&vec![b'x'; n.min(buf.remaining())]);
            Poll::Ready(Ok(()))
        }
    }

    /// What a writer was asked, in order.
    #[derive(Debug, PartialEq)]
    enum Did {
        Write(usize),
        Flush,
        Shutdown,
    }

    #[derive(Default)]
    struct Log(Vec<Did>);

    impl AsyncWrite for Log {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.push(Did::Write(buf.len()));
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.0.push(Did::Flush);
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            self.0.push(Did::Shutdown);
            Poll::Ready(Ok(()))
        }
    }

    /// An answer whose end has already arrived behind it (an HTTP/1.0 backend's answer and FIN)
    /// goes out with the shutdown, no flush between: the TLS stream sends the last record and
    /// close_notify in one system call instead of two.
    #[test]
    fn an_answer_followed_by_its_end_leaves_with_the_shutdown() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut reader = Chunks::then_eof(vec![1024]);
        let mut writer = Log::default();
        let mut pump = Pump::new(false);
        let polled = pump.poll(&mut cx, &mut reader, &mut writer, &mut false, false);
        assert!(polled.is_ready());
        assert_eq!(writer.0, [Did::Write(1024), Did::Shutdown]);
    }

    /// A writer whose shutdown fails with `kind` (its flush, part of it, included).
    struct FailingShutdown(io::ErrorKind);

    impl AsyncWrite for FailingShutdown {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Err(self.0.into()))
        }
    }

    /// When the shutdown carries the last bytes, its failure is the writer's error; when
    /// everything had gone out before, a failed shutdown only ends the direction.
    #[test]
    fn a_failed_send_in_the_shutdown_is_a_write_error() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        for (answer, is_error) in [(vec![100], true), (vec![], false)] {
            let mut pump = Pump::new(false);
            let mut writer = FailingShutdown(io::ErrorKind::BrokenPipe);
            let polled = pump.poll(
                &mut cx,
                &mut Chunks::then_eof(answer.clone()),
                &mut writer,
                &mut false,
                false,
            );
            let failed = matches!(polled, Poll::Ready(Err(PumpError::Write(_))));
            assert_eq!(failed, is_error, "{answer:?}");
            assert!(pump.done() || failed);
        }
    }

    /// What the reader has ready is written without a flush in between (so the TLS stream can
    /// gather full records), and flushed once the reader has nothing more for now.
    #[test]
    fn reads_are_flushed_together_when_the_reader_waits() {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let full = crate::mem::buf_pool::BUF_SIZE;
        let mut reader = Chunks::then_wait(vec![full, full, full, 1000, 0, full]);
        let mut writer = Log::default();
        let mut pump = Pump::new(false);
        let mut moved = false;
        let polled = pump.poll(&mut cx, &mut reader, &mut writer, &mut moved, false);
        assert!(polled.is_pending());
        let polled = pump.poll(&mut cx, &mut reader, &mut writer, &mut moved, false);
        assert!(polled.is_pending());
        let want = [
            Did::Write(full),
            Did::Write(full),
            Did::Write(full),
            Did::Write(1000),
            Did::Flush,
            Did::Write(full),
            Did::Flush,
        ];
        assert_eq!(writer.0, want);
    }

    fn prefix(bytes: &[u8]) -> (PooledBuf, usize) {
        let mut b = PooledBuf::at_least(bytes.len());
        b.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
        (b, bytes.len())
    }

    #[tokio::test]
    async fn prefix_and_bytes_already_sent_leave_in_one_write() {
        let (mut client, mut proxy_client) = tokio::io::duplex(4096);
        client.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        client.shutdown().await.unwrap();
        let mut backend = Writes::default();
        let (moved, res) = relay_with_prefix(
            &mut proxy_client,
            &mut backend,
            (Duration::from_secs(5), &()),
            Some(prefix(b"PROXY UNKNOWN\r\n")),
            |_| {},
        )
        .await;
        res.unwrap();
        assert_eq!(backend.0[0], b"PROXY UNKNOWN\r\nGET / HTTP/1.0\r\n\r\n");
        assert_eq!(backend.0.len(), 1, "{:?}", backend.0);
        assert_eq!(moved.up, 18, "the header is not client data");
    }

    #[tokio::test]
    async fn prefix_goes_out_alone_when_the_client_is_silent() {
        // A server-speaks-first backend: the header must not wait for the client.
        let (mut client, mut proxy_client) = tokio::io::duplex(4096);
        let (mut proxy_backend, mut backend) = tokio::io::duplex(4096);
        let relay = tokio::spawn(async move {
            relay_with_prefix(
                &mut proxy_client,
                &mut proxy_backend,
                (Duration::from_secs(5), &()),
                Some(prefix(b"HEADER")),
                |_| {},
            )
            .await
        });
        let mut got = [0u8; 6];
        backend.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"HEADER");
        backend.write_all(b"220 hello").await.unwrap();
        backend.shutdown().await.unwrap();
        let mut greeting = [0u8; 9];
        client.read_exact(&mut greeting).await.unwrap();
        assert_eq!(&greeting, b"220 hello");
        client.write_all(b"QUIT").await.unwrap();
        client.shutdown().await.unwrap();
        let mut rest = Vec::new();
        backend.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"QUIT");
        relay.await.unwrap().1.unwrap();
    }

    #[tokio::test]
    async fn relays_both_ways_with_half_close_and_returns_buffers() {
        let (mut client, mut proxy_client) = tokio::io::duplex(1024);
        let (mut proxy_backend, mut backend) = tokio::io::duplex(1024);
        let relay = tokio::spawn(async move {
            relay(
                &mut proxy_client,
                &mut proxy_backend,
                Duration::from_secs(5),
            )
            .await
        });
        let up: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let up2 = up.clone();
        let be = tokio::spawn(async move {
            let mut got = Vec::new();
            backend.read_to_end(&mut got).await.unwrap();
            // The client's EOF arrived; the reply still flows back.
            backend.write_all(b"reply after half-close").await.unwrap();
            backend.shutdown().await.unwrap();
            got
        });
        client.write_all(&up).await.unwrap();
        client.shutdown().await.unwrap();
        let mut reply = Vec::new();
        client.read_to_end(&mut reply).await.unwrap();
        assert_eq!(reply, b"reply after half-close");
        assert_eq!(be.await.unwrap(), up2);
        let (moved, res) = relay.await.unwrap();
        res.unwrap();
        assert_eq!(moved.up, 100_000);
        assert_eq!(moved.down, 22);
    }

    #[tokio::test]
    async fn a_backend_that_answers_and_closes_early_still_gets_its_answer_through() {
        let (mut client, mut proxy_client) = tokio::io::duplex(4096);
        let (mut proxy_backend, mut backend) = tokio::io::duplex(4096);
        // The backend refuses the upload: it answers, then goes away without reading.
        backend.write_all(b"HTTP/1.1 413 Too Large").await.unwrap();
        drop(backend);
        // The client's upload is already on its way when the relay starts.
        client.write_all(&[b'x'; 1000]).await.unwrap();
        let relay = tokio::spawn(async move {
            relay(
                &mut proxy_client,
                &mut proxy_backend,
                Duration::from_secs(5),
            )
            .await
        });
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"HTTP/1.1 413 Too Large");
        let (moved, res) = relay.await.unwrap();
        assert!(matches!(res, Err(RelayError::Backend(_))), "{res:?}");
        assert_eq!(moved.down, 22);
    }

    /// On tokio's paused clock: the default idle timeout (5 minutes) is checked as configured,
    /// in no time, and not a moment early.
    #[tokio::test(start_paused = true)]
    async fn idle_timeout_fires_when_idle_and_not_before() {
        let idle = Duration::from_secs(300);
        let (mut client, mut proxy_client) = tokio::io::duplex(64);
        let (mut proxy_backend, mut backend) = tokio::io::duplex(64);
        let started = Instant::now();
        let relay =
            tokio::spawn(async move { relay(&mut proxy_client, &mut proxy_backend, idle).await.1 });
        // Traffic at 200 s keeps the connection: the timeout counts from the last byte.
        tokio::time::sleep(Duration::from_secs(200)).await;
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        backend.read_exact(&mut got).await.unwrap();
        let res = relay.await.unwrap();
        assert!(matches!(res, Err(RelayError::Idle(_))), "{res:?}");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_secs(500) && took < Duration::from_secs(502),
            "cut after {took:?}: 300 s after the last byte at 200 s"
        );
    }

    /// A registered relay tells the worker when bytes last moved, and ends when the worker
    /// frees its slot: a connection that moved bytes after the others is kept.
    #[tokio::test(start_paused = true)]
    async fn the_worker_ends_the_relay_it_frees_and_keeps_a_busier_one() {
        let set = crate::conn::idle::IdleSet::default();
        let source: std::net::IpAddr = "192.0.2.9".parse().unwrap();
        let (_quiet, mut quiet_proxy) = tokio::io::duplex(64);
        let (mut busy, mut busy_proxy) = tokio::io::duplex(64);
        let (mut b1, _b1) = tokio::io::duplex(64);
        let (mut b2, _b2) = tokio::io::duplex(64);
        let (quiet_reg, busy_reg) = (set.register(source, ()), set.register(source, ()));
        let idle = Duration::from_secs(300);
        let quiet = relay_with_prefix(&mut quiet_proxy, &mut b1, (idle, &quiet_reg), None, |_| {});
        let busy_relay =
            relay_with_prefix(&mut busy_proxy, &mut b2, (idle, &busy_reg), None, |_| {});
        tokio::pin!(busy_relay);
        let freeing = async {
            tokio::time::sleep(Duration::from_secs(20)).await;
            busy.write_all(b"ping").await.unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            set.free(1, Duration::from_secs(5))
        };
        let ((_, quiet_end), freed) = tokio::select! {
            r = async { tokio::join!(quiet, freeing) } => r,
            r = &mut busy_relay => panic!("the busier relay ended: {r:?}"),
        };
        assert_eq!(freed.closed, 1);
        assert!(
            matches!(quiet_end, Err(RelayError::Evicted { in_flight: false })),
            "{quiet_end:?}"
        );
    }

    #[test]
    fn only_a_backend_that_broke_before_answering_is_seen_failing() {
        let moved = |down| Moved { up: 10, down };
        let err = |kind: io::ErrorKind| io::Error::from(kind);
        let reset = || err(io::ErrorKind::ConnectionReset);
        let seen = |down, res: Result<(), RelayError>| backend_seen(moved(down), &res);
        assert_eq!(
            seen(0, Err(RelayError::BackendAborted(reset()))),
            Seen::Failed
        );
        let pipe = RelayError::Backend(err(io::ErrorKind::BrokenPipe));
        assert_eq!(seen(0, Err(pipe)), Seen::Failed);
        // It answered, then broke: not counted either way.
        assert_eq!(
            seen(5, Err(RelayError::BackendAborted(reset()))),
            Seen::Nothing
        );
        // This host's trouble is no backend's failure.
        let no_buffers = RelayError::Backend(io::Error::from_raw_os_error(libc::ENOBUFS));
        assert_eq!(seen(0, Err(no_buffers)), Seen::Nothing);
        // It answered and the client went away, or idled: the backend did its part.
        assert_eq!(
            seen(5, Err(RelayError::ClientAborted(reset()))),
            Seen::Answered
        );
        let idle = Duration::from_secs(1);
        assert_eq!(seen(5, Err(RelayError::Idle(idle))), Seen::Answered);
        // The client went away, or idled, before the backend said anything: nothing to judge.
        assert_eq!(
            seen(0, Err(RelayError::ClientAborted(reset()))),
            Seen::Nothing
        );
        assert_eq!(seen(0, Err(RelayError::Idle(idle))), Seen::Nothing);
        // Ended in order (a client that only sends, a backend that only listens).
        assert_eq!(seen(0, Ok(())), Seen::Answered);
    }
}
