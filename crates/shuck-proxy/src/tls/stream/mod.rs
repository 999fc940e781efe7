//! The client's TLS stream on rustls' unbuffered API, so that shuck, not rustls, owns the
//! buffers. rustls' buffered connection keeps a 4 KiB receive buffer for the life of every
//! connection; here the records received, the records to send and any plaintext the reader has
//! not taken sit in [`BufQueue`]s that borrow from the worker's pool only while they hold bytes.
//! An idle connection holds rustls' state and its socket, nothing else.
//!
//! Reads wait for the socket to be readable before borrowing a buffer; a partial record left
//! waiting moves to a small allocation of its own. What rustls queued for the client (tickets,
//! a KeyUpdate answer, an alert) is sent before a read waits, unless written records are queued:
//! then they go together at the writer's flush. Writes encrypt into the send queue and stay there
//! until the writer flushes or shuts down (the relay flushes after every poll, and its pump
//! before it waits for its reader), so what is at hand leaves in one send: an answer with the
//! close_notify behind it, full records (bulk) up to four in one pooled 74 KiB buffer. A write
//! that finds that much queued waits for it first (back-pressure). Whoever writes must flush
//! before waiting on a read. A client that stops reading mid-download can hold that buffer, not
//! one record's, until idle_timeout.

pub(crate) mod ktls;
pub(crate) mod records;

use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use rustls::server::UnbufferedServerConnection;
use rustls::{CommonState, ProtocolVersion, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::config::RecordLayer;
use crate::mem::buf_pool::{BATCH_BUF_SIZE, RECORD_BUF_SIZE};
use crate::mem::buf_queue::BufQueue;

use ktls::{HandOver, Kernel};
use records::ShuckRecords;

// By layer: while rustls has the records, and once shuck protects them itself.
mod rustls_layer;
mod shuck_layer;

/// The most plaintext one write encrypts: one full record.
const MAX_PLAINTEXT_PER_WRITE: usize = 16 * 1024;
/// Gathered full records are sent once this much is queued: another record might not fit.
const GATHER_SEND_AT: usize = BATCH_BUF_SIZE - RECORD_BUF_SIZE;

/// How the peer's side ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadEnd {
    /// close_notify: everything it sent has arrived.
    CloseNotify,
    /// TCP closed without close_notify (the reader is told `UnexpectedEof`).
    Truncated,
}

/// What one call to rustls is asked to do.
enum Mode<'a, 'b> {
    Handshake,
    /// Plaintext rustls has ready goes to the plaintext queue (before [`ShuckRecords`] take over).
    Drain,
    Read(&'a mut ReadBuf<'b>),
    Write(&'a [u8]),
    CloseNotify,
}

/// What one call to rustls came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Bytes were queued for the peer (or its close noted): ask rustls again.
    Again,
    /// Nothing more to do without bytes from the peer.
    Wait,
    /// Plaintext is there (handed to the reader in `Mode::Read`).
    Readable,
    /// The write or close_notify was encrypted into the send queue.
    Written,
    /// Both sides have sent close_notify.
    Closed,
}

/// Who protects the records.
enum Layer {
    /// rustls: the handshake, and a TLS 1.2 connection throughout. Boxed, like [`ShuckRecords`], so
    /// that the stream holds only the one in use.
    Rustls(Box<UnbufferedServerConnection>),
    /// shuck, once a TLS 1.3 handshake is done (see [`TlsStream::take_over_records`]).
    Shuck(Box<ShuckRecords>),
    /// The kernel (kTLS), when asked for and the kernel has it (see [`ktls`]).
    Kernel(Kernel),
    /// The keys were lost handing them over (a bug); the stream is broken.
    Lost,
}

