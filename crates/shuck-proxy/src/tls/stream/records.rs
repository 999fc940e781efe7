//! TLS 1.3 records after the handshake, protected by shuck instead of rustls: what kTLS does in
//! the kernel, done in user space so that an idle connection holds almost nothing.
//!
//! rustls keeps, for the life of a connection, its connection state (about 2 KiB, half of it
//! inline in our stream) and two aws-lc AES-GCM contexts (580 bytes each). Once the handshake
//! is done, rustls' kernel API (`dangerous_into_kernel_connection`, made for kTLS) hands over
//! the traffic keys and keeps only what a KeyUpdate needs (the traffic secrets). [`ShuckRecords`]
//! then seals and opens records itself with aws-lc-rs, the AEAD rustls' own provider uses, and
//! builds the AEAD contexts only while bytes move: [`ShuckRecords::rest`] drops them when the
//! stream waits for the client, so an idle connection keeps the key bytes (zeroized on drop)
//! and the secrets, a few hundred bytes.
//!
//! What rustls did for such records is done here the same way (RFC 8446 §5): one nonce per
//! record (the IV XOR the sequence number), the record header as additional data, the inner
//! content type behind the plaintext and its zero padding stripped, at most 2^14 bytes of
//! plaintext; a client's KeyUpdate switches its keys and, when it asks, ours too (answered at
//! once); close_notify ends the reading; any other alert, a record that fails to open or a
//! message out of place ends the connection with the alert rustls would send. rustls' limits on
//! what a client may send without application data are kept (32 KeyUpdates, BoringSSL's
//! figure, and as many empty records), and our own keys are updated before the cipher's
//! confidentiality limit, as rustls does. Only TLS 1.3 with the three standard AEADs comes
//! here; a TLS 1.2 connection stays with rustls throughout.

use aws_lc_rs::aead::{
    Aad, Algorithm, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305,
    NONCE_LEN,
};
use rustls::kernel::KernelConnection;
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::{
    AlertDescription, CipherSuite, CommonState, ConnectionTrafficSecrets, ContentType, Error,
    HandshakeType, InvalidMessage, PeerMisbehaved, ProtocolVersion, SupportedCipherSuite,
};
use zeroize::{Zeroize, Zeroizing};

const HEADER_LEN: usize = 5;
const TAG_LEN: usize = 16;
/// The most plaintext a record carries (RFC 8446 §5.1).
pub(crate) const MAX_PLAINTEXT: usize = 1 << 14;
/// The most a protected record's body may be: plaintext, content type, padding, tag (§5.2).
const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 256;
/// A record sealed around `n` bytes of plaintext is this much longer.
pub(crate) const OVERHEAD: usize = HEADER_LEN + 1 + TAG_LEN;
/// A KeyUpdate's record: the four-byte handshake header and its one byte.
const KEY_UPDATE_RECORD: usize = OVERHEAD + 5;
/// The most a sealed write adds to its plaintext: its record, and a KeyUpdate before it when
/// our keys are due for one.
pub(crate) const MAX_SEAL_OVERHEAD: usize = OVERHEAD + KEY_UPDATE_RECORD;
/// Records in a row that bring no application data (KeyUpdates, empty records, user_canceled)
/// before the client is taken for a nuisance: rustls' and BoringSSL's 32.
const MAX_RECORDS_WITHOUT_DATA: u8 = 32;
/// Warning alerts a connection may send in its life, data or not between them: rustls' and
/// BoringSSL's 4. TLS 1.3 lets only user_canceled through; the rest are refused anyway.
const MAX_WARNINGS: u8 = 4;
/// Every protected TLS 1.3 record says it is application data, version TLS 1.2, outside.
const OUTER_TYPE: u8 = 23;
const OUTER_VERSION: [u8; 2] = [3, 3];

/// A failure while opening a record: what went wrong, and the alert that tells the client
/// (none when the client's own fatal alert ended it).
#[derive(Debug)]
pub(crate) struct RecordError {
    pub(crate) error: Error,
    pub(crate) alert: Option<AlertDescription>,
}

