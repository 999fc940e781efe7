//! What a fuzz input means: a client's script of records, sealed with its real keys, cut into
//! deliveries, with the servers' own writes between them.
//!
//! Each step starts with an opcode byte; its arguments follow (missing bytes read as 0):
//!
//! | op | step | arguments |
//! |---|---|---|
//! | 0 | application data | length, padding |
//! | 1 | any inner plaintext: content type, a length up to 16,700, padding up to 300 | type, length (2), padding (2) |
//! | 2 | KeyUpdate, whole or split over two records; a valid one moves the client's keys on | request_update, split point |
//! | 3 | the client's keys move on without a KeyUpdate | |
//! | 4 | an alert | level, description |
//! | 5 | a gap in the sequence numbers | count |
//! | 6 | one bit of the last record flipped | position (2) |
//! | 7 | what is written so far is delivered, in two reads cut at a position | position (2) |
//! | 8 | raw bytes, unprotected | length, the bytes |
//! | 9 | each server writes application data | length |
//! | 10 | any handshake message, split over records | type, body length, split point |
//! | 11 | a handshake record holding the bytes given | length, the bytes |

use super::traffic::Traffic;

/// At most this many steps, and this many bytes written, per input: enough for every rule,
/// small enough to run fast.
const MAX_STEPS: usize = 256;
const MAX_WIRE: usize = 1 << 18;

/// What reaches the servers, in order.
#[derive(Debug)]
pub(super) enum Step {
    /// Bytes from the client, read at once.
    Deliver(Vec<u8>),
    /// Each server sends this much application data.
    ServerWrite(usize),
}

/// The input's bytes, read one at a time.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&first, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        first
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    fn bytes(&mut self, n: usize) -> &[u8] {
        let (taken, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        taken
    }
}

/// Inner plaintext: `len` bytes of a pattern, the content type, `pad` zeros.
fn inner(typ: u8, payload: &[u8], pad: usize) -> Vec<u8> {
    let mut inner = payload.to_vec();
    inner.push(typ);
    inner.resize(inner.len() + pad, 0);
    inner
}

fn pattern(len: usize, salt: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ salt) as u8)
        .collect()
}

/// The client: its keys, what it wrote and not yet delivered, and the steps so far.
struct Client {
    keys: Traffic,
    pending: Vec<u8>,
    last_record: std::ops::Range<usize>,
    steps: Vec<Step>,
    written: usize,
}

impl Client {
    fn record(&mut self, inner: &[u8]) {
        let record = self.keys.seal(inner);
        self.write(&record);
        self.last_record = self.pending.len() - record.len()..self.pending.len();
    }

    fn write(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        self.written += bytes.len();
    }

    fn deliver(&mut self) {
        if !self.pending.is_empty() {
            self.steps
                .push(Step::Deliver(std::mem::take(&mut self.pending)));
            self.last_record = 0..0;
        }
    }

    /// `message` as handshake records, cut after `split` bytes when that falls inside it.
    fn handshake(&mut self, message: &[u8], split: usize) {
        if split > 0 && split < message.len() {
            self.record(&inner(22, &message[..split], 0));
            self.record(&inner(22, &message[split..], 0));
        } else {
            self.record(&inner(22, message, 0));
        }
    }
}

/// The steps `input` asks for, with the client's keys from `client_keys`.
pub(super) fn steps(input: &[u8], client_keys: Traffic) -> Vec<Step> {
    let mut input = Input(input);
    let mut client = Client {
        keys: client_keys,
        pending: Vec::new(),
        last_record: 0..0,
        steps: Vec::new(),
        written: 0,
    };
    for n in 0..MAX_STEPS {
        if input.0.is_empty() || client.written > MAX_WIRE {
            break;
        }
        step(&mut client, &mut input, n);
    }
    client.deliver();
    client.steps
}

fn step(client: &mut Client, input: &mut Input<'_>, n: usize) {
    match input.byte() % 12 {
        0 => {
            let (len, pad) = (input.byte(), input.byte());
            client.record(&inner(23, &pattern(usize::from(len), n), usize::from(pad)));
        }
        1 => {
            let typ = input.byte();
            let len = usize::from(input.u16()) % 16_700;
            let pad = usize::from(input.u16()) % 300;
            client.record(&inner(typ, &pattern(len, n), pad));
        }
        2 => {
            let (request, split) = (input.byte(), input.byte());
            client.handshake(&[24, 0, 0, 1, request], usize::from(split % 6));
            if request <= 1 {
                client.keys.update();
            }
        }
        3 => client.keys.update(),
        4 => {
            let (level, description) = (input.byte(), input.byte());
            client.record(&inner(21, &[level, description], 0));
        }
        5 => client.keys.seq += u64::from(input.byte()),
        6 => {
            let at = usize::from(input.u16());
            let record = client.last_record.clone();
            if !record.is_empty() {
                client.pending[record.start + at % record.len()] ^= 1 << (at >> 13);
            }
        }
        7 => {
            let cut = usize::from(input.u16()).min(client.pending.len());
            let rest = client.pending.split_off(cut);
            client.deliver();
            client.pending = rest;
            client.deliver();
        }
        8 => {
            let len = usize::from(input.byte());
            let raw = input.bytes(len).to_vec();
            client.write(&raw);
        }
        9 => {
            client.deliver();
            let len = usize::from(input.byte()) + 1;
            client.steps.push(Step::ServerWrite(len));
        }
        10 => {
            let (typ, len, split) = (input.byte(), input.byte(), input.byte());
            let mut message = vec![typ, 0, 0, len];
            message.extend(pattern(usize::from(len), n));
            client.handshake(&message, usize::from(split));
        }
        _ => {
            let len = usize::from(input.byte());
            let bytes = input.bytes(len).to_vec();
            client.record(&inner(22, &bytes, 0));
        }
    }
}

/// Bytes written by the script, for the encoding side of seed inputs.
#[cfg(test)]
pub(super) mod build {
    /// An input from steps written as (opcode, arguments).
    pub(in super::super) fn input(steps: &[(u8, &[u8])]) -> Vec<u8> {
        steps
            .iter()
            .flat_map(|(op, args)| std::iter::once(*op).chain(args.iter().copied()))
            .collect()
    }
}