/// A TLS server connection over a TCP socket.
pub(crate) struct TlsStream {
    tcp: TcpStream,
    layer: Layer,
    /// Records received and not yet processed.
    incoming: BufQueue,
    /// Records encoded and not yet sent.
    outgoing: BufQueue,
    /// Plaintext decrypted beyond what the reader's buffer took.
    plain: BufQueue,
    read_end: Option<ReadEnd>,
    close_sent: bool,
    /// rustls failed; the stream is unusable.
    broken: bool,
    /// Written records are queued to leave together: the writer flushes them, a read does not.
    gathering: bool,
    fed: Fed,
    ktls: Ktls,
    /// Who takes a TLS 1.3 connection's records after the handshake: as the frontend's
    /// `record_layer` made its configuration (secret extraction on for shuck's).
    record_layer: RecordLayer,
}

/// Whether the kernel protects the records (`ktls = true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ktls {
    /// Not asked for.
    NotAsked,
    /// Asked for, and not handed over yet (the stream has not come to a record boundary).
    Asked,
    /// The kernel has the keys.
    Kernel,
    /// Asked for, and the records stayed in user space (no kTLS in the kernel, TLS 1.2, a key
    /// the kernel refused).
    UserSpace,
}

/// During the handshake rustls is given whole records one at a time (see `rustls_input`).
#[derive(Clone, Copy)]
struct Fed {
    /// The bytes it was given and has not discarded.
    holds: usize,
    /// Whether it asked for more.
    wants_more: bool,
}

impl TlsStream {
    /// A server connection under `config` whose first bytes, `received` (the ClientHello, and
    /// whatever came after it), were read already. Nothing is processed yet.
    pub(crate) fn new(
        tcp: TcpStream,
        config: Arc<ServerConfig>,
        received: &[u8],
    ) -> io::Result<TlsStream> {
        let mut incoming = BufQueue::default();
        incoming.push(received)?;
        let record_layer = if config.enable_secret_extraction {
            RecordLayer::Shuck
        } else {
            RecordLayer::Rustls
        };
        Ok(TlsStream {
            tcp,
            layer: Layer::Rustls(Box::new(
                UnbufferedServerConnection::new(config).map_err(tls_error)?,
            )),
            incoming,
            outgoing: BufQueue::default(),
            plain: BufQueue::default(),
            read_end: None,
            close_sent: false,
            broken: false,
            gathering: false,
            fed: Fed {
                holds: 0,
                wants_more: true,
            },
            ktls: Ktls::NotAsked,
            record_layer,
        })
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// What was negotiated (version, suite, ALPN, peer certificates, ...), while rustls has the
    /// connection: `None` once [`TlsStream::take_over_records`] took it.
    pub(crate) fn conn(&self) -> Option<&CommonState> {
        match &self.layer {
            Layer::Rustls(conn) => Some(conn),
            Layer::Shuck(_) | Layer::Kernel(_) | Layer::Lost => None,
        }
    }

    /// Who protects the records now: `shuck` (its own layer), `kernel` (kTLS), `rustls`; with
    /// kTLS asked for and not yet handed over, `shuck, then the kernel`.
    pub(crate) fn records_by(&self) -> &'static str {
        match &self.layer {
            Layer::Rustls(_) => "rustls",
            Layer::Shuck(_) if self.ktls == Ktls::Asked => "shuck, then the kernel (ktls)",
            Layer::Shuck(_) => "shuck",
            Layer::Kernel(_) => "kernel",
            Layer::Lost => "none",
        }
    }

    /// Whether the kernel protects the records, when that was asked for.
    pub(crate) fn ktls(&self) -> Ktls {
        self.ktls
    }