impl RecordError {
    pub(crate) fn new(alert: AlertDescription, error: impl Into<Error>) -> RecordError {
        RecordError {
            error: error.into(),
            alert: Some(alert),
        }
    }

    /// Our own failure (no room, no keys): internal_error.
    pub(crate) fn internal(error: impl Into<Error>) -> RecordError {
        RecordError::new(AlertDescription::InternalError, error)
    }

    /// A record that did not open (bad_record_mac).
    pub(crate) fn bad_mac() -> RecordError {
        RecordError::new(AlertDescription::BadRecordMac, Error::DecryptError)
    }

    fn unexpected(error: impl Into<Error>) -> RecordError {
        RecordError::new(AlertDescription::UnexpectedMessage, error)
    }
}

/// What one record at the front of the received bytes held, once opened.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Opened {
    /// No whole record yet.
    Incomplete,
    /// A record of `len` bytes, opened in place, holding `content`.
    Record { len: usize, content: Content },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Content {
    /// Application data at `start..end` of the bytes given.
    Data { start: usize, end: usize },
    /// Nothing for the reader (an empty record, user_canceled, a KeyUpdate not asking for ours).
    Nothing,
    /// A KeyUpdate asking for ours: the caller seals one with [`ShuckRecords::answer_key_update`].
    KeyUpdateRequested,
    /// close_notify: the client sends no more.
    CloseNotify,
}

/// One direction's keys: the key and IV bytes, the next sequence number, and the AEAD context
/// while bytes move. Held by every idle TLS 1.3 connection (twice): no field the algorithm
/// already gives (the key's length), since a few bytes more took `ShuckRecords` past 768 bytes,
/// into jemalloc's next size class (+128 bytes per connection).
struct Keys {
    algorithm: &'static Algorithm,
    /// The key in its first `algorithm.key_len()` bytes.
    key: Zeroizing<[u8; 32]>,
    iv: Zeroizing<[u8; NONCE_LEN]>,
    seq: u64,
    ready: Option<LessSafeKey>,
}

impl Keys {
    fn new(
        algorithm: &'static Algorithm,
        (seq, secrets): (u64, ConnectionTrafficSecrets),
    ) -> Result<Keys, Error> {
        let (key, iv) = match &secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv }
            | ConnectionTrafficSecrets::Aes256Gcm { key, iv }
            | ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key.as_ref(), iv.as_ref()),
            // `algorithm_of` admitted only the three above.
            _ => (&[][..], &[][..]),
        };
        if key.len() != algorithm.key_len() || iv.len() != NONCE_LEN {
            return Err(Error::General("traffic keys of an unexpected size".into()));
        }
        let mut k = Keys {
            algorithm,
            key: Zeroizing::new([0; 32]),
            iv: Zeroizing::new([0; NONCE_LEN]),
            seq,
            ready: None,
        };
        // At most 32 bytes: `algorithm_of` admitted only AES-128, AES-256 and ChaCha20.
        k.key
            .get_mut(..key.len())
            .ok_or_else(|| Error::General("a traffic key over 32 bytes".into()))?
            .copy_from_slice(key);
        k.iv.copy_from_slice(iv);
        Ok(k)
    }

    fn key_bytes(&self) -> &[u8] {
        &self.key[..self.algorithm.key_len()]
    }

    /// The AEAD context, built when first needed since the last [`Keys::rest`].
    fn aead(&mut self) -> Result<&LessSafeKey, Error> {
        if self.ready.is_none() {
            let unbound = UnboundKey::new(self.algorithm, self.key_bytes())
                .map_err(|_| Error::General("the traffic key does not fit its cipher".into()))?;
            self.ready = Some(LessSafeKey::new(unbound));
        }
        self.ready
            .as_ref()
            .ok_or_else(|| Error::General("no AEAD context".into()))
    }

    /// This record's nonce, and the sequence number moved on (a connection that reached 2^64
    /// records would have to stop: rustls refuses at the same point).
    fn next_nonce(&mut self) -> Result<Nonce, Error> {
        let mut nonce = *self.iv;
        for (n, s) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        self.seq = self.seq.checked_add(1).ok_or(Error::EncryptError)?;
        Ok(Nonce::assume_unique_for_key(nonce))
    }
}

