//! Kernel TLS (kTLS): a TLS 1.3 connection's records sealed and opened by the kernel, with
//! `ktls = true`. Once shuck holds the traffic keys ([`ShuckRecords`]), they can go one step further:
//! the TLS upper-layer protocol on the socket takes them (TLS_TX, TLS_RX), and from then on a
//! write is plaintext that leaves as records and a read returns the client's plaintext. The
//! AEAD work and the copy into a record buffer leave user space, and bulk moves without shuck
//! touching a record.
//!
//! The hand-over happens where the stream has nothing half done: no record received but not
//! opened, nothing sealed but not sent (before a read waits for the client, or after a flush
//! that emptied the send queue). The socket's receive queue then starts at a record boundary,
//! and the sequence numbers are the ones [`ShuckRecords`] reached.
//!
//! What the kernel cannot do alone stays here. Each read is one `recvmsg`, which says the type
//! of what it returns: close_notify ends the reading, other alerts and KeyUpdates go through
//! [`ShuckRecords::control`], the same rules as in user space. After our close_notify the FIN waits
//! until the kernel has pushed every record ([`Kernel::poll_pushed`]). A KeyUpdate
//! gives the kernel new keys with TLS_RX/TLS_TX again, which kernels without kTLS rekeying
//! (added upstream after 6.12; Debian 12's 6.1 lacks it) refuse: the connection then ends with an
//! error. Our own KeyUpdate is due before
//! the cipher's confidentiality limit (rustls': 2^23 or 2^24 records with AES-GCM). The kernel
//! may close a record before it is full, so the records it sealed are bounded here by the bytes
//! written (a record holds at least one), which cannot undercount; when that bound nears the
//! limit, the kernel's own count is read (TLS_TX's `rec_seq`), and the KeyUpdate is sent only if
//! that is near it too. That read happens once per 8–16 MiB written with AES-GCM, never with
//! ChaCha20-Poly1305 (no limit), and it keeps kernels that cannot rekey from ending connections
//! a bound too loose would have rekeyed.
//!
//! A kernel without kTLS (no `tls` module: setting the ULP fails with ENOENT) is noted once for
//! the process, logged once, and connections keep shuck's own records; as they do when the
//! kernel refuses a connection's transmit keys (the socket then stays plain TCP). A refused
//! receive key after the transmit key was taken cannot be undone: that connection fails.

use std::cell::RefCell;
use std::future::Future;
use std::io::{self, IoSliceMut};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::sockopt::{TcpTlsRx, TcpTlsTx, TcpUlp, TlsCryptoInfo};
use nix::sys::socket::{recvmsg, setsockopt, ControlMessageOwned, MsgFlags, TlsGetRecordType};
use rustls::{AlertDescription, ContentType};
use tokio::io::{AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};
use zeroize::Zeroize;

use super::records::{Cipher, Content, Direction, KeyView, RecordError, ShuckRecords};
use crate::sys::sockopt;

/// Set once a socket found the kernel without the TLS upper-layer protocol: no connection of
/// this process asks again.
static KERNEL_LACKS_TLS: AtomicBool = AtomicBool::new(false);
/// Whether the warnings logged once per process were: a client can cause these, so each is
/// logged the first time only (the `shuck_ktls_connections` counter counts every connection).
static ULP_REFUSED: AtomicBool = AtomicBool::new(false);
static KEYS_REFUSED: AtomicBool = AtomicBool::new(false);
static REKEY_REFUSED: AtomicBool = AtomicBool::new(false);

/// Runs `log` the first time `flag` is seen unset.
fn once(flag: &AtomicBool, log: impl FnOnce()) {
    if !flag.swap(true, Ordering::Relaxed) {
        log();
    }
}

/// A KeyUpdate not asking for the client's (ours never asks: the client's keys are its own).
const KEY_UPDATE: [u8; 5] = [24, 0, 0, 1, 0];

thread_local! {
    /// Room for the record type's control message, one per worker thread (nix takes a `Vec`):
    /// no allocation per read.
    static CMSG: RefCell<Vec<u8>> = RefCell::new(nix::cmsg_space!(u8));
}

/// Whether kTLS took the connection.
pub(crate) enum HandOver {
    /// The kernel protects the records from now on.
    Kernel(Kernel),
    /// Nothing changed on the socket: the records stay with shuck.
    Kept(Box<ShuckRecords>),
    /// The kernel took our keys but refused the client's: the connection cannot go on.
    Failed(io::Error),
}