    /// After a TLS 1.3 handshake, shuck protects the records itself from here on ([`records`]:
    /// an idle connection then holds a few hundred bytes of keys instead of rustls' state),
    /// unless the frontend's `record_layer` is rustls'.
    /// rustls has seen no record since the client's Finished (`step_rustls` holds them back);
    /// what it still has to send (session tickets) goes to the send queue first. A TLS 1.2
    /// connection stays with rustls. [`TlsStream::conn`] answers `None` afterwards.
    ///
    /// With `ktls`, the kernel takes the records over in turn at the first record boundary
    /// (see [`TlsStream::poll_read`]), if it can.
    pub(crate) fn take_over_records(&mut self, ktls: bool) -> io::Result<()> {
        if ktls {
            // Until the hand-over: a connection that stays with rustls never gets there.
            self.ktls = Ktls::UserSpace;
        }
        if self.record_layer == RecordLayer::Rustls {
            return Ok(());
        }
        let Layer::Rustls(conn) = &self.layer else {
            return Ok(());
        };
        if self.broken || !ShuckRecords::can_take_over(conn) {
            return Ok(());
        }
        while self.step_or_alert(&mut Mode::Drain)? == Step::Again {}
        if self.read_end.is_some() {
            return Ok(());
        }
        let Layer::Rustls(conn) = std::mem::replace(&mut self.layer, Layer::Lost) else {
            return Ok(());
        };
        match ShuckRecords::take_over(*conn) {
            Ok(records) => {
                self.layer = Layer::Shuck(Box::new(records));
                if ktls {
                    self.ktls = Ktls::Asked;
                }
                Ok(())
            }
            Err(e) => {
                self.broken = true;
                Err(tls_error(e))
            }
        }
    }

    /// Processes the bytes already received, without waiting: with the ClientHello this is
    /// where rustls chooses the certificate and looks the session up. On error rustls' alert is
    /// queued, not sent (see [`TlsStream::discard_pending`], [`TlsStream::send_pending`]).
    pub(crate) fn process_received(&mut self) -> io::Result<()> {
        while self.step(&mut Mode::Handshake)? == Step::Again {}
        Ok(())
    }

    /// Drops what is queued for the peer (an alert the caller replaces with its own).
    pub(crate) fn discard_pending(&mut self) {
        self.outgoing.clear();
    }