/// The first bytes (at most 4) of a KeyUpdate whose record ended before it did.
#[derive(Debug, Default)]
struct Fragment {
    bytes: [u8; 4],
    len: u8,
}

/// A TLS 1.3 connection's record protection after the handshake.
pub(crate) struct ShuckRecords {
    /// rustls' remains: the traffic secrets, for KeyUpdates.
    kernel: KernelConnection<ServerConnectionData>,
    tx: Keys,
    rx: Keys,
    /// Our keys are updated before this many records are sealed with them.
    tx_limit: u64,
    key_updates_allowed: u8,
    /// Warning alerts still allowed on this connection.
    warnings_allowed: u8,
    empty_in_a_row: u8,
    /// The first bytes of a KeyUpdate split over records.
    fragment: Fragment,
    /// Our KeyUpdate answering the client's request went out and no data since: it answers any
    /// further request too (RFC 8446 §4.6.3 wants one before our next application data), so a
    /// client asking over and over gets one, not a queue of them.
    answered: bool,
}

impl ShuckRecords {
    /// Whether [`ShuckRecords::take_over`] can take this connection: TLS 1.3, handshake done, one of
    /// the AEADs sealed here.
    pub(crate) fn can_take_over(conn: &CommonState) -> bool {
        conn.protocol_version() == Some(ProtocolVersion::TLSv1_3)
            && !conn.is_handshaking()
            && conn
                .negotiated_cipher_suite()
                .and_then(|s| algorithm_of(s.suite()))
                .is_some()
    }

    /// Takes the keys over from rustls (the config must allow secret extraction; nothing may be
    /// left for rustls to send). Check [`ShuckRecords::can_take_over`] first: on error the
    /// connection is lost.
    pub(crate) fn take_over(conn: UnbufferedServerConnection) -> Result<ShuckRecords, Error> {
        let (secrets, kernel) = conn.dangerous_into_kernel_connection()?;
        let suite = kernel.negotiated_cipher_suite();
        let algorithm = algorithm_of(suite.suite())
            .ok_or_else(|| Error::General("no record protection for this cipher suite".into()))?;
        let tx_limit = match suite {
            SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
            SupportedCipherSuite::Tls12(_) => 0,
        };
        Ok(ShuckRecords {
            kernel,
            tx: Keys::new(algorithm, secrets.tx)?,
            rx: Keys::new(algorithm, secrets.rx)?,
            tx_limit,
            key_updates_allowed: MAX_RECORDS_WITHOUT_DATA,
            warnings_allowed: MAX_WARNINGS,
            empty_in_a_row: 0,
            answered: false,
            fragment: Fragment::default(),
        })
    }

    /// Drops the opening AEAD context, and the sealing one with `sealing`, until bytes move
    /// again (the stream is about to wait).
    pub(crate) fn rest(&mut self, sealing: bool) {
        self.rx.ready = None;
        if sealing {
            self.tx.ready = None;
        }
    }

    /// Opens the record at the front of `received` in place. A wrong type or version is
    /// refused as soon as its bytes are there, as rustls does, not after the whole header.
    pub(crate) fn open(&mut self, received: &mut [u8]) -> Result<Opened, RecordError> {
        if let Some(&typ) = received.first().filter(|&&t| t != OUTER_TYPE) {
            return Err(RecordError::unexpected(Error::InappropriateMessage {
                expect_types: vec![ContentType::ApplicationData],
                got_type: ContentType::from(typ),
            }));
        }
        if received.get(1..3).is_some_and(|version| version[0] != 3) {
            return Err(RecordError::new(
                AlertDescription::DecodeError,
                InvalidMessage::UnknownProtocolVersion,
            ));
        }
        let Some(header) = received.get(..HEADER_LEN) else {
            return Ok(Opened::Incomplete);
        };
        let body_len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if body_len > MAX_CIPHERTEXT {
            return Err(RecordError::new(
                AlertDescription::RecordOverflow,
                InvalidMessage::MessageTooLarge,
            ));
        }
        let len = HEADER_LEN + body_len;
        if received.len() < len {
            return Ok(Opened::Incomplete);
        }
        let (header, body) = received[..len].split_at_mut(HEADER_LEN);
        let plain_len = self.open_body(header, body)?;
        let content = self.content(&mut body[..plain_len])?;
        let content = match content {
            Content::Data { start, end } => Content::Data {
                start: start + HEADER_LEN,
                end: end + HEADER_LEN,
            },
            other => other,
        };
        Ok(Opened::Record { len, content })
    }

