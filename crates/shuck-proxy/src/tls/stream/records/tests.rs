//! `ShuckRecords` against a rustls client in memory: the record layer's rules, each direction.

use super::*;
use rustls::client::ClientConnection;
use rustls::pki_types::ServerName;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::io::{Read, Write};
use std::sync::Arc;

#[derive(Debug)]
struct One(Arc<CertifiedKey>);
impl ResolvesServerCert for One {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// A rustls client and a server connection that finished a TLS 1.3 handshake in memory
/// with `suite`, the server's keys taken over.
fn pair(suite: CipherSuite) -> (ClientConnection, ShuckRecords) {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let loaded = crate::tls::certs::self_signed(&provider).expect("certificate");
    let certified = loaded.certified.clone();
    let mut server = ServerConfig::builder_with_provider(Arc::new(provider.clone()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(One(certified.clone())));
    server.enable_secret_extraction = true;
    let mut roots = RootCertStore::empty();
    roots.add(certified.cert[0].clone()).expect("root");
    let mut client_provider = provider;
    client_provider.cipher_suites.retain(|s| s.suite() == suite);
    let mut client = ClientConfig::builder_with_provider(Arc::new(client_provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // For `Crafter`: records a rustls client never sends, sealed with its keys.
    client.enable_secret_extraction = true;
    let name = ServerName::try_from("localhost").expect("name");
    let mut client = ClientConnection::new(Arc::new(client), name).expect("client");
    let mut server = UnbufferedServerConnection::new(Arc::new(server)).expect("server connection");
    let mut to_server = Vec::new();
    for _ in 0..10 {
        client.write_tls(&mut to_server).expect("client flight");
        let mut to_client = Vec::new();
        let done = differential::pair::serve(&mut server, &mut to_server, &mut to_client);
        client.read_tls(&mut &to_client[..]).expect("read");
        client.process_new_packets().expect("client handshake");
        if done && !client.is_handshaking() {
            assert!(to_server.is_empty());
            assert!(ShuckRecords::can_take_over(&server));
            return (client, ShuckRecords::take_over(server).expect("take over"));
        }
    }
    panic!("no handshake");
}

/// Everything in `bytes` opened: the application data, and what else came.
fn open_all(
    records: &mut ShuckRecords,
    bytes: &mut Vec<u8>,
) -> Result<(Vec<u8>, Vec<Content>), Error> {
    let (mut data, mut other) = (Vec::new(), Vec::new());
    loop {
        match records.open(bytes).map_err(|e| e.error)? {
            Opened::Incomplete => return Ok((data, other)),
            Opened::Record { len, content } => {
                match content {
                    Content::Data { start, end } => data.extend_from_slice(&bytes[start..end]),
                    c => other.push(c),
                }
                bytes.drain(..len);
            }
        }
    }
}

fn client_sends(client: &mut ClientConnection, data: &[u8]) -> Vec<u8> {
    client.writer().write_all(data).expect("client write");
    let mut wire = Vec::new();
    client.write_tls(&mut wire).expect("client records");
    wire
}

fn client_gets(client: &mut ClientConnection, wire: &[u8]) -> Result<Vec<u8>, Error> {
    let mut wire = wire;
    let mut got = Vec::new();
    while !wire.is_empty() {
        client.read_tls(&mut wire).expect("read");
        client.process_new_packets()?;
        match client.reader().read_to_end(&mut got) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("client read: {e}"),
        }
    }
    Ok(got)
}

fn seal_all(records: &mut ShuckRecords, data: &[u8]) -> Vec<u8> {
    let mut wire = Vec::new();
    for chunk in data.chunks(MAX_PLAINTEXT) {
        let mut out = vec![0; chunk.len() + MAX_SEAL_OVERHEAD];
        let n = records.seal_data(chunk, &mut out).expect("seal");
        wire.extend_from_slice(&out[..n]);
    }
    wire
}

#[test]
fn data_goes_both_ways_with_each_suite_and_across_rests() {
    for suite in [
        CipherSuite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    ] {
        let (mut client, mut records) = pair(suite);
        let up: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        let mut wire = client_sends(&mut client, &up);
        let (got, other) = open_all(&mut records, &mut wire).expect("open");
        assert_eq!(got, up, "{suite:?}: upload");
        assert!(other.is_empty());
        records.rest(true);
        let down: Vec<u8> = (0..70_000u32).map(|i| (i % 241) as u8).collect();
        let wire = seal_all(&mut records, &down);
        records.rest(true);
        let more = seal_all(&mut records, b"after a rest");
        let mut got = client_gets(&mut client, &wire).expect("client opens");
        got.extend(client_gets(&mut client, &more).expect("client opens"));
        assert_eq!(got[..down.len()], down[..], "{suite:?}: download");
        assert_eq!(&got[down.len()..], b"after a rest");
    }
}

#[test]
fn a_key_update_asking_for_ours_is_answered_and_both_sides_move_on() {
    let (mut client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    client.refresh_traffic_keys().expect("key update");
    let mut wire = client_sends(&mut client, b"under new keys");
    let (got, other) = open_all(&mut records, &mut wire).expect("open");
    assert_eq!(got, b"under new keys");
    assert_eq!(other, [Content::KeyUpdateRequested]);
    let mut answer = vec![0; OVERHEAD + 5];
    let n = records.answer_key_update(&mut answer).expect("answer");
    let mut down = answer[..n].to_vec();
    down.extend(seal_all(&mut records, b"ours moved too"));
    // The client opens this only if it took our KeyUpdate: the data is under our new keys.
    assert_eq!(
        client_gets(&mut client, &down).expect("client"),
        b"ours moved too"
    );
    assert_eq!(records.tx.seq, 1);
}

/// A client that sends a byte and a KeyUpdate asking for ours, over and over, and reads
/// nothing: one answer covers every request until we send data again (RFC 8446 §4.6.3 asks for
/// one before our next application data, as rustls does), so the send queue cannot grow by an
/// answer per request. After our data the next request is answered again, and the client
/// follows.
#[test]
fn records_coalesce_key_update_answers_until_our_next_data() {
    let (mut client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    let mut wire = Vec::new();
    for i in 0..40u8 {
        wire.extend(client_sends(&mut client, &[i]));
        client.refresh_traffic_keys().expect("key update");
    }
    wire.extend(client_sends(&mut client, b"!"));
    let (got, other) = open_all(&mut records, &mut wire).expect("open");
    assert_eq!(got.len(), 41);
    assert_eq!(other.len(), 40);
    let mut down = Vec::new();
    for c in other {
        assert_eq!(c, Content::KeyUpdateRequested);
        let mut answer = vec![0; OVERHEAD + 5];
        let n = records.answer_key_update(&mut answer).expect("answer");
        down.extend_from_slice(&answer[..n]);
    }
    assert_eq!(down.len(), OVERHEAD + 5, "one answer for 40 requests");
    down.extend(seal_all(&mut records, b"first"));
    client.refresh_traffic_keys().expect("key update");
    let mut wire = client_sends(&mut client, b"again");
    let (_, other) = open_all(&mut records, &mut wire).expect("open");
    assert_eq!(other, [Content::KeyUpdateRequested]);
    let mut answer = vec![0; OVERHEAD + 5];
    let n = records.answer_key_update(&mut answer).expect("answer");
    assert_eq!(n, OVERHEAD + 5, "data went out since: answered again");
    down.extend_from_slice(&answer[..n]);
    down.extend(seal_all(&mut records, b"second"));
    assert_eq!(
        client_gets(&mut client, &down).expect("client"),
        b"firstsecond"
    );
}

#[test]
fn our_keys_are_updated_before_the_confidentiality_limit() {
    let (mut client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    records.tx_limit = records.tx.seq + 3;
    let mut wire = Vec::new();
    for i in 0..10u8 {
        wire.extend(seal_all(&mut records, &[i; 100]));
    }
    assert!(
        records.tx.seq < 4,
        "the sequence started again after an update"
    );
    let got = client_gets(&mut client, &wire).expect("the client follows our updates");
    let want: Vec<u8> = (0..10u8).flat_map(|i| [i; 100]).collect();
    assert_eq!(got, want);
}

#[test]
fn a_tampered_record_fails_with_bad_record_mac() {
    let (mut client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    let mut wire = client_sends(&mut client, b"hello");
    let last = wire.len() - 1;
    wire[last] ^= 1;
    let e = records.open(&mut wire).expect_err("tampered");
    assert_eq!(e.alert, Some(AlertDescription::BadRecordMac));
    assert!(matches!(e.error, Error::DecryptError));
}

#[test]
fn close_notify_ends_and_other_alerts_fail() {
    let (mut client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    client.send_close_notify();
    let mut wire = Vec::new();
    client.write_tls(&mut wire).expect("records");
    let (_, other) = open_all(&mut records, &mut wire).expect("open");
    assert_eq!(other, [Content::CloseNotify]);

    let mut alert = vec![0; OVERHEAD + 2];
    let (mut client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    let n = records
        .seal_alert(AlertDescription::InternalError, &mut alert)
        .expect("seal");
    let e = client_gets(&mut client, &alert[..n]).expect_err("fatal alert");
    assert_eq!(e, Error::AlertReceived(AlertDescription::InternalError));
}

#[test]
fn a_record_over_the_limit_and_a_wrong_outer_type_are_refused() {
    let (_client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    let mut big = vec![23, 3, 3, 0x41, 0x01];
    big.resize(5 + 0x4101, 0);
    let e = records.open(&mut big).expect_err("too large");
    assert_eq!(e.alert, Some(AlertDescription::RecordOverflow));
    let mut handshake = vec![22, 3, 3, 0, 4, 1, 0, 0, 0];
    let e = records
        .open(&mut handshake)
        .expect_err("plaintext handshake");
    assert_eq!(e.alert, Some(AlertDescription::UnexpectedMessage));
    let mut partial = vec![23, 3, 3, 0, 40, 1, 2, 3];
    assert_eq!(
        records.open(&mut partial).expect("partial"),
        Opened::Incomplete
    );
}

#[test]
fn key_updates_without_data_between_them_are_bounded() {
    let (mut client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    let mut wire = Vec::new();
    for _ in 0..MAX_RECORDS_WITHOUT_DATA {
        client.refresh_traffic_keys().expect("key update");
        client.write_tls(&mut wire).expect("records");
    }
    let (_, other) = open_all(&mut records, &mut wire).expect("32 are allowed");
    assert_eq!(other.len(), usize::from(MAX_RECORDS_WITHOUT_DATA));
    // Data resets the allowance; one more beyond it without data is refused.
    let mut wire = client_sends(&mut client, b"data");
    open_all(&mut records, &mut wire).expect("data");
    for _ in 0..=MAX_RECORDS_WITHOUT_DATA {
        client.refresh_traffic_keys().expect("key update");
        client.write_tls(&mut wire).expect("records");
    }
    let e = open_all(&mut records, &mut wire).expect_err("33 in a row");
    assert_eq!(
        e,
        Error::PeerMisbehaved(PeerMisbehaved::TooManyKeyUpdateRequests)
    );
}

/// Records sealed with the client's keys that a rustls client never sends: any inner plaintext
/// (content type, padding, fragments, bad lengths), for the branches a real client never
/// reaches.
struct Crafter {
    key: LessSafeKey,
    iv: [u8; NONCE_LEN],
    seq: u64,
}

impl Crafter {
    /// Takes the client's sending keys (the client is done with).
    fn from(client: ClientConnection) -> Crafter {
        let secrets = client.dangerous_extract_secrets().expect("secrets");
        let (seq, secrets) = secrets.tx;
        let ConnectionTrafficSecrets::Aes128Gcm { key, iv } = secrets else {
            panic!("the tests' pair uses AES-128-GCM");
        };
        let unbound = UnboundKey::new(&AES_128_GCM, key.as_ref()).expect("key");
        Crafter {
            key: LessSafeKey::new(unbound),
            iv: iv.as_ref().try_into().expect("iv"),
            seq,
        }
    }

    /// A record whose inner plaintext is `inner`, as it is (content, type byte and padding are
    /// the caller's).
    fn record(&mut self, inner: &[u8]) -> Vec<u8> {
        let mut nonce = self.iv;
        for (n, s) in nonce[NONCE_LEN - 8..]
            .iter_mut()
            .zip(self.seq.to_be_bytes())
        {
            *n ^= s;
        }
        self.seq = self.seq.wrapping_add(1);
        let len = u16::try_from(inner.len() + TAG_LEN).expect("length");
        let header = [OUTER_TYPE, 3, 3, (len >> 8) as u8, len as u8];
        let mut body = inner.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(header),
                &mut body,
            )
            .expect("seal");
        [&header[..], &body].concat()
    }

    /// Takes the keys `records` now expects from the client (after it opened a KeyUpdate).
    fn follow(&mut self, records: &ShuckRecords) {
        let unbound = UnboundKey::new(&AES_128_GCM, records.rx.key_bytes());
        self.key = LessSafeKey::new(unbound.expect("key"));
        self.iv = *records.rx.iv;
        self.seq = records.rx.seq;
    }

    /// `payload` of content type `typ`, with `pad` zeros of padding.
    fn seal(&mut self, typ: u8, payload: &[u8], pad: usize) -> Vec<u8> {
        let mut inner = payload.to_vec();
        inner.push(typ);
        inner.resize(inner.len() + pad, 0);
        self.record(&inner)
    }
}

const HANDSHAKE: u8 = 22;
const ALERT: u8 = 21;
const DATA: u8 = 23;

/// A fresh pair's server side and a crafter with the client's keys.
fn crafted() -> (Crafter, ShuckRecords) {
    let (client, records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    (Crafter::from(client), records)
}

/// The alert `records` answers `wire` with (it must fail).
fn refusal(records: &mut ShuckRecords, wire: &mut Vec<u8>) -> Option<AlertDescription> {
    loop {
        match records.open(wire) {
            Ok(Opened::Record { len, .. }) => {
                wire.drain(..len);
            }
            Ok(Opened::Incomplete) => panic!("everything opened: nothing was refused"),
            Err(e) => return e.alert,
        }
    }
}

#[test]
fn records_reassemble_a_key_update_split_over_records() {
    for split in [vec![2, 3], vec![1, 1, 1, 1, 1], vec![4, 1], vec![1, 4]] {
        let (mut crafter, mut records) = crafted();
        let before = records.rx.key.clone();
        let message = [24u8, 0, 0, 1, 1];
        let mut wire = Vec::new();
        let mut at = 0;
        for n in &split {
            wire.extend(crafter.seal(HANDSHAKE, &message[at..at + n], 0));
            at += n;
        }
        let (data, other) = open_all(&mut records, &mut wire).expect("reassembled");
        assert!(data.is_empty());
        let mut want: Vec<Content> = (1..split.len()).map(|_| Content::Nothing).collect();
        want.push(Content::KeyUpdateRequested);
        assert_eq!(other, want, "split {split:?}");
        assert_eq!(records.rx.seq, 0, "the client's keys moved on");
        assert_ne!(*records.rx.key, *before);
    }
}

#[test]
fn records_refuse_another_record_between_fragments() {
    let (mut crafter, mut records) = crafted();
    let mut wire = crafter.seal(HANDSHAKE, &[24, 0], 0);
    wire.extend(crafter.seal(DATA, b"between", 0));
    assert_eq!(
        refusal(&mut records, &mut wire),
        Some(AlertDescription::UnexpectedMessage)
    );
}

#[test]
fn records_answer_a_key_update_of_the_wrong_length_with_decode_error() {
    for message in [&[24u8, 0, 0, 0][..], &[24, 0, 0, 2, 1, 0], &[24, 0, 1, 0]] {
        let (mut crafter, mut records) = crafted();
        let mut wire = crafter.seal(HANDSHAKE, message, 0);
        assert_eq!(
            refusal(&mut records, &mut wire),
            Some(AlertDescription::DecodeError),
            "{message:?}"
        );
    }
}

#[test]
fn records_refuse_a_key_update_before_its_record_ends_and_other_handshake_messages() {
    for message in [
        &[24u8, 0, 0, 1, 0, 24, 0, 0, 1, 0][..],
        &[1, 0, 0, 1, 0],
        &[4],
    ] {
        let (mut crafter, mut records) = crafted();
        let mut wire = crafter.seal(HANDSHAKE, message, 0);
        assert_eq!(
            refusal(&mut records, &mut wire),
            Some(AlertDescription::UnexpectedMessage),
            "{message:?}"
        );
    }
}

#[test]
fn records_refuse_request_update_other_than_0_and_1() {
    let (mut crafter, mut records) = crafted();
    let mut wire = crafter.seal(HANDSHAKE, &[24, 0, 0, 1, 2], 0);
    assert_eq!(
        refusal(&mut records, &mut wire),
        Some(AlertDescription::IllegalParameter)
    );
}

#[test]
fn records_open_padded_records() {
    let (mut crafter, mut records) = crafted();
    let mut wire = crafter.seal(DATA, b"padded", 1000);
    wire.extend(crafter.seal(DATA, b" and not", 0));
    let max_pad = MAX_PLAINTEXT - 4;
    wire.extend(crafter.seal(DATA, b"full", max_pad));
    let (data, other) = open_all(&mut records, &mut wire).expect("open");
    assert_eq!(data, b"padded and notfull");
    assert!(other.is_empty());
    // Padding beyond the record limit is an oversized record.
    let mut wire = crafter.seal(DATA, b"x", MAX_PLAINTEXT + 1);
    assert_eq!(
        refusal(&mut records, &mut wire),
        Some(AlertDescription::RecordOverflow)
    );
}

#[test]
fn records_refuse_an_all_zero_inner_plaintext() {
    let (mut crafter, mut records) = crafted();
    let mut wire = crafter.record(&[0, 0, 0]);
    assert_eq!(
        refusal(&mut records, &mut wire),
        Some(AlertDescription::UnexpectedMessage)
    );
}

#[test]
fn records_refuse_an_inner_change_cipher_spec_and_unknown_types() {
    for typ in [20u8, 99, 24] {
        let (mut crafter, mut records) = crafted();
        let mut wire = crafter.seal(typ, &[1], 0);
        assert_eq!(
            refusal(&mut records, &mut wire),
            Some(AlertDescription::UnexpectedMessage),
            "type {typ}"
        );
    }
}

#[test]
fn records_allow_32_empty_records_in_a_row_and_refuse_the_33rd() {
    let (mut crafter, mut records) = crafted();
    let mut wire = Vec::new();
    for _ in 0..MAX_RECORDS_WITHOUT_DATA {
        wire.extend(crafter.seal(DATA, &[], 0));
    }
    let (_, other) = open_all(&mut records, &mut wire).expect("32 are allowed");
    assert_eq!(other.len(), usize::from(MAX_RECORDS_WITHOUT_DATA));
    let mut wire = crafter.seal(DATA, &[], 0);
    assert_eq!(
        refusal(&mut records, &mut wire),
        Some(AlertDescription::UnexpectedMessage)
    );
}

#[test]
fn records_take_user_canceled_as_nothing_and_refuse_other_warnings_and_levels() {
    let (mut crafter, mut records) = crafted();
    let mut wire = crafter.seal(ALERT, &[1, 90], 0);
    wire.extend(crafter.seal(DATA, b"on", 0));
    let (data, other) = open_all(&mut records, &mut wire).expect("user_canceled");
    assert_eq!(
        (data.as_slice(), other.as_slice()),
        (&b"on"[..], &[Content::Nothing][..])
    );
    for (alert, want) in [
        ([1u8, 40], Some(AlertDescription::DecodeError)),
        ([3, 0], Some(AlertDescription::IllegalParameter)),
        // The client's own fatal alert ends the connection without an answer.
        ([2, 40], None),
    ] {
        let (mut crafter, mut records) = crafted();
        let mut wire = crafter.seal(ALERT, &alert, 0);
        assert_eq!(refusal(&mut records, &mut wire), want, "{alert:?}");
    }
    let (mut crafter, mut records) = crafted();
    let mut wire = crafter.seal(ALERT, &[1], 0);
    assert_eq!(
        refusal(&mut records, &mut wire),
        Some(AlertDescription::DecodeError),
        "a one-byte alert"
    );
}

#[test]
fn records_stop_before_the_sequence_number_wraps() {
    let (mut crafter, mut records) = crafted();
    crafter.seq = u64::MAX - 1;
    records.rx.seq = u64::MAX - 1;
    let mut wire = crafter.seal(DATA, b"last", 0);
    let (data, _) = open_all(&mut records, &mut wire).expect("2^64 - 2 opens");
    assert_eq!(data, b"last");
    // 2^64 - 1 is refused, as rustls refuses it: no number would be left after it, and a
    // nonce is never used with a wrapped sequence.
    let mut wire = crafter.seal(DATA, b"wrapped", 0);
    assert!(records.open(&mut wire).is_err());
    // Ours: a KeyUpdate goes out long before (our limit), but a sequence at its end is refused.
    records.tx.seq = u64::MAX;
    let mut out = vec![0; OVERHEAD + 10 + MAX_SEAL_OVERHEAD];
    records.tx_limit = u64::MAX;
    assert!(records.seal_data(b"x", &mut out).is_err());
}

#[test]
fn records_refuse_fragments_from_the_kernel_and_interleaving_on_every_path() {
    // The kernel (kTLS) takes a record starting with a KeyUpdate's type for a whole KeyUpdate.
    let (_, mut records) = crafted();
    let e = records
        .control_from_kernel(ContentType::Handshake, &[24, 0])
        .expect_err("a fragment from the kernel");
    assert_eq!(e.alert, Some(AlertDescription::UnexpectedMessage));
    // A record the kernel hands over between fragments held from before the hand-over.
    let (_, mut records) = crafted();
    let held = records
        .control(ContentType::Handshake, &[24, 0])
        .expect("held");
    assert_eq!(held, Content::Nothing);
    assert!(records.holds_fragment(), "no hand-over to the kernel now");
    let e = records
        .control(ContentType::Alert, &[1, 0])
        .expect_err("an alert between fragments");
    assert_eq!(e.alert, Some(AlertDescription::UnexpectedMessage));
}

/// Warnings (user_canceled, the only one TLS 1.3 lets through) are limited to four per
/// connection, data or not between them, as in rustls and BoringSSL (`kMaxWarningAlerts`);
/// the fifth is refused whatever it says. Found by the differential target: shuck allowed 32
/// in a row, and data reset the count.
#[test]
fn records_allow_four_warnings_per_connection() {
    let (mut crafter, mut records) = crafted();
    let mut wire = Vec::new();
    for _ in 0..4 {
        wire.extend(crafter.seal(ALERT, &[1, 90], 0));
        wire.extend(crafter.seal(DATA, b"x", 0));
    }
    let (data, _) = open_all(&mut records, &mut wire).expect("four warnings");
    assert_eq!(data, b"xxxx");
    let mut fifth = crafter.seal(ALERT, &[1, 40], 0);
    let error = records.open(&mut fifth).expect_err("a fifth warning");
    assert_eq!(error.alert, Some(AlertDescription::UnexpectedMessage));
    assert_eq!(
        error.error,
        Error::PeerMisbehaved(PeerMisbehaved::TooManyWarningAlertsReceived)
    );
}

/// Only records that hold nothing count as empty, as in rustls: a KeyUpdate or an alert ends
/// the run (shuck counted user_canceled and KeyUpdate fragments as empty). An empty record is
/// still no data for the KeyUpdate allowance (stricter than rustls, see docs/fuzzing.md).
#[test]
fn records_count_only_records_that_hold_nothing_as_empty() {
    let (mut crafter, mut records) = crafted();
    let mut wire = Vec::new();
    for _ in 0..3 {
        for _ in 0..20 {
            wire.extend(crafter.seal(DATA, &[], 0));
        }
        wire.extend(crafter.seal(ALERT, &[1, 90], 0));
    }
    for _ in 0..20 {
        wire.extend(crafter.seal(DATA, &[], 7));
    }
    wire.extend(crafter.seal(HANDSHAKE, &[24, 0], 0));
    wire.extend(crafter.seal(HANDSHAKE, &[0, 1, 0], 0));
    let (data, other) = open_all(&mut records, &mut wire).expect("runs of 20");
    assert!(data.is_empty());
    assert_eq!(other.len(), 20 * 4 + 3 + 2);
}

/// A record of the wrong type or version is refused as soon as those bytes are there, as in
/// rustls, not after a whole header.
#[test]
fn records_refuse_a_wrong_type_or_version_from_its_first_bytes() {
    for (bytes, want) in [
        (&[22][..], AlertDescription::UnexpectedMessage),
        (&[0xff], AlertDescription::UnexpectedMessage),
        (&[23, 4, 0], AlertDescription::DecodeError),
    ] {
        let (_, mut records) = crafted();
        let mut wire = bytes.to_vec();
        let error = records.open(&mut wire).expect_err("refused");
        assert_eq!(error.alert, Some(want), "{bytes:?}");
    }
    let (_, mut records) = crafted();
    assert_eq!(
        records.open(&mut [23, 4]).expect("two bytes"),
        Opened::Incomplete
    );
}

/// The KeyUpdate allowance is spent before the request is looked at, as in rustls: the 33rd
/// is refused for being one too many, whatever its request.
#[test]
fn records_count_a_key_update_before_reading_its_request() {
    let (mut crafter, mut records) = crafted();
    for _ in 0..MAX_RECORDS_WITHOUT_DATA {
        let mut wire = crafter.seal(HANDSHAKE, &[24, 0, 0, 1, 0], 0);
        let (_, other) = open_all(&mut records, &mut wire).expect("32 are allowed");
        assert_eq!(other, [Content::Nothing]);
        crafter.follow(&records);
    }
    let mut wire = crafter.seal(HANDSHAKE, &[24, 0, 0, 1, 9], 0);
    let error = records.open(&mut wire).expect_err("a 33rd");
    assert_eq!(
        error.error,
        Error::PeerMisbehaved(PeerMisbehaved::TooManyKeyUpdateRequests)
    );
}

/// What kTLS uses of `ShuckRecords`: the keys as the kernel takes them, the limit, the wipe, and
/// the records the kernel opened (a whole KeyUpdate or an alert goes through the same rules).
#[test]
fn records_give_the_kernel_its_keys_and_take_its_records() {
    let (_, mut records) = crafted();
    assert_eq!(records.tx_limit(), 1 << 24);
    let tx = records.key_view(Direction::Tx);
    assert_eq!((tx.cipher, tx.key.len()), (Cipher::Aes128Gcm, 16));
    assert_eq!(tx.seq, records.tx.seq);
    let rx = records.key_view(Direction::Rx);
    assert_eq!((rx.cipher, rx.key.len()), (Cipher::Aes128Gcm, 16));
    assert_eq!(rx.seq, records.rx.seq);
    records.wipe_keys();
    assert!(records.key_view(Direction::Tx).key.iter().all(|&b| b == 0));
    assert_eq!(
        records
            .control_from_kernel(ContentType::Handshake, &[24, 0, 0, 1, 1])
            .expect("a whole KeyUpdate"),
        Content::KeyUpdateRequested
    );
    assert_eq!(
        records
            .control_from_kernel(ContentType::Alert, &[1, 0])
            .expect("close_notify"),
        Content::CloseNotify
    );
    // The kernel hands application data over as data, never here: our own error if it did.
    let e = records
        .control(ContentType::ApplicationData, b"data")
        .expect_err("data as a control record");
    assert_eq!(e.alert, Some(AlertDescription::InternalError));
}

/// Our close_notify is a warning-level alert the client reads as the end; a seal without room,
/// or of more than a record holds, is our error, not a panic.
#[test]
fn records_seal_close_notify_and_refuse_to_seal_without_room() {
    let (mut client, mut records) = pair(CipherSuite::TLS13_AES_128_GCM_SHA256);
    let mut out = vec![0; OVERHEAD + 2];
    let n = records
        .seal_alert(AlertDescription::CloseNotify, &mut out)
        .expect("close_notify");
    assert_eq!(out[5..n].len(), 2 + 1 + TAG_LEN);
    client_gets(&mut client, &out[..n]).expect("client reads close_notify");
    let mut buf = [0u8; 4];
    assert_eq!(client.reader().read(&mut buf).expect("end"), 0);
    let mut small = vec![0; OVERHEAD];
    assert!(records.seal_data(b"x", &mut small).is_err(), "no room");
    let big = vec![0; MAX_PLAINTEXT + 1];
    let mut out = vec![0; big.len() + MAX_SEAL_OVERHEAD];
    assert!(records.seal_data(&big, &mut out).is_err(), "over a record");
}

/// The stream asks before it takes the records over: TLS 1.3, handshake done, an AEAD sealed
/// here.
#[test]
fn records_can_take_over_a_finished_tls13_handshake_only() {
    let provider = rustls::crypto::aws_lc_rs::default_provider();
    let server = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(One(crate::tls::certs::self_signed(
            &rustls::crypto::aws_lc_rs::default_provider(),
        )
        .expect("certificate")
        .certified)));
    let fresh = UnbufferedServerConnection::new(Arc::new(server)).expect("server");
    assert!(!ShuckRecords::can_take_over(&fresh), "still handshaking");
}

/// The kernel is told each cipher by name, with its key's length; a rest that keeps the
/// sealing context still opens after it.
#[test]
fn records_name_each_cipher_for_the_kernel_and_rest_either_half() {
    for (suite, cipher, key_len) in [
        (CipherSuite::TLS13_AES_128_GCM_SHA256, Cipher::Aes128Gcm, 16),
        (CipherSuite::TLS13_AES_256_GCM_SHA384, Cipher::Aes256Gcm, 32),
        (
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            Cipher::Chacha20Poly1305,
            32,
        ),
    ] {
        let (mut client, mut records) = pair(suite);
        let view = records.key_view(Direction::Rx);
        assert_eq!(
            (view.cipher, view.key.len()),
            (cipher, key_len),
            "{suite:?}"
        );
        records.rest(false);
        assert!(records.rx.ready.is_none(), "the opening context is dropped");
        let mut wire = client_sends(&mut client, b"after a rest");
        let (got, _) = open_all(&mut records, &mut wire).expect("open");
        assert_eq!(got, b"after a rest");
    }
}

/// Every idle TLS 1.3 connection holds one, boxed: past 768 bytes it takes jemalloc's next size
/// class (896), 128 bytes more per connection (8 bytes over did, between 80a28ed and 5b9510a).
#[test]
fn shuck_records_stay_within_768_bytes() {
    let size = size_of::<ShuckRecords>();
    assert!(size <= 768, "{size} bytes");
}