    /// Sends what is queued for the peer.
    pub(crate) async fn send_pending(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_send(cx)).await
    }

    /// Reads what the socket has into the receive queue, without processing it. `0`: the peer
    /// closed TCP.
    pub(crate) async fn receive(&mut self) -> io::Result<usize> {
        poll_fn(|cx| self.poll_fill(cx)).await
    }

    /// Whether the handshake is over (or rustls no longer has the connection).
    pub(crate) fn handshake_done(&self) -> bool {
        self.conn().is_none_or(|c| !c.is_handshaking())
    }

    /// One poll towards the end of the handshake. The server's last TLS 1.3 messages (session
    /// tickets, which no client waits for) stay queued: they leave with the first answer, or
    /// before the stream waits for the client.
    pub(crate) fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let step = self.step_or_alert(&mut Mode::Handshake)?;
            if step == Step::Again {
                continue;
            }
            let Some(conn) = self.conn() else {
                return Poll::Ready(Ok(()));
            };
            if !conn.is_handshaking() {
                if conn.protocol_version() != Some(ProtocolVersion::TLSv1_3) {
                    // TLS 1.2: the client waits for our Finished before it says anything.
                    ready!(self.poll_send(cx))?;
                }
                return Poll::Ready(Ok(()));
            }
            if step == Step::Closed {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            // Our flight goes out before we wait for the client's.
            ready!(self.poll_send(cx))?;
            if ready!(self.poll_fill(cx))? == 0 {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    /// One step over the records received, by whichever layer has the connection. An error
    /// leaves the stream broken with the alert for the client queued.
    fn step(&mut self, mode: &mut Mode<'_, '_>) -> io::Result<Step> {
        if self.broken {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the TLS connection failed earlier",
            ));
        }
        let outcome = match &self.layer {
            Layer::Rustls(_) => self.step_rustls(mode),
            Layer::Shuck(_) => self.step_shuck(mode),
            // The kernel's reads and writes do not come here (see the `poll_*_kernel`).
            Layer::Kernel(_) => Ok(Step::Wait),
            Layer::Lost => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the TLS keys were lost",
            )),
        };
        if outcome.is_err() {
            self.broken = true;
        }
        outcome
    }

    /// Like [`TlsStream::step`], and on error the alert goes out at once (as far as the
    /// socket takes it without waiting).
    fn step_or_alert(&mut self, mode: &mut Mode<'_, '_>) -> io::Result<Step> {
        let step = self.step(mode);
        if step.is_err() {
            let _ = self.tcp.try_write(self.outgoing.data());
            self.outgoing.clear();
        }
        step
    }

    /// Sends the send queue, giving its buffer back once empty.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.outgoing.is_empty() {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, self.outgoing.data()))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.outgoing.consume(n);
        }
        self.gathering = false;
        Poll::Ready(Ok(()))
    }

    /// Reads from the socket into the receive queue. The buffer is borrowed only once the
    /// socket is readable, and given back if the read found nothing. `0`: the peer closed TCP.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.tcp.poll_read_ready(cx)?.is_pending() {
            self.wait_lightly();
            return Poll::Pending;
        }
        // tokio's own read: a short read clears the readiness, so the next read waits for
        // epoll instead of costing a system call that finds nothing.
        let mut room = ReadBuf::new(self.incoming.read_room()?);
        let read = Pin::new(&mut self.tcp).poll_read(cx, &mut room);
        let n = room.filled().len();
        self.incoming.filled(n);
        match read {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(n)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                self.wait_lightly();
                Poll::Pending
            }
        }
    }

    /// Before the reader waits: a stalled client's few bytes must not pin a record buffer, nor
    /// the wait the AEAD contexts (the sealing one only when nothing is queued to go out).
    fn wait_lightly(&mut self) {
        self.incoming.shrink_small();
        if let Layer::Shuck(records) = &mut self.layer {
            records.rest(self.outgoing.is_empty() && !self.gathering);
        }
    }

    /// Where nothing is half done (no record received and unopened, nothing sealed and unsent),
    /// the kernel takes the records over if it can; if not they stay with shuck. They stay here
    /// for good once either side has sent close_notify (after ours nothing may follow it, and
    /// the kernel would answer a KeyUpdate or send an alert; after the client's, what follows
    /// it was dropped unread, so the socket need not be at a record boundary), and once the
    /// stream has failed.
    fn hand_over_at_boundary(&mut self) -> io::Result<()> {
        let fragment = matches!(&self.layer, Layer::Shuck(r) if r.holds_fragment());
        if self.ktls != Ktls::Asked
            || !self.incoming.is_empty()
            || !self.outgoing.is_empty()
            || fragment
        {
            return Ok(());
        }
        if self.close_sent || self.read_end.is_some() || self.broken {
            self.ktls = Ktls::UserSpace;
            return Ok(());
        }
        let layer = std::mem::replace(&mut self.layer, Layer::Lost);
        let Layer::Shuck(records) = layer else {
            self.layer = layer;
            return Ok(());
        };
        match Kernel::hand_over(&self.tcp, records) {
            HandOver::Kernel(kernel) => {
                self.layer = Layer::Kernel(kernel);
                self.ktls = Ktls::Kernel;
                Ok(())
            }
            HandOver::Kept(records) => {
                self.layer = Layer::Shuck(records);
                self.ktls = Ktls::UserSpace;
                Ok(())
            }
            // The connection ends (counted in user space: that is where its records were).
            HandOver::Failed(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    /// A read once the kernel has the records: plaintext straight from the socket.
    fn poll_read_kernel(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(end) = self.end_of_reading() {
            return Poll::Ready(end);
        }
        let Self {
            layer: Layer::Kernel(kernel),
            tcp,
            ..
        } = self
        else {
            return Poll::Ready(Err(io::ErrorKind::InvalidData.into()));
        };
        let read = ready!(kernel.poll_read(tcp, cx, buf));
        Poll::Ready(match read {
            Ok(ktls::Read::Data) => Ok(()),
            Ok(ktls::Read::CloseNotify) => {
                self.read_end = Some(ReadEnd::CloseNotify);
                Ok(())
            }
            Ok(ktls::Read::Eof) => {
                self.read_end = Some(ReadEnd::Truncated);
                Err(io::ErrorKind::UnexpectedEof.into())
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        })
    }

    fn end_of_reading(&self) -> Option<io::Result<()>> {
        self.read_end.map(|end| match end {
            ReadEnd::CloseNotify => Ok(()),
            ReadEnd::Truncated => Err(io::ErrorKind::UnexpectedEof.into()),
        })
    }
}

fn too_large() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "TLS message too large")
}

/// rustls' errors travel as `InvalidData` I/O errors holding the `rustls::Error`, as in rustls'
/// own streams (`HandshakeError::from_io` takes them out by type).
fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl AsyncRead for TlsStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        loop {
            if !this.plain.is_empty() {
                let n = buf.remaining().min(this.plain.len());
                buf.put_slice(&this.plain.data()[..n]);
                this.plain.consume(n);
                return Poll::Ready(Ok(()));
            }
            if let Layer::Kernel(_) = this.layer {
                return this.poll_read_kernel(cx, buf);
            }
            match this.step_or_alert(&mut Mode::Read(buf))? {
                Step::Again => continue,
                Step::Readable => return Poll::Ready(Ok(())),
                Step::Wait | Step::Written | Step::Closed => {}
            }
            if let Some(end) = this.end_of_reading() {
                return Poll::Ready(end);
            }
            // What is queued for the client (the session tickets, an answer rustls made while
            // reading) goes out before the wait. A full socket does not hold the reading up, and
            // a send error is the writing side's to report (the client may have closed cleanly
            // with close_notify still to be read).
            // Gathered records are the writer's to flush (the relay does after every poll, which
            // also registers for the socket's writability).
            if !this.gathering {
                let _ = this.poll_send(cx);
                this.hand_over_at_boundary()?;
                if let Layer::Kernel(_) = this.layer {
                    continue;
                }
            }
            if ready!(this.poll_fill(cx))? == 0 {
                this.read_end.get_or_insert(ReadEnd::Truncated);
            }
        }
    }
}