    /// Decrypts `body` in place; the plaintext's length, content type and padding included.
    fn open_body(&mut self, header: &[u8], body: &mut [u8]) -> Result<usize, RecordError> {
        let bad_mac = |_| RecordError::new(AlertDescription::BadRecordMac, Error::DecryptError);
        let nonce = self.rx.next_nonce().map_err(bad_mac)?;
        let aead = self.rx.aead().map_err(bad_mac)?;
        let plain = aead
            .open_in_place(nonce, Aad::from(header), body)
            .map_err(|_| bad_mac(Error::DecryptError))?;
        Ok(plain.len())
    }

    /// What an opened record's plaintext (content type and padding still behind it) holds.
    fn content(&mut self, plain: &mut [u8]) -> Result<Content, RecordError> {
        // Content, its type and padding: at most 2^14 + 1 bytes (RFC 8446 §5.4).
        if plain.len() > MAX_PLAINTEXT + 1 {
            return Err(RecordError::new(
                AlertDescription::RecordOverflow,
                Error::PeerSentOversizedRecord,
            ));
        }
        // The content type is the last byte that is not zero padding: behind at most 2^14 bytes
        // of content, since the whole is at most 2^14 + 1.
        let Some(type_at) = plain.iter().rposition(|&b| b != 0) else {
            return Err(RecordError::unexpected(
                PeerMisbehaved::IllegalTlsInnerPlaintext,
            ));
        };
        let payload = &plain[..type_at];
        match ContentType::from(plain[type_at]) {
            ContentType::ApplicationData if !payload.is_empty() && self.fragment.len > 0 => Err(
                RecordError::unexpected(PeerMisbehaved::MessageInterleavedWithHandshakeMessage),
            ),
            ContentType::ApplicationData if !payload.is_empty() => {
                self.data_arrived();
                Ok(Content::Data {
                    start: 0,
                    end: type_at,
                })
            }
            typ => self.control(typ, payload),
        }
    }

    /// A record the kernel opened (kTLS) that is not application data. The kernel takes a
    /// record starting with a KeyUpdate's type for a whole KeyUpdate and waits for new keys
    /// after it, so a KeyUpdate split over records cannot be joined there: refused.
    pub(crate) fn control_from_kernel(
        &mut self,
        typ: ContentType,
        payload: &[u8],
    ) -> Result<Content, RecordError> {
        if typ == ContentType::Handshake && payload.len() < 5 {
            return Err(RecordError::unexpected(
                PeerMisbehaved::KeyEpochWithPendingFragment,
            ));
        }
        self.control(typ, payload)
    }

    /// Whether part of a KeyUpdate waits for the rest (no hand-over to the kernel meanwhile).
    pub(crate) fn holds_fragment(&self) -> bool {
        self.fragment.len > 0
    }

    /// Application data arrived: the limits on records without any start again.
    pub(crate) fn data_arrived(&mut self) {
        self.empty_in_a_row = 0;
        self.key_updates_allowed = MAX_RECORDS_WITHOUT_DATA;
    }