/// What a read from the kernel came to.
pub(crate) enum Read {
    /// Plaintext is in the reader's buffer.
    Data,
    /// The client's close_notify.
    CloseNotify,
    /// TCP closed without close_notify.
    Eof,
}

/// A connection whose records the kernel protects: rustls' remains and the keys' bookkeeping,
/// for KeyUpdates.
pub(crate) struct Kernel {
    records: Box<ShuckRecords>,
    /// Records sealed with our current keys when last known exactly: those sealed in user
    /// space before the hand-over, then the kernel's count (TLS_TX's `rec_seq`).
    sealed: u64,
    /// Bytes written since `sealed` was known: at least as many as the records the kernel
    /// sealed since (each holds one byte or more).
    written_since: u64,
    /// The client asked for our KeyUpdate and the socket had no room for it yet.
    key_update_owed: bool,
    /// Our close_notify has left: nothing more may follow it (no KeyUpdate, no alert).
    close_sent: bool,
    /// The kernel refused our next keys after our KeyUpdate left: nothing more can be sealed.
    tx_failed: bool,
    /// After our close_notify, until the kernel has pushed everything (see
    /// [`Kernel::poll_pushed`]).
    drain: Drain,
}

/// The looks at TCP's queue before the FIN: the wait between them, how many so far, and whether
/// the last one found the queue empty.
#[derive(Default)]
struct Drain {
    wait: Option<Pin<Box<Sleep>>>,
    looks: u8,
    seen_empty: bool,
}

/// The wait between looks at TCP's queue before the FIN: 4 ms first (long enough for the
/// kernel's worker to push what an acknowledgement made room for), doubling up to 50 ms.
fn drain_wait(looks: u8) -> Duration {
    Duration::from_millis(4 << looks.min(4)).min(Duration::from_millis(50))
}

/// Whether this kernel takes TLS on a TCP connection for this process (`shuck version
/// --verbose`): the TLS upper-layer protocol set on a loopback connection made for the question,
/// as a connection's hand-over sets it. A kernel with `tls` as a module not loaded yet loads it
/// here only for a caller with CAP_NET_ADMIN (root), so root may see "yes" where an
/// unprivileged service would not until the module is loaded (`modprobe tls`, or
/// /etc/modules-load.d).
pub fn kernel_has_tls() -> Result<(), String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    let client = std::net::TcpStream::connect(listener.local_addr().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let _server = listener.accept().map_err(|e| e.to_string())?;
    match setsockopt(&client, TcpUlp::default(), b"tls") {
        Ok(()) => Ok(()),
        Err(Errno::ENOENT) => Err("no TLS upper-layer protocol (module `tls`)".into()),
        Err(e) => Err(e.to_string()),
    }
}

impl Kernel {
    /// Hands the keys of `records` to the kernel for `tcp`. Call only where nothing received is
    /// left unopened and nothing sealed unsent, and before our close_notify.
    pub(crate) fn hand_over(tcp: &TcpStream, mut records: Box<ShuckRecords>) -> HandOver {
        if KERNEL_LACKS_TLS.load(Ordering::Relaxed) {
            return HandOver::Kept(records);
        }
        match setsockopt(tcp, TcpUlp::default(), b"tls") {
            Ok(()) => {}
            Err(Errno::ENOENT) => {
                once(&KERNEL_LACKS_TLS, || {
                    tracing::warn!(
                        "ktls: this kernel has no TLS upper-layer protocol (module `tls`); \
                         records stay in user space"
                    );
                });
                return HandOver::Kept(records);
            }
            // The client has sent its FIN (the ULP needs an established connection): nothing
            // wrong with the kernel.
            Err(Errno::ENOTCONN) => return HandOver::Kept(records),
            Err(e) => {
                once(&ULP_REFUSED, || {
                    tracing::warn!(error = %e, "ktls: the kernel refused the TLS upper-layer protocol on a connection (noted once); its records stay in user space");
                });
                return HandOver::Kept(records);
            }
        }
        // With the ULP on and no key given, the socket is still plain TCP: a refused transmit key
        // leaves it as it was.
        if let Err(e) = install(tcp, Direction::Tx, &records.key_view(Direction::Tx)) {
            // ENOENT here: the crypto module for the cipher (gcm, chacha20poly1305) is missing.
            once(&KEYS_REFUSED, || {
                tracing::warn!(error = %e, "ktls: the kernel refused a connection's keys (noted once; ENOENT: the cipher's crypto module is not loaded); its records stay in user space");
            });
            return HandOver::Kept(records);
        }
        if let Err(e) = install(tcp, Direction::Rx, &records.key_view(Direction::Rx)) {
            return HandOver::Failed(io::Error::other(format!(
                "ktls: the kernel took the transmit key but refused the receive key: {e}"
            )));
        }
        let sealed = records.key_view(Direction::Tx).seq;
        // The kernel has its copies; ours are not needed again (a KeyUpdate derives new ones).
        records.wipe_keys();
        HandOver::Kernel(Kernel {
            records,
            sealed,
            written_since: 0,
            key_update_owed: false,
            close_sent: false,
            tx_failed: false,
            drain: Drain::default(),
        })
    }

