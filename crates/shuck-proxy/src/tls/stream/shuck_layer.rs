//! The stream once shuck protects a TLS 1.3 connection's records itself (`tls::stream::records`): writes
//! sealed into the send queue, reads opened in place in the receive queue.

use std::io;

use rustls::AlertDescription;
use tokio::io::ReadBuf;

use super::{tls_error, too_large, Layer, Mode, ReadEnd, Step, TlsStream};
use crate::mem::buf_queue::BufQueue;
use crate::tls::stream::records::{self, Content, Opened, ShuckRecords};

impl TlsStream {
    /// One step of shuck's own record layer: a write or close_notify sealed into the send
    /// queue, or for a read the records received opened until one brings plaintext (a
    /// KeyUpdate asking for ours is answered into the send queue on the way). On error the
    /// alert is queued.
    pub(super) fn step_shuck(&mut self, mode: &mut Mode<'_, '_>) -> io::Result<Step> {
        let Self {
            layer: Layer::Shuck(records),
            incoming,
            outgoing,
            plain,
            read_end,
            close_sent,
            ..
        } = self
        else {
            return Ok(Step::Wait);
        };
        match mode {
            Mode::Handshake | Mode::Drain => Ok(Step::Wait),
            Mode::Write(data) => {
                let room = outgoing
                    .room(data.len() + records::MAX_SEAL_OVERHEAD)
                    .ok_or_else(too_large)?;
                let n = records.seal_data(data, room).map_err(tls_error)?;
                outgoing.filled(n);
                Ok(Step::Written)
            }
            Mode::CloseNotify => {
                seal_alert(records, outgoing, AlertDescription::CloseNotify)?;
                Ok(Step::Written)
            }
            // Whatever follows close_notify is ignored (RFC 8446 §6.1).
            Mode::Read(_) if read_end.is_some() => {
                incoming.clear();
                Ok(Step::Wait)
            }
            Mode::Read(out) => {
                let read = open_records(records, incoming, outgoing, plain, out, *close_sent);
                match read {
                    Ok(Got::CloseNotify) => {
                        *read_end = Some(ReadEnd::CloseNotify);
                        Ok(Step::Again)
                    }
                    Ok(Got::Nothing) => Ok(Step::Wait),
                    Ok(Got::Data) => Ok(Step::Readable),
                    Err(e) => {
                        // No alert after our close_notify, nor in answer to the client's fatal one.
                        if let (false, Some(alert)) = (*close_sent, e.alert) {
                            let _ = seal_alert(records, outgoing, alert);
                        }
                        Err(tls_error(e.error))
                    }
                }
            }
        }
    }
}

/// What [`open_records`] came to.
enum Got {
    /// No whole record is left.
    Nothing,
    Data,
    CloseNotify,
}

/// Opens the records received until one brings plaintext (into `out`, the rest of it into
/// `plain`) or close_notify, or no whole record is left. The client's KeyUpdates asking for ours
/// are answered into `outgoing` (not once we have sent close_notify: nothing may follow it).
fn open_records(
    records: &mut ShuckRecords,
    incoming: &mut BufQueue,
    outgoing: &mut BufQueue,
    plain: &mut BufQueue,
    out: &mut ReadBuf<'_>,
    close_sent: bool,
) -> Result<Got, records::RecordError> {
    let internal =
        |e: io::Error| records::RecordError::internal(rustls::Error::General(e.to_string()));
    loop {
        let Opened::Record { len, content } = records.open(incoming.data_mut())? else {
            return Ok(Got::Nothing);
        };
        match content {
            Content::Data { start, end } => {
                let data = &incoming.data()[start..end];
                let n = out.remaining().min(data.len());
                out.put_slice(&data[..n]);
                plain.push(&data[n..]).map_err(internal)?;
                incoming.consume(len);
                return Ok(Got::Data);
            }
            Content::Nothing | Content::KeyUpdateRequested if close_sent => {}
            Content::Nothing => {}
            Content::KeyUpdateRequested => {
                let room = outgoing
                    .room(records::OVERHEAD + 5)
                    .ok_or_else(|| internal(too_large()))?;
                let n = records
                    .answer_key_update(room)
                    .map_err(records::RecordError::internal)?;
                outgoing.filled(n);
            }
            Content::CloseNotify => {
                incoming.consume(len);
                return Ok(Got::CloseNotify);
            }
        }
        incoming.consume(len);
    }
}

/// An alert sealed into the send queue.
fn seal_alert(
    records: &mut ShuckRecords,
    outgoing: &mut BufQueue,
    alert: AlertDescription,
) -> io::Result<()> {
    let room = outgoing.room(records::OVERHEAD + 2).ok_or_else(too_large)?;
    let n = records.seal_alert(alert, room).map_err(tls_error)?;
    outgoing.filled(n);
    Ok(())
}