    /// A record that brings the reader no data, by its content type: an empty one, an alert, a
    /// KeyUpdate. Also what kTLS hands over (`tls::stream::ktls`), where the kernel has opened it.
    pub(crate) fn control(
        &mut self,
        typ: ContentType,
        payload: &[u8],
    ) -> Result<Content, RecordError> {
        if self.fragment.len > 0 && typ != ContentType::Handshake {
            return Err(RecordError::unexpected(
                PeerMisbehaved::MessageInterleavedWithHandshakeMessage,
            ));
        }
        self.count_empty(payload.is_empty())?;
        match typ {
            ContentType::ApplicationData if payload.is_empty() => Ok(Content::Nothing),
            ContentType::ApplicationData => Err(RecordError::internal(Error::General(
                "application data where a control record was expected".into(),
            ))),
            ContentType::Alert => self.alert(payload),
            ContentType::Handshake => self.handshake(payload),
            other => Err(RecordError::unexpected(Error::InappropriateMessage {
                expect_types: vec![ContentType::ApplicationData, ContentType::Handshake],
                got_type: other,
            })),
        }
    }

    /// The length a KeyUpdate's header declares, from the held fragment and `payload`, when its
    /// four bytes are there.
    fn declared_len(&self, payload: &[u8]) -> Option<u32> {
        let held = &self.fragment.bytes[..usize::from(self.fragment.len)];
        let mut header = held.iter().chain(payload).skip(1).take(3).copied();
        let (a, b, c) = (header.next()?, header.next()?, header.next()?);
        Some(u32::from_be_bytes([0, a, b, c]))
    }

    /// Counts the records in a row that hold nothing at all (empty after their content type
    /// and padding), as rustls does: any record with a payload ends the run.
    fn count_empty(&mut self, empty: bool) -> Result<(), RecordError> {
        if !empty {
            self.empty_in_a_row = 0;
            return Ok(());
        }
        self.empty_in_a_row = self.empty_in_a_row.saturating_add(1);
        if self.empty_in_a_row > MAX_RECORDS_WITHOUT_DATA {
            return Err(RecordError::unexpected(
                PeerMisbehaved::TooManyEmptyFragments,
            ));
        }
        Ok(())
    }

    fn alert(&mut self, payload: &[u8]) -> Result<Content, RecordError> {
        let &[level, description] = payload else {
            // The error rustls gives for each.
            let error = match payload.len() {
                0 => InvalidMessage::MissingData("AlertLevel"),
                1 => InvalidMessage::MissingData("AlertDescription"),
                _ => InvalidMessage::TrailingData("AlertMessagePayload"),
            };
            return Err(RecordError::new(AlertDescription::DecodeError, error));
        };
        let description = AlertDescription::from(description);
        match (level, description) {
            (1 | 2, AlertDescription::CloseNotify) => Ok(Content::CloseNotify),
            (1, d) => {
                self.warnings_allowed = self.warnings_allowed.checked_sub(1).ok_or_else(|| {
                    RecordError::unexpected(PeerMisbehaved::TooManyWarningAlertsReceived)
                })?;
                // TLS 1.3 outlaws warnings except this one, which some clients send for
                // nothing.
                if d == AlertDescription::UserCanceled {
                    Ok(Content::Nothing)
                } else {
                    Err(RecordError::new(
                        AlertDescription::DecodeError,
                        Error::AlertReceived(d),
                    ))
                }
            }
            (2, d) => Err(RecordError {
                error: Error::AlertReceived(d),
                alert: None,
            }),
            (_, d) => Err(RecordError::new(
                AlertDescription::IllegalParameter,
                Error::AlertReceived(d),
            )),
        }
    }

