//! `Records` against a rustls client in memory: the record layer's rules, each direction.

use super::*;
use rustls::client::ClientConnection;
use rustls::pki_types::ServerName;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::unbuffered::ConnectionState;
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
fn pair(suite: CipherSuite) -> (ClientConnection, Records) {
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
    let client = ClientConfig::builder_with_provider(Arc::new(client_provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("localhost").expect("name");
    let mut client = ClientConnection::new(Arc::new(client), name).expect("client");
    let mut server = UnbufferedServerConnection::new(Arc::new(server)).expect("server connection");
    let mut to_server = Vec::new();
    for _ in 0..10 {
        client.write_tls(&mut to_server).expect("client flight");
        let mut to_client = Vec::new();
        let done = serve_handshake(&mut server, &mut to_server, &mut to_client);
        client.read_tls(&mut &to_client[..]).expect("read");
        client.process_new_packets().expect("client handshake");
        if done && !client.is_handshaking() {
            assert!(to_server.is_empty());
            return (client, Records::take_over(server).expect("take over"));
        }
    }
    panic!("no handshake");
}

/// Runs the server over what it received; whether it is done with the handshake.
fn serve_handshake(
    server: &mut UnbufferedServerConnection,
    received: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> bool {
    loop {
        let status = server.process_tls_records(received);
        let discard = status.discard;
        let next = match status.state.expect("server handshake") {
            ConnectionState::EncodeTlsData(mut d) => {
                let mut buf = vec![0; 16 * 1024];
                let n = d.encode(&mut buf).expect("encode");
                out.extend_from_slice(&buf[..n]);
                None
            }
            ConnectionState::TransmitTlsData(t) => {
                t.done();
                None
            }
            ConnectionState::WriteTraffic(_) => Some(true),
            ConnectionState::BlockedHandshake => Some(false),
            _ => panic!("unexpected state"),
        };
        received.drain(..discard);
        if let Some(done) = next {
            return done;
        }
    }
}

/// Everything in `bytes` opened: the application data, and what else came.
fn open_all(records: &mut Records, bytes: &mut Vec<u8>) -> Result<(Vec<u8>, Vec<Content>), Error> {
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

fn seal_all(records: &mut Records, data: &[u8]) -> Vec<u8> {
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