    /// Reads plaintext into `buf`, acting on the non-data records on the way. One `recvmsg`
    /// per read, which returns application data or one other record with its type; readiness
    /// is given up only when the socket has nothing (a short read may have stopped before a
    /// record of another type, which brings no new wake-up).
    pub(crate) fn poll_read(
        &mut self,
        tcp: &TcpStream,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<Read>> {
        loop {
            ready!(tcp.poll_read_ready(cx))?;
            let room = buf.initialize_unfilled();
            let (typ, n) = match tcp.try_io(Interest::READABLE, || recv_record(tcp, room)) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    return Poll::Ready(Err(match kernel_refusal(&e) {
                        Some(refusal) => self.failed(tcp, refusal),
                        None => e,
                    }));
                }
            };
            match typ {
                None if n == 0 => return Poll::Ready(Ok(Read::Eof)),
                None | Some(ContentType::ApplicationData) if n > 0 => {
                    buf.advance(n);
                    self.records.data_arrived();
                    return Poll::Ready(Ok(Read::Data));
                }
                typ => {
                    let typ = typ.unwrap_or(ContentType::ApplicationData);
                    if let Some(read) = self.control_record(tcp, typ, &room[..n])? {
                        return Poll::Ready(Ok(read));
                    }
                }
            }
        }
    }

    /// A record that is not application data, acted on: `None` when the reading goes on.
    fn control_record(
        &mut self,
        tcp: &TcpStream,
        typ: ContentType,
        payload: &[u8],
    ) -> io::Result<Option<Read>> {
        let content = match self.records.control_from_kernel(typ, payload) {
            Ok(content) => content,
            Err(e) => return Err(self.failed(tcp, e)),
        };
        if typ == ContentType::Handshake {
            // A KeyUpdate: the client's records are sealed with its next keys from here on.
            install(tcp, Direction::Rx, &self.records.key_view(Direction::Rx))
                .map_err(|e| rekey_refused("the client's", &e))?;
            self.records.wipe_keys();
        }
        Ok(match content {
            Content::CloseNotify => Some(Read::CloseNotify),
            // After our close_notify nothing may follow it (RFC 8446 §6.1).
            Content::KeyUpdateRequested if self.close_sent => None,
            Content::KeyUpdateRequested => {
                // Sent now if the socket has room, else before the next write or flush (which
                // wait for room; a read must not).
                self.key_update_owed = true;
                let sent = tcp.try_io(Interest::WRITABLE, || {
                    sockopt::send_tls_record(tcp, u8::from(ContentType::Handshake), &KEY_UPDATE)
                });
                if sent.is_ok() {
                    self.key_update_owed = false;
                    self.our_keys_updated(tcp)?;
                }
                None
            }
            Content::Nothing | Content::Data { .. } => None,
        })
    }

    /// Writes plaintext; the kernel seals it.
    pub(crate) fn poll_write(
        &mut self,
        tcp: &mut TcpStream,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_settle(tcp, cx, data.len()))?;
        let n = ready!(Pin::new(tcp).poll_write(cx, data))?;
        self.written_since = self.written_since.saturating_add(n as u64);
        Poll::Ready(Ok(n))
    }

    /// Our close_notify (what is written before it leaves first: the socket keeps order).
    pub(crate) fn poll_close_notify(
        &mut self,
        tcp: &TcpStream,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        ready!(self.poll_settle(tcp, cx, 0))?;
        let alert = [1, u8::from(AlertDescription::CloseNotify)];
        ready!(poll_send_record(tcp, cx, ContentType::Alert, &alert))?;
        self.close_sent = true;
        Poll::Ready(Ok(()))
    }

    /// Once our close_notify has left: whether everything written has reached the client, so
    /// that a FIN can follow. Records the kernel could not push yet (TCP had no room) wait in
    /// its own queue, not TCP's, and a FIN queued before them would cut them off (and a close
    /// would drop them). They are pushed (by a kernel worker) whenever the client's
    /// acknowledgements make room, so once TCP's queue is found empty twice, a wait apart, nothing
    /// is left behind: a heuristic, since that worker's delay is not bounded. Bounded by the
    /// relay's idle timeout like any wait for the client; a reset ends it at once.
    pub(crate) fn poll_pushed(
        &mut self,
        tcp: &TcpStream,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        let drain = &mut self.drain;
        loop {
            if let Some(wait) = &mut drain.wait {
                ready!(wait.as_mut().poll(cx));
            }
            // A reset connection keeps its count of unacknowledged bytes: its error ends the wait.
            if let Some(e) = tcp.take_error()? {
                return Poll::Ready(Err(e));
            }
            tcp.peer_addr()?;
            let empty = sockopt::unacknowledged(tcp)? == 0;
            if empty && drain.seen_empty {
                drain.wait = None;
                return Poll::Ready(Ok(()));
            }
            drain.seen_empty = empty;
            let until = Instant::now() + drain_wait(drain.looks);
            drain.looks = drain.looks.saturating_add(1);
            match &mut drain.wait {
                Some(wait) => wait.as_mut().reset(until),
                None => drain.wait = Some(Box::pin(tokio::time::sleep_until(until))),
            }
        }
    }

    /// Our KeyUpdate when one is owed (the client asked) or due (the confidentiality limit
    /// nears), with the kernel given our next keys behind it.
    /// `upcoming`: the bytes about to be written, which may each be a record.
    fn poll_settle(
        &mut self,
        tcp: &TcpStream,
        cx: &mut Context<'_>,
        upcoming: usize,
    ) -> Poll<io::Result<()>> {
        if self.tx_failed {
            return Poll::Ready(Err(io::Error::other(
                "ktls: the kernel refused our updated keys earlier",
            )));
        }
        if !self.key_update_owed && !self.key_update_due(tcp, upcoming as u64)? {
            return Poll::Ready(Ok(()));
        }
        ready!(poll_send_record(
            tcp,
            cx,
            ContentType::Handshake,
            &KEY_UPDATE
        ))?;
        self.key_update_owed = false;
        Poll::Ready(self.our_keys_updated(tcp))
    }

    /// Whether our keys are near their confidentiality limit: by the bound first, then, when
    /// the bound says so, by the kernel's own count.
    fn key_update_due(&mut self, tcp: &TcpStream, upcoming: u64) -> io::Result<bool> {
        let due = self.records.tx_limit().saturating_sub(2);
        let bound = self.sealed.saturating_add(self.written_since);
        if bound.saturating_add(upcoming) < due {
            return Ok(false);
        }
        let cipher = match self.records.key_view(Direction::Tx).cipher {
            Cipher::Aes128Gcm => libc::TLS_CIPHER_AES_GCM_128,
            Cipher::Aes256Gcm => libc::TLS_CIPHER_AES_GCM_256,
            Cipher::Chacha20Poly1305 => libc::TLS_CIPHER_CHACHA20_POLY1305,
        };
        let size = sockopt::ktls_info_size(cipher).unwrap_or(0);
        self.sealed = sockopt::ktls_tx_seq(tcp, size)?;
        // A record the kernel still holds open may later close over bytes counted before
        // this read and forgotten with it: at most one record short, within the margin of 2.
        self.written_since = 0;
        Ok(self.sealed.saturating_add(upcoming) >= due)
    }

    /// After our KeyUpdate left: the kernel seals with our next keys. If it refuses them,
    /// nothing more can be sent (the client expects the new keys).
    fn our_keys_updated(&mut self, tcp: &TcpStream) -> io::Result<()> {
        self.tx_failed = true;
        self.records
            .next_tx_keys()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        install(tcp, Direction::Tx, &self.records.key_view(Direction::Tx))
            .map_err(|e| rekey_refused("our", &e))?;
        self.records.wipe_keys();
        self.tx_failed = false;
        self.sealed = 0;
        self.written_since = 0;
        Ok(())
    }

    /// Flushing settles an owed KeyUpdate (the socket itself holds nothing back).
    pub(crate) fn poll_flush(
        &mut self,
        tcp: &TcpStream,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        self.poll_settle(tcp, cx, 0)
    }

    /// The client broke a rule: its alert goes out if the socket has room (none after our
    /// close_notify, nor in answer to its own fatal alert), and the error is the reader's.
    fn failed(&self, tcp: &TcpStream, e: RecordError) -> io::Error {
        if let (Some(alert), false) = (e.alert, self.close_sent) {
            let alert = [2, u8::from(alert)];
            let _ = sockopt::send_tls_record(tcp, u8::from(ContentType::Alert), &alert);
        }
        io::Error::new(io::ErrorKind::InvalidData, e.error)
    }
}

