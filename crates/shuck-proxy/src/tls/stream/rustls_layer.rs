//! The stream while rustls has the records: the handshake, and TLS 1.2 throughout. rustls is
//! given whole records from the receive queue and encodes into the send queue.

use std::io;

use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, InsufficientSizeError};

use super::{tls_error, too_large, Fed, Layer, Mode, ReadEnd, Step, TlsStream};
use crate::config::RecordLayer;
use crate::mem::buf_queue::BufQueue;
use crate::tls::stream::records::ShuckRecords;

impl TlsStream {
    /// One call to rustls over the records received, acting on the state it returns; on error
    /// rustls' alert is queued.
    pub(super) fn step_rustls(&mut self, mode: &mut Mode<'_, '_>) -> io::Result<Step> {
        let Self {
            layer: Layer::Rustls(conn),
            incoming,
            outgoing,
            plain,
            read_end,
            fed,
            record_layer,
            ..
        } = self
        else {
            return Ok(Step::Wait);
        };
        let given = rustls_input(conn, incoming.data(), *fed, *record_layer);
        let more_records = next_record_end(incoming.data(), given).is_some();
        let status = conn.process_tls_records(&mut incoming.data_mut()[..given]);
        let mut discard = status.discard;
        *fed = Fed {
            holds: given.saturating_sub(discard),
            wants_more: matches!(status.state, Ok(ConnectionState::BlockedHandshake)),
        };
        let outcome = match status.state {
            Ok(ConnectionState::ReadTraffic(mut traffic)) => match mode {
                // Left in rustls for the reader: the handshake is done.
                Mode::Handshake => Ok(Step::Readable),
                Mode::Read(out) => {
                    let mut taken = Ok(Step::Readable);
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(record) => {
                                discard += record.discard;
                                let n = out.remaining().min(record.payload.len());
                                out.put_slice(&record.payload[..n]);
                                if let Err(e) = plain.push(&record.payload[n..]) {
                                    taken = Err(e);
                                }
                            }
                            Err(e) => taken = Err(tls_error(e)),
                        }
                    }
                    taken
                }
                // Plaintext a write found before it, or left before shuck takes the records
                // over: kept for the reader.
                Mode::Drain | Mode::Write(_) | Mode::CloseNotify => {
                    let mut taken = Ok(Step::Again);
                    while let Some(record) = traffic.next_record() {
                        match record {
                            Ok(record) => {
                                discard += record.discard;
                                if let Err(e) = plain.push(record.payload) {
                                    taken = Err(e);
                                }
                            }
                            Err(e) => taken = Err(tls_error(e)),
                        }
                    }
                    taken
                }
            },
            Ok(ConnectionState::EncodeTlsData(mut data)) => {
                encode(outgoing, |out| data.encode(out)).map(|()| Step::Again)
            }
            // Encoded bytes are sent in order from the send queue; rustls need not wait.
            Ok(ConnectionState::TransmitTlsData(data)) => {
                data.done();
                Ok(Step::Again)
            }
            // Whole records it was not given yet are there: the next call gives it one.
            Ok(ConnectionState::BlockedHandshake) if more_records => Ok(Step::Again),
            Ok(ConnectionState::BlockedHandshake) => Ok(Step::Wait),
            Ok(ConnectionState::WriteTraffic(mut traffic)) => match mode {
                Mode::Handshake | Mode::Drain | Mode::Read(_) => Ok(Step::Wait),
                Mode::Write(data) => {
                    encrypt(outgoing, |out| traffic.encrypt(data, out)).map(|()| Step::Written)
                }
                Mode::CloseNotify => {
                    encrypt(outgoing, |out| traffic.queue_close_notify(out)).map(|()| Step::Written)
                }
            },
            Ok(ConnectionState::PeerClosed) => {
                *read_end = Some(ReadEnd::CloseNotify);
                Ok(Step::Again)
            }
            Ok(ConnectionState::Closed) => {
                read_end.get_or_insert(ReadEnd::CloseNotify);
                Ok(Step::Closed)
            }
            // Early data is never enabled, and nothing else is known.
            Ok(_) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "unexpected TLS connection state",
            )),
            Err(e) => Err(tls_error(e)),
        };
        incoming.consume(discard);
        if outcome.is_err() {
            self.queue_alert();
        }
        outcome
    }

    /// After an error rustls has its alert ready: one more call hands it over (rustls returns
    /// what it queued before it looks at records again), encoded into the send queue. rustls
    /// is given the receive queue as always: its handshake deframer may point into it (an
    /// empty slice made it panic while a client certificate's messages were half-processed).
    pub(super) fn queue_alert(&mut self) {
        let Layer::Rustls(conn) = &mut self.layer else {
            return;
        };
        let status = conn.process_tls_records(self.incoming.data_mut());
        let discard = status.discard;
        if let Ok(ConnectionState::EncodeTlsData(mut data)) = status.state {
            let _ = encode(&mut self.outgoing, |out| data.encode(out));
        }
        self.incoming.consume(discard);
    }
}