    /// Handshake messages after the handshake: a client may send only KeyUpdate, and it must
    /// end its record (the keys change behind it, RFC 8446 §5.1). It may come split over
    /// records with nothing between them (§5.1): the first bytes wait in `fragment`. A KeyUpdate
    /// whose length is not 1 is `decode_error` (§6), another message `unexpected_message`.
    fn handshake(&mut self, payload: &[u8]) -> Result<Content, RecordError> {
        const MESSAGE: usize = 5;
        if payload.is_empty() {
            return Err(RecordError::unexpected(InvalidMessage::InvalidEmptyPayload));
        }
        let held = usize::from(self.fragment.len);
        if held + payload.len() > MESSAGE {
            let typ = self.fragment.bytes[..held].iter().chain(payload).next();
            return Err(match typ.copied().map(HandshakeType::from) {
                Some(HandshakeType::KeyUpdate) if self.declared_len(payload) == Some(1) => {
                    RecordError::unexpected(PeerMisbehaved::KeyEpochWithPendingFragment)
                }
                Some(HandshakeType::KeyUpdate) => RecordError::new(
                    AlertDescription::DecodeError,
                    InvalidMessage::InvalidKeyUpdate,
                ),
                got => RecordError::unexpected(Error::InappropriateHandshakeMessage {
                    expect_types: vec![HandshakeType::KeyUpdate],
                    got_type: got.unwrap_or(HandshakeType::Unknown(0)),
                }),
            });
        }
        let mut message = [0u8; MESSAGE];
        message[..held].copy_from_slice(&self.fragment.bytes[..held]);
        message[held..held + payload.len()].copy_from_slice(payload);
        let total = held + payload.len();
        if HandshakeType::from(message[0]) != HandshakeType::KeyUpdate {
            return Err(RecordError::unexpected(
                Error::InappropriateHandshakeMessage {
                    expect_types: vec![HandshakeType::KeyUpdate],
                    got_type: HandshakeType::from(message[0]),
                },
            ));
        }
        if total >= 4 && message[1..4] != [0, 0, 1] {
            return Err(RecordError::new(
                AlertDescription::DecodeError,
                InvalidMessage::InvalidKeyUpdate,
            ));
        }
        if total < MESSAGE {
            // `total` is at most 4 here.
            self.fragment.bytes[..total].copy_from_slice(&message[..total]);
            self.fragment.len = total as u8;
            return Ok(Content::Nothing);
        }
        self.fragment.len = 0;
        // Counted before its request is looked at, as rustls does.
        self.key_updates_allowed = self
            .key_updates_allowed
            .checked_sub(1)
            .ok_or_else(|| RecordError::unexpected(PeerMisbehaved::TooManyKeyUpdateRequests))?;
        let request = message[4];
        if request > 1 {
            return Err(RecordError::new(
                AlertDescription::IllegalParameter,
                InvalidMessage::InvalidKeyUpdate,
            ));
        }
        let secrets = self
            .kernel
            .update_rx_secret()
            .map_err(RecordError::internal)?;
        self.rx = Keys::new(self.rx.algorithm, secrets).map_err(RecordError::internal)?;
        Ok(if request == 1 {
            Content::KeyUpdateRequested
        } else {
            Content::Nothing
        })
    }

    /// Seals `plaintext` (at most [`MAX_PLAINTEXT`] bytes) as application data into `out`,
    /// which has room for it and [`MAX_SEAL_OVERHEAD`]; a KeyUpdate goes first when our keys
    /// are due for one. The bytes written.
    pub(crate) fn seal_data(&mut self, plaintext: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        self.answered = false;
        let mut n = 0;
        if self.tx.seq >= self.tx_limit {
            n = self.update_keys(0, out)?;
        }
        Ok(n + self.seal(ContentType::ApplicationData, plaintext, &mut out[n..])?)
    }

    /// Our KeyUpdate, answering the client's request, into `out` (room: [`OVERHEAD`] + 5); none
    /// (0 bytes) when one already answers it: sent since our last data.
    pub(crate) fn answer_key_update(&mut self, out: &mut [u8]) -> Result<usize, Error> {
        if self.answered {
            return Ok(0);
        }
        let n = self.update_keys(0, out)?;
        self.answered = true;
        Ok(n)
    }

    /// An alert into `out` (room: [`OVERHEAD`] + 2): close_notify, or a fatal one.
    pub(crate) fn seal_alert(
        &mut self,
        description: AlertDescription,
        out: &mut [u8],
    ) -> Result<usize, Error> {
        let level = if description == AlertDescription::CloseNotify {
            1
        } else {
            2
        };
        self.seal(ContentType::Alert, &[level, u8::from(description)], out)
    }

    /// Our keys move on, after our KeyUpdate went out (sealed here, or by the kernel: kTLS).
    pub(crate) fn next_tx_keys(&mut self) -> Result<(), Error> {
        let secrets = self.kernel.update_tx_secret()?;
        self.tx = Keys::new(self.tx.algorithm, secrets)?;
        Ok(())
    }

