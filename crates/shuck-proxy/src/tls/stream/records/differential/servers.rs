//! The two servers under comparison, driven the same way: bytes delivered, application data
//! read, answers and alerts sent. `Ours` is shuck's record layer ([`ShuckRecords`]); `Theirs` is
//! rustls keeping the records itself, through its unbuffered API.

use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, InsufficientSizeError};

use crate::tls::stream::records::{Content, Opened, ShuckRecords, MAX_SEAL_OVERHEAD, OVERHEAD};

/// How a server's reading ended, if it did.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum End {
    /// Still reading: the client may send more.
    Open,
    CloseNotify,
    /// The connection failed (the alert, if any, is the last thing sent).
    Failed(rustls::Error),
}

/// What a server did with the client's bytes.
pub(super) struct Seen {
    pub(super) data: Vec<u8>,
    pub(super) sent: Vec<u8>,
    pub(super) end: End,
    /// The first bytes (up to a header's five) of the record reading failed on (shuck's
    /// side only).
    pub(super) failed_header: Vec<u8>,
    /// Bytes delivered whose processing is done: on failure, where the record that failed
    /// starts (shuck), or what rustls had discarded (which stays at the start of a handshake
    /// message it is still joining).
    pub(super) done: usize,
    /// Part of a handshake message was held when reading failed (shuck's side): rustls' own
    /// `done` then stays at that message's first record.
    pub(super) holding_fragment: bool,
}

impl Seen {
    fn new() -> Seen {
        Seen {
            data: Vec::new(),
            sent: Vec::new(),
            end: End::Open,
            failed_header: Vec::new(),
            done: 0,
            holding_fragment: false,
        }
    }
}

pub(super) struct Ours {
    records: ShuckRecords,
    received: Vec<u8>,
    delivered: usize,
    pub(super) seen: Seen,
}

impl Ours {
    pub(super) fn new(server: UnbufferedServerConnection) -> Ours {
        Ours {
            records: ShuckRecords::take_over(server).expect("take over"),
            received: Vec::new(),
            delivered: 0,
            seen: Seen::new(),
        }
    }

    /// Opens every whole record delivered, as the stream's reader does.
    pub(super) fn deliver(&mut self, bytes: &[u8]) {
        if self.seen.end != End::Open {
            return;
        }
        self.received.extend_from_slice(bytes);
        self.delivered += bytes.len();
        loop {
            self.seen.done = self.delivered - self.received.len();
            match self.records.open(&mut self.received) {
                Ok(Opened::Incomplete) => return,
                Ok(Opened::Record { len, content }) => {
                    if !self.take(content) {
                        return;
                    }
                    self.received.drain(..len);
                }
                Err(e) => {
                    if let Some(alert) = e.alert {
                        let mut out = [0; OVERHEAD + 2];
                        let n = self.records.seal_alert(alert, &mut out).expect("alert");
                        self.seen.sent.extend_from_slice(&out[..n]);
                    }
                    self.seen.failed_header = self.received.iter().take(5).copied().collect();
                    self.seen.holding_fragment = self.records.holds_fragment();
                    self.seen.end = End::Failed(e.error);
                    return;
                }
            }
        }
    }

    /// Acts on one record's content; whether reading goes on.
    fn take(&mut self, content: Content) -> bool {
        match content {
            Content::Data { start, end } => {
                self.seen.data.extend_from_slice(&self.received[start..end]);
            }
            Content::Nothing => {}
            Content::KeyUpdateRequested => {
                let mut out = [0; OVERHEAD + 5];
                let n = self.records.answer_key_update(&mut out).expect("answer");
                self.seen.sent.extend_from_slice(&out[..n]);
            }
            Content::CloseNotify => {
                self.seen.end = End::CloseNotify;
                return false;
            }
        }
        true
    }

    pub(super) fn write(&mut self, data: &[u8]) {
        if self.seen.end != End::Open {
            return;
        }
        let mut out = vec![0; data.len() + MAX_SEAL_OVERHEAD];
        let n = self.records.seal_data(data, &mut out).expect("seal");
        self.seen.sent.extend_from_slice(&out[..n]);
    }
}

pub(super) struct Theirs {
    conn: UnbufferedServerConnection,
    received: Vec<u8>,
    pub(super) seen: Seen,
}