/// Encodes with `f` into the send queue, making room when rustls asks for more.
fn encode(
    outgoing: &mut BufQueue,
    f: impl FnMut(&mut [u8]) -> Result<usize, EncodeError>,
) -> io::Result<()> {
    fill(outgoing, f, |e| match e {
        EncodeError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(*required_size)
        }
        EncodeError::AlreadyEncoded => None,
    })
}

/// Encrypts with `f` into the send queue, making room when rustls asks for more.
fn encrypt(
    outgoing: &mut BufQueue,
    f: impl FnMut(&mut [u8]) -> Result<usize, EncryptError>,
) -> io::Result<()> {
    fill(outgoing, f, |e| match e {
        EncryptError::InsufficientSize(InsufficientSizeError { required_size }) => {
            Some(*required_size)
        }
        EncryptError::EncryptExhausted => None,
    })
}

/// Writes with `f` into the send queue's free room, growing it to what `needs` says rustls
/// asked for (once per size), until it fits.
fn fill<E: std::fmt::Display>(
    outgoing: &mut BufQueue,
    mut f: impl FnMut(&mut [u8]) -> Result<usize, E>,
    needs: impl Fn(&E) -> Option<usize>,
) -> io::Result<()> {
    let mut need = 0;
    loop {
        let room = outgoing.room(need).ok_or_else(too_large)?;
        match f(room) {
            Ok(n) => {
                outgoing.filled(n);
                return Ok(());
            }
            Err(e) => match needs(&e) {
                Some(required) if need < required => need = required,
                _ => return Err(io::Error::other(e.to_string())),
            },
        }
    }
}

/// How much of the received bytes rustls is given. During the handshake: what it holds (a
/// message it is joining from several records), and one more whole record when it asked for
/// more, so that the record with the client's Finished is the last it sees. After a TLS 1.3
/// handshake with shuck's record layer: nothing, the records behind it are for `ShuckRecords`
/// (`take_over_records`); had rustls read them, it could have answered a KeyUpdate into a queue
/// of its own that the hand-over loses, or held half a message the hand-over cuts. TLS 1.2, or
/// `record_layer = "rustls"`: everything.
fn rustls_input(
    conn: &UnbufferedServerConnection,
    received: &[u8],
    fed: Fed,
    layer: RecordLayer,
) -> usize {
    if !conn.is_handshaking() {
        return if layer == RecordLayer::Shuck && ShuckRecords::can_take_over(conn) {
            0
        } else {
            received.len()
        };
    }
    let holds = fed.holds.min(received.len());
    if fed.wants_more {
        next_record_end(received, holds).unwrap_or(holds)
    } else {
        holds
    }
}

/// Where the whole record starting at `at` ends, if it is all there.
fn next_record_end(received: &[u8], at: usize) -> Option<usize> {
    let header = received.get(at..at + 5)?;
    let end = at + 5 + usize::from(u16::from_be_bytes([header[3], header[4]]));
    (end <= received.len()).then_some(end)
}