    /// Zeroes the key bytes of both directions once the kernel has its copies (kTLS); the
    /// secrets a KeyUpdate derives new ones from stay.
    pub(crate) fn wipe_keys(&mut self) {
        for keys in [&mut self.tx, &mut self.rx] {
            keys.key.zeroize();
            keys.iv.zeroize();
            keys.ready = None;
        }
    }

    /// Records sealed with our keys before they must be updated (the cipher's confidentiality
    /// limit, as rustls keeps it).
    pub(crate) fn tx_limit(&self) -> u64 {
        self.tx_limit
    }

    /// One direction's keys as the kernel takes them (`tls::stream::ktls`).
    pub(crate) fn key_view(&self, direction: Direction) -> KeyView<'_> {
        let keys = match direction {
            Direction::Tx => &self.tx,
            Direction::Rx => &self.rx,
        };
        let cipher = if keys.algorithm == &AES_128_GCM {
            Cipher::Aes128Gcm
        } else if keys.algorithm == &AES_256_GCM {
            Cipher::Aes256Gcm
        } else {
            Cipher::Chacha20Poly1305
        };
        KeyView {
            cipher,
            key: keys.key_bytes(),
            iv: &keys.iv,
            seq: keys.seq,
        }
    }

    /// A KeyUpdate (`request`: 1 asks the client for its own) sealed with the current keys,
    /// then our keys move on.
    fn update_keys(&mut self, request: u8, out: &mut [u8]) -> Result<usize, Error> {
        let message = [u8::from(HandshakeType::KeyUpdate), 0, 0, 1, request];
        let n = self.seal(ContentType::Handshake, &message, out)?;
        self.next_tx_keys()?;
        Ok(n)
    }

    fn seal(&mut self, typ: ContentType, plaintext: &[u8], out: &mut [u8]) -> Result<usize, Error> {
        let body_len = plaintext.len() + 1 + TAG_LEN;
        let len = HEADER_LEN + body_len;
        if plaintext.len() > MAX_PLAINTEXT || out.len() < len {
            return Err(Error::General("no room to seal the record".into()));
        }
        let (header, rest) = out[..len].split_at_mut(HEADER_LEN);
        header[0] = OUTER_TYPE;
        header[1..3].copy_from_slice(&OUTER_VERSION);
        header[3..5].copy_from_slice(&(body_len as u16).to_be_bytes());
        let (inner, tag_out) = rest.split_at_mut(plaintext.len() + 1);
        inner[..plaintext.len()].copy_from_slice(plaintext);
        inner[plaintext.len()] = u8::from(typ);
        let nonce = self.tx.next_nonce()?;
        let tag = self
            .tx
            .aead()?
            .seal_in_place_separate_tag(nonce, Aad::from(&*header), inner)
            .map_err(|_| Error::EncryptError)?;
        tag_out.copy_from_slice(tag.as_ref());
        Ok(len)
    }
}

/// A direction of the connection's records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// Ours, to the client.
    Tx,
    /// The client's.
    Rx,
}

/// The three AEADs of TLS 1.3 sealed here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

/// One direction's keys, borrowed: the cipher, key, IV and next record's sequence number.
pub(crate) struct KeyView<'a> {
    pub(crate) cipher: Cipher,
    pub(crate) key: &'a [u8],
    pub(crate) iv: &'a [u8; NONCE_LEN],
    pub(crate) seq: u64,
}

/// The AEAD for a TLS 1.3 suite sealed here.
fn algorithm_of(suite: CipherSuite) -> Option<&'static Algorithm> {
    match suite {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => Some(&AES_128_GCM),
        CipherSuite::TLS13_AES_256_GCM_SHA384 => Some(&AES_256_GCM),
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => Some(&CHACHA20_POLY1305),
        _ => None,
    }
}

/// shuck's record layer against rustls' on the same bytes (the `records` fuzz target).
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) mod differential;
#[cfg(test)]
mod tests;