impl AsyncWrite for TlsStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Layer::Kernel(kernel) = &mut this.layer {
            if this.close_sent {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            return kernel.poll_write(&mut this.tcp, cx, data);
        }
        // Back-pressure: a full queue goes out before it takes more.
        if this.outgoing.len() >= GATHER_SEND_AT {
            ready!(this.poll_send(cx))?;
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.close_sent {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let n = data.len().min(MAX_PLAINTEXT_PER_WRITE);
        let full = n == MAX_PLAINTEXT_PER_WRITE;
        if full {
            // Room for the records to come, from the pool: no growing by copies.
            this.outgoing.reserve_batch();
        }
        loop {
            match this.step_or_alert(&mut Mode::Write(&data[..n]))? {
                Step::Again => {}
                Step::Written => break,
                Step::Closed => return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into())),
                Step::Wait | Step::Readable => {
                    return Poll::Ready(Err(io::Error::other("TLS handshake not complete")));
                }
            }
        }
        // Queued until the writer flushes or shuts down (the relay does before it waits), so
        // what the writer has at hand leaves in one send: full records gathered, an answer
        // with the close_notify behind it.
        this.gathering = true;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Layer::Kernel(kernel) = &mut this.layer {
            return kernel.poll_flush(&this.tcp, cx);
        }
        ready!(this.poll_send(cx))?;
        // A flush that emptied the send queue is a boundary too: a reader that pauses keeps the
        // queue full, and by the time the stream next waits on a read with nothing queued the
        // client may have sent its FIN (the kernel then refuses the ULP).
        let handed = this.hand_over_at_boundary();
        if handed.is_err() {
            // The relay may not look at a flush's error: its reader must see the broken stream.
            cx.waker().wake_by_ref();
        }
        Poll::Ready(handed)
    }

    /// close_notify, then the TCP write side's FIN.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Layer::Kernel(kernel) = &mut this.layer {
            if !this.close_sent && !this.broken {
                ready!(kernel.poll_close_notify(&this.tcp, cx))?;
                this.close_sent = true;
            }
            // The FIN waits until the kernel has pushed every record (see `poll_pushed`); a
            // broken stream has nothing worth the wait.
            if !this.broken {
                ready!(kernel.poll_pushed(&this.tcp, cx))?;
            }
            return Pin::new(&mut this.tcp).poll_shutdown(cx);
        }
        if !this.close_sent && !this.broken {
            this.close_sent = true;
            // Until written; closed already, or not past the handshake: none to send.
            while let Ok(Step::Again) = this.step(&mut Mode::CloseNotify) {}
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}