/// The alert for a record the kernel refused to open, by its errno (`tls_rx_msg_size` and
/// the decryption in net/tls/tls_sw.c): EMSGSIZE, a record longer than TLS allows
/// (record_overflow, RFC 8446 §5.2); EINVAL, an outer version other than 3.3 (decode_error,
/// as shuck's own layer answers a major version other than 3; for 3.x it says
/// bad_record_mac); EBADMSG, a record that did not open, or shorter than its tag, or with no
/// content type in its inner plaintext (bad_record_mac: the kernel gives the three one errno,
/// so the all-zero plaintext that shuck's own layer answers with unexpected_message gets
/// bad_record_mac here). Other errors are the socket's own.
fn kernel_refusal(e: &io::Error) -> Option<RecordError> {
    match e.raw_os_error()? {
        libc::EBADMSG => Some(RecordError::bad_mac()),
        libc::EMSGSIZE => Some(RecordError::new(
            AlertDescription::RecordOverflow,
            rustls::Error::PeerSentOversizedRecord,
        )),
        libc::EINVAL => Some(RecordError::new(
            AlertDescription::DecodeError,
            rustls::InvalidMessage::UnknownProtocolVersion,
        )),
        _ => None,
    }
}

/// A KeyUpdate's new keys refused: the connection's error, and a warning the first time (an
/// operator should know that clients' KeyUpdates end connections on this kernel).
fn rekey_refused(whose: &str, e: &io::Error) -> io::Error {
    once(&REKEY_REFUSED, || {
        tracing::warn!(error = %e, "ktls: this kernel's kTLS cannot be rekeyed: a connection whose client sends a KeyUpdate ends (noted once; set ktls = false to keep such connections)");
    });
    io::Error::other(format!(
        "ktls: the kernel refused {whose} updated keys (kTLS on this kernel cannot be rekeyed): {e}"
    ))
}