/// What to do after one state of rustls.
enum Next {
    Again,
    Wait,
    Ended(End),
}

impl Theirs {
    pub(super) fn new(conn: UnbufferedServerConnection) -> Theirs {
        Theirs {
            conn,
            received: Vec::new(),
            seen: Seen::new(),
        }
    }

    pub(super) fn deliver(&mut self, bytes: &[u8]) {
        if self.seen.end != End::Open {
            return;
        }
        self.received.extend_from_slice(bytes);
        self.pump(None);
    }

    pub(super) fn write(&mut self, data: &[u8]) {
        if self.seen.end != End::Open {
            return;
        }
        self.pump(Some(data));
    }

    /// Calls rustls until it waits for bytes, writing `write` when it may.
    fn pump(&mut self, mut write: Option<&[u8]>) {
        loop {
            let (discard, next) = self.one_state(&mut write);
            self.received.drain(..discard);
            self.seen.done += discard;
            match next {
                Next::Again => {}
                Next::Wait => return,
                Next::Ended(End::Failed(e)) => {
                    self.queue_alert();
                    self.seen.end = End::Failed(e);
                    return;
                }
                Next::Ended(end) => {
                    self.seen.end = end;
                    return;
                }
            }
        }
    }

    fn one_state(&mut self, write: &mut Option<&[u8]>) -> (usize, Next) {
        let status = self.conn.process_tls_records(&mut self.received);
        let mut discard = status.discard;
        let next = match status.state {
            Err(e) => Next::Ended(End::Failed(e)),
            Ok(ConnectionState::ReadTraffic(mut traffic)) => {
                let mut next = Next::Again;
                while let Some(record) = traffic.next_record() {
                    match record {
                        Ok(record) => {
                            discard += record.discard;
                            self.seen.data.extend_from_slice(record.payload);
                        }
                        Err(e) => {
                            next = Next::Ended(End::Failed(e));
                            break;
                        }
                    }
                }
                next
            }
            Ok(ConnectionState::EncodeTlsData(mut data)) => {
                encode(&mut self.seen.sent, |out| data.encode(out));
                Next::Again
            }
            Ok(ConnectionState::TransmitTlsData(data)) => {
                data.done();
                Next::Again
            }
            Ok(ConnectionState::WriteTraffic(mut traffic)) => match write.take() {
                Some(data) => {
                    encrypt(&mut self.seen.sent, |out| traffic.encrypt(data, out));
                    Next::Again
                }
                None => Next::Wait,
            },
            Ok(ConnectionState::PeerClosed | ConnectionState::Closed) => {
                Next::Ended(End::CloseNotify)
            }
            Ok(other) => Next::Ended(End::Failed(rustls::Error::General(format!(
                "unexpected state {other:?}"
            )))),
        };
        (discard, next)
    }

    /// After an error, rustls hands its alert over on the next call.
    fn queue_alert(&mut self) {
        let status = self.conn.process_tls_records(&mut self.received);
        if let Ok(ConnectionState::EncodeTlsData(mut data)) = status.state {
            encode(&mut self.seen.sent, |out| data.encode(out));
        }
    }
}

fn encode(sent: &mut Vec<u8>, f: impl FnMut(&mut [u8]) -> Result<usize, EncodeError>) {
    fill(sent, f, |e| match e {
        EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(*required_size)
        }
        EncodeError::AlreadyEncoded => None,
    });
}

fn encrypt(sent: &mut Vec<u8>, f: impl FnMut(&mut [u8]) -> Result<usize, EncryptError>) {
    fill(sent, f, |e| match e {
        EncryptError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(*required_size)
        }
        EncryptError::EncryptExhausted => None,
    });
}

/// Writes with `f` into `sent`, with the room rustls asks for.
fn fill<E>(
    sent: &mut Vec<u8>,
    mut f: impl FnMut(&mut [u8]) -> Result<usize, E>,
    needs: impl Fn(&E) -> Option<usize>,
) {
    let mut room = vec![0; 1 << 10];
    loop {
        match f(&mut room) {
            Ok(n) => return sent.extend_from_slice(&room[..n]),
            Err(e) => match needs(&e) {
                Some(required) if required > room.len() => room.resize(required, 0),
                _ => return,
            },
        }
    }
}