/// Sends one non-data record, waiting for room in the socket.
fn poll_send_record(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    typ: ContentType,
    payload: &[u8],
) -> Poll<io::Result<()>> {
    loop {
        ready!(tcp.poll_write_ready(cx))?;
        let sent = tcp.try_io(Interest::WRITABLE, || {
            sockopt::send_tls_record(tcp, u8::from(typ), payload)
        });
        match sent {
            Ok(_) => return Poll::Ready(Ok(())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// One `recvmsg` on a kTLS socket into `room`: application data (as many records as fit, up to
/// one of another type), or one record of another type. Its content type (`None` with no
/// control message: TCP's end, when nothing was read) and the bytes read.
fn recv_record(tcp: &TcpStream, room: &mut [u8]) -> io::Result<(Option<ContentType>, usize)> {
    CMSG.with_borrow_mut(|cmsg| {
        let mut iov = [IoSliceMut::new(room)];
        let msg = recvmsg::<()>(
            tcp.as_raw_fd(),
            &mut iov,
            Some(cmsg),
            MsgFlags::MSG_DONTWAIT,
        )?;
        let typ = msg.cmsgs()?.find_map(|c| match c {
            ControlMessageOwned::TlsGetRecordType(t) => Some(content_type(t)),
            _ => None,
        });
        Ok((typ, msg.bytes))
    })
}

fn content_type(t: TlsGetRecordType) -> ContentType {
    match t {
        TlsGetRecordType::ChangeCipherSpec => ContentType::ChangeCipherSpec,
        TlsGetRecordType::Alert => ContentType::Alert,
        TlsGetRecordType::Handshake => ContentType::Handshake,
        TlsGetRecordType::ApplicationData => ContentType::ApplicationData,
        TlsGetRecordType::Unknown(t) => ContentType::from(t),
        _ => ContentType::from(0),
    }
}

/// Gives the kernel one direction's keys (TLS_TX or TLS_RX). The structure holding them is
/// wiped once the kernel has its copy.
fn install(tcp: &TcpStream, direction: Direction, keys: &KeyView<'_>) -> io::Result<()> {
    let mut info = crypto_info(keys)?;
    let set = match direction {
        Direction::Tx => setsockopt(tcp, TcpTlsTx, &info),
        Direction::Rx => setsockopt(tcp, TcpTlsRx, &info),
    };
    wipe(&mut info);
    set.map_err(io::Error::from)
}

/// The kernel's structure for TLS 1.3 keys: for AES-GCM the IV's first four bytes are the
/// "salt" and the rest the "iv" (the kernel joins them again); ChaCha20 takes all twelve.
fn crypto_info(keys: &KeyView<'_>) -> io::Result<TlsCryptoInfo> {
    let info = |cipher_type| libc::tls_crypto_info {
        version: libc::TLS_1_3_VERSION,
        cipher_type,
    };
    let wrong = || io::Error::other("ktls: traffic keys of an unexpected size");
    let (salt, iv) = keys.iv.split_at(4);
    let rec_seq = keys.seq.to_be_bytes();
    Ok(match keys.cipher {
        Cipher::Aes128Gcm => TlsCryptoInfo::Aes128Gcm(libc::tls12_crypto_info_aes_gcm_128 {
            info: info(libc::TLS_CIPHER_AES_GCM_128),
            iv: iv.try_into().map_err(|_| wrong())?,
            key: keys.key.try_into().map_err(|_| wrong())?,
            salt: salt.try_into().map_err(|_| wrong())?,
            rec_seq,
        }),
        Cipher::Aes256Gcm => TlsCryptoInfo::Aes256Gcm(libc::tls12_crypto_info_aes_gcm_256 {
            info: info(libc::TLS_CIPHER_AES_GCM_256),
            iv: iv.try_into().map_err(|_| wrong())?,
            key: keys.key.try_into().map_err(|_| wrong())?,
            salt: salt.try_into().map_err(|_| wrong())?,
            rec_seq,
        }),
        Cipher::Chacha20Poly1305 => {
            TlsCryptoInfo::Chacha20Poly1305(libc::tls12_crypto_info_chacha20_poly1305 {
                info: info(libc::TLS_CIPHER_CHACHA20_POLY1305),
                iv: *keys.iv,
                key: keys.key.try_into().map_err(|_| wrong())?,
                salt: [],
                rec_seq,
            })
        }
    })
}

fn wipe(info: &mut TlsCryptoInfo) {
    match info {
        TlsCryptoInfo::Aes128Gcm(i) => {
            i.key.zeroize();
            i.iv.zeroize();
            i.salt.zeroize();
        }
        TlsCryptoInfo::Aes256Gcm(i) => {
            i.key.zeroize();
            i.iv.zeroize();
            i.salt.zeroize();
        }
        TlsCryptoInfo::Chacha20Poly1305(i) => {
            i.key.zeroize();
            i.iv.zeroize();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each errno the kernel gives for a record it would not open has its alert, as shuck's
    /// own layer answers the same records; the socket's own errors pass through.
    #[test]
    fn records_refused_by_the_kernel_get_their_alert() {
        for (errno, alert) in [
            (libc::EBADMSG, Some(AlertDescription::BadRecordMac)),
            (libc::EMSGSIZE, Some(AlertDescription::RecordOverflow)),
            (libc::EINVAL, Some(AlertDescription::DecodeError)),
            (libc::ECONNRESET, None),
            (libc::EPIPE, None),
        ] {
            let refusal = kernel_refusal(&io::Error::from_raw_os_error(errno));
            assert_eq!(refusal.and_then(|r| r.alert), alert, "errno {errno}");
        }
        assert!(kernel_refusal(&io::Error::other("no errno")).is_none());
    }
}
