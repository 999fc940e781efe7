//! Byte-exact relay through the engine, started in-process, with a real TLS client (rustls) and
//! a real TCP backend: random payloads of 1 B, 64 KiB and 64 MiB in both directions, compared by
//! SHA-256; half-close in both directions; the PROXY header bytes; and aborts (a reset on either
//! side, an idle timeout) reaching the other side as resets.

use shuck_test_support::harness;

use harness::Running;
use rustls::pki_types::ServerName;
use sha2::{Digest, Sha256};
use shuck_test_support::pki::{client_config, connector, toml_path, Key, Pki};
use std::future::Future;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;

/// Deterministic pseudo-random bytes (xorshift64*), so both ends can derive the same payload.
fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// SHA-256 of everything `s` sends until its EOF.
async fn sha256_until_eof(s: &mut TcpStream) -> Vec<u8> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = s.read(&mut buf).await.expect("read");
        if n == 0 {
            return h.finalize().to_vec();
        }
        h.update(&buf[..n]);
    }
}

/// Backend: reads an 8-byte length, then everything up to EOF (so it answers only once the
/// client's half-close has arrived as FIN), then sends SHA-256 of what it got and `length`
/// pseudo-random bytes, and closes.
async fn sink_then_source_backend() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let want = s.read_u64().await.expect("length");
                let hash = sha256_until_eof(&mut s).await;
                s.write_all(&hash).await.expect("write hash");
                s.write_all(&payload(want, want as usize))
                    .await
                    .expect("write payload");
                s.shutdown().await.expect("shutdown");
            });
        }
    });
    addr
}

async fn exchange(conn: &TlsConnector, addr: SocketAddr, up_len: usize, down_len: usize) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let name = ServerName::try_from("relay.test").expect("name");
    let mut tls = conn.connect(name, tcp).await.expect("handshake");
    let up = payload(up_len as u64 ^ 0xABCD, up_len);
    let want_hash = Sha256::digest(&up);
    // Send and receive concurrently: neither side may need to buffer the whole payload.
    let (mut r, mut w) = tokio::io::split(tls);
    let writer = async move {
        w.write_u64(down_len as u64).await.expect("len");
        w.write_all(&up).await.expect("payload");
        w.shutdown().await.expect("half-close");
        w
    };
    let reader = async move {
        let mut got = Vec::with_capacity(down_len + 32);
        r.read_to_end(&mut got).await.expect("read");
        (r, got)
    };
    let (w, (r, got)) = tokio::join!(writer, reader);
    tls = r.unsplit(w);
    drop(tls);
    assert_eq!(
        got.len(),
        32 + down_len,
        "response length for {up_len}/{down_len}"
    );
    assert_eq!(
        &got[..32],
        want_hash.as_slice(),
        "upstream bytes differ ({up_len} B)"
    );
    let expect = payload(down_len as u64, down_len);
    assert_eq!(
        Sha256::digest(&got[32..]),
        Sha256::digest(&expect),
        "downstream bytes differ ({down_len} B)"
    );
}

/// A TLS client connected to shuck at `addr` as relay.test, handshake done.
async fn client(pki: &Pki, addr: SocketAddr) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    connector(pki)
        .connect(ServerName::try_from("relay.test").expect("name"), tcp)
        .await
        .expect("handshake")
}

fn start(pki: &Pki, backend: SocketAddr) -> Running {
    start_with(pki, backend, "")
}

/// With the frontend keys `extra` (`record_layer = "rustls"`, say).
fn start_with(pki: &Pki, backend: SocketAddr, extra: &str) -> Running {
    let cert = pki.leaf("relay.pem", "relay", &["relay.test"], Key::EcdsaP256);
    Running::start(&format!(
        "workers = 2\n[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = {}\n{extra}\n",
        toml_path(&cert)
    ))
}

/// rustls' record layer (`record_layer = "rustls"`) carries the same traffic as shuck's: bytes
/// both ways (2 MiB each way among them), a client's KeyUpdates answered, and close_notify with
/// the half-closes behind it.
const RUSTLS_RECORDS: &str = "record_layer = \"rustls\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_by_rustls_relay_byte_exact_both_ways() {
    let pki = Pki::new();
    let backend = sink_then_source_backend().await;
    let shuck = start_with(&pki, backend, RUSTLS_RECORDS);
    let conn = connector(&pki);
    for (up, down) in [(1, 1), (2 << 20, 2 << 20), (64 * 1024, 0), (0, 64 * 1024)] {
        exchange(&conn, shuck.addr(), up, down).await;
    }
    shuck.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_by_rustls_answer_key_updates_and_traffic_carries_on() {
    key_updates_are_answered(RUSTLS_RECORDS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_by_rustls_answer_a_key_update_sent_with_the_finished() {
    key_update_with_the_finished(RUSTLS_RECORDS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_by_rustls_pass_the_backends_half_close_on() {
    backend_half_close_reaches_the_client(RUSTLS_RECORDS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_are_relayed_byte_exact_both_ways() {
    let pki = Pki::new();
    let backend = sink_then_source_backend().await;
    let shuck = start(&pki, backend);
    let conn = connector(&pki);
    for (up, down) in [
        (1, 1),
        (64 * 1024, 64 * 1024),
        (64 << 20, 1),
        (1, 64 << 20),
        (0, 64 * 1024),
    ] {
        exchange(&conn, shuck.addr(), up, down).await;
    }
    shuck.assert_alive();
    assert_eq!(
        shuck.stop(),
        Ok(()),
        "a clean stop once the clients are gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_half_close_reaches_client_while_client_keeps_sending() {
    backend_half_close_reaches_the_client("").await;
}

/// The backend closes its side first (the client gets close_notify) and still reads what the
/// client sends after it.
async fn backend_half_close_reaches_the_client(extra: &str) {
    let pki = Pki::new();
    let (backend, got) = one_connection(|mut s| async move {
        s.write_all(b"early answer").await.expect("write");
        // Backend closes its write side first; it still expects the client's data.
        s.shutdown().await.expect("shutdown");
        let mut v = Vec::new();
        s.read_to_end(&mut v).await.expect("read");
        v
    })
    .await;
    let shuck = start_with(&pki, backend, extra);
    let mut tls = client(&pki, shuck.addr()).await;
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer)
        .await
        .expect("read until close_notify");
    assert_eq!(answer, b"early answer");
    tls.write_all(b"late request")
        .await
        .expect("write after server close");
    tls.shutdown().await.expect("shutdown");
    assert_eq!(got.await.expect("backend"), b"late request");
}

/// A backend for one connection: `serve` gets the accepted socket, and what it returns comes back
/// through the task's handle.
async fn one_connection<T, F>(
    serve: impl FnOnce(TcpStream) -> F + Send + 'static,
) -> (SocketAddr, JoinHandle<T>)
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let h = tokio::spawn(async move {
        let (s, _) = l.accept().await.expect("accept");
        serve(s).await
    });
    (addr, h)
}

/// A client's KeyUpdate asking for ours, between exchanges of several records each way: shuck
/// answers with its own (the client's receive sequence starts again from zero, which only a
/// KeyUpdate from the server does) and the bytes keep arriving intact under the new keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_updates_from_the_client_are_answered_and_traffic_carries_on() {
    key_updates_are_answered("").await;
}

async fn key_updates_are_answered(extra: &str) {
    let pki = Pki::new();
    let (backend, _echo) = one_connection(|s| async move {
        let (mut r, mut w) = s.into_split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    })
    .await;
    let shuck = start_with(&pki, backend, extra);
    let mut cfg = client_config(&pki);
    cfg.enable_secret_extraction = true;
    let tcp = TcpStream::connect(shuck.addr()).await.expect("connect");
    let name = ServerName::try_from("relay.test").expect("name");
    let mut tls = TlsConnector::from(std::sync::Arc::new(cfg))
        .connect(name, tcp)
        .await
        .expect("handshake");
    for round in 0..4u64 {
        let msg = payload(round + 1, 40_000);
        tls.write_all(&msg).await.expect("write");
        let mut back = vec![0u8; msg.len()];
        tls.read_exact(&mut back).await.expect("echo");
        assert!(back == msg, "round {round}: the echo differs");
        tls.get_mut().1.refresh_traffic_keys().expect("key update");
    }
    let msg = payload(99, 1000);
    tls.write_all(&msg).await.expect("write");
    let mut back = vec![0u8; msg.len()];
    tls.read_exact(&mut back)
        .await
        .expect("echo after the last update");
    assert!(back == msg);
    let (_, conn) = tls.into_inner();
    let secrets = conn.dangerous_extract_secrets().expect("secrets");
    // Since shuck's last KeyUpdate: the one echo record (had shuck never answered, every record
    // since the handshake would count: a dozen and more).
    assert!(
        secrets.rx.0 <= 2,
        "the client's receive sequence is {}: shuck did not answer its KeyUpdate",
        secrets.rx.0
    );
    shuck.assert_alive();
}

/// A client whose Finished, a KeyUpdate asking for shuck's and its first bytes leave in one
/// segment: the KeyUpdate arrives while shuck is still finishing the handshake, before its own
/// record layer takes the keys over from rustls. Its answer must reach the client ahead of the
/// echo (sealed under shuck's new keys), or the client cannot open the echo. (It failed with
/// bad_record_mac while rustls still read such records and its queued answer was lost in the
/// hand-over.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_update_sent_with_the_finished_is_answered() {
    key_update_with_the_finished("").await;
}

/// The same without session tickets: rustls then has nothing to send after the client's
/// Finished and, given the whole segment, would read on into the KeyUpdate within the call that
/// ends the handshake (it failed so until rustls was given one record at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_update_sent_with_the_finished_is_answered_without_tickets() {
    key_update_with_the_finished("session_tickets = false\nsession_cache_size = 0\n").await;
}

async fn key_update_with_the_finished(frontend_keys: &str) {
    let pki = Pki::new();
    let (backend, _echo) = one_connection(|s| async move {
        let (mut r, mut w) = s.into_split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    })
    .await;
    let shuck = start_with(&pki, backend, frontend_keys);
    let cfg = std::sync::Arc::new(client_config(&pki));
    let addr = shuck.addr();
    let echo = tokio::task::spawn_blocking(move || finished_with_key_update(addr, cfg))
        .await
        .expect("client thread");
    assert_eq!(echo, b"sent with the Finished");
    shuck.assert_alive();
}

/// The blocking client of `a_key_update_sent_with_the_finished_is_answered`: the echo it got.
fn finished_with_key_update(
    addr: SocketAddr,
    cfg: std::sync::Arc<rustls::ClientConfig>,
) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut sock = std::net::TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let name = ServerName::try_from("relay.test").expect("name");
    let mut tls = rustls::ClientConnection::new(cfg, name).expect("client");
    // Until the server's Finished is in: the client's own Finished then waits in its buffer.
    while tls.is_handshaking() {
        while tls.wants_write() {
            tls.write_tls(&mut sock).expect("write");
        }
        tls.read_tls(&mut sock).expect("read");
        tls.process_new_packets().expect("handshake");
    }
    tls.refresh_traffic_keys().expect("key update");
    tls.writer()
        .write_all(b"sent with the Finished")
        .expect("write");
    let mut wire = Vec::new();
    while tls.wants_write() {
        tls.write_tls(&mut wire).expect("encode");
    }
    sock.write_all(&wire).expect("send");
    let mut echo = Vec::new();
    while echo.len() < b"sent with the Finished".len() {
        if tls.read_tls(&mut sock).expect("read") == 0 {
            break;
        }
        tls.process_new_packets().expect("shuck's records open");
        let _ = tls.reader().read_to_end(&mut echo);
    }
    echo
}

/// A backend that returns everything it receives (PROXY header, then the client's payload).
async fn header_backend() -> (SocketAddr, JoinHandle<Vec<u8>>) {
    one_connection(|mut s| async move {
        let mut got = Vec::new();
        s.read_to_end(&mut got).await.expect("read");
        got
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_headers_carry_the_client_address() {
    let pki = Pki::new();
    let cert = pki.leaf("pp.pem", "pp", &["relay.test"], Key::EcdsaP256);
    for version in ["v1", "v2"] {
        let (backend, got) = header_backend().await;
        let shuck = Running::start(&format!(
            "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = {}\nproxy_protocol = \"{version}\"\nproxy_protocol_tlvs = []\n",
            toml_path(&cert)
        ));
        let tcp = TcpStream::connect(shuck.addr()).await.expect("connect");
        let client = tcp.local_addr().expect("client addr");
        let mut tls = connector(&pki)
            .connect(ServerName::try_from("relay.test").expect("name"), tcp)
            .await
            .expect("handshake");
        tls.write_all(b"PAYLOAD").await.expect("write");
        tls.shutdown().await.expect("shutdown");
        let got = got.await.expect("backend");
        let header = &got[..got.len() - b"PAYLOAD".len()];
        assert!(got.ends_with(b"PAYLOAD"), "{got:?}");
        let (sport, dport) = (client.port(), shuck.port());
        if version == "v1" {
            assert_eq!(
                String::from_utf8_lossy(header),
                format!("PROXY TCP4 127.0.0.1 127.0.0.1 {sport} {dport}\r\n")
            );
        } else {
            // Signature, v2 PROXY, TCP over IPv4, 12 address bytes, then the addresses (RFC-style
            // layout from the public PROXY protocol specification).
            let mut want = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x0c".to_vec();
            want.extend([127, 0, 0, 1, 127, 0, 0, 1]);
            want.extend(sport.to_be_bytes());
            want.extend(dport.to_be_bytes());
            assert_eq!(header, want.as_slice());
        }
    }
}

/// A backend that breaks off mid-answer with a reset must not look like a finished answer to the
/// client: shuck resets the client connection too (no close_notify, no FIN), so a client that
/// tolerates a missing close_notify still learns that the response is cut (curl's view of it:
/// crates/shuck/tests/it/relay.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_reset_reaches_the_client_as_a_reset() {
    let pki = Pki::new();
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Len").await;
            s.set_zero_linger().expect("linger");
            drop(s);
        }
    });
    let shuck = start(&pki, backend);
    let mut tls = client(&pki, shuck.addr()).await;
    tls.write_all(b"GET / HTTP/1.1\r\nHost: relay.test\r\n\r\n")
        .await
        .expect("request");
    let mut got = Vec::new();
    let end = tls.read_to_end(&mut got).await;
    assert_eq!(
        end.as_ref().map_err(std::io::Error::kind).err(),
        Some(std::io::ErrorKind::ConnectionReset),
        "{end:?} after {got:?}"
    );
}

/// What a `one_connection` backend that reads to the end returns: the bytes, and how it ended.
type Seen = JoinHandle<(Vec<u8>, Result<usize, std::io::ErrorKind>)>;

/// Waits (20 s at most, else panics with `late`) for the backend to see the end of its
/// connection, and asserts that the end was a reset, not an EOF that could pass for a complete
/// upload.
async fn assert_backend_saw_a_reset(seen: Seen, late: &str) {
    let (got, end) = tokio::time::timeout(std::time::Duration::from_secs(20), seen)
        .await
        .unwrap_or_else(|_| panic!("{late}"))
        .expect("backend task");
    assert_eq!(
        end.err(),
        Some(std::io::ErrorKind::ConnectionReset),
        "backend saw a clean end after {:?}",
        String::from_utf8_lossy(&got)
    );
}

/// A client that resets mid-request must not look like a finished request to the backend: the
/// backend sees a reset, not an EOF it could take for a complete half-closed upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reset_reaches_the_backend_as_a_reset() {
    let pki = Pki::new();
    let (arrived_tx, arrived) = tokio::sync::oneshot::channel();
    let (backend, seen) = one_connection(|mut s| async move {
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        // The reset must come after shuck relayed the start: a reset during the handshake would
        // only test that the backend is never contacted.
        while !got.ends_with(b"part") {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let _ = arrived_tx.send(());
        let end = s.read_to_end(&mut got).await;
        (got, end.map_err(|e| e.kind()))
    })
    .await;
    let shuck = start(&pki, backend);
    let mut tls = client(&pki, shuck.addr()).await;
    tls.write_all(b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\npart")
        .await
        .expect("request");
    tls.flush().await.expect("flush");
    tokio::time::timeout(std::time::Duration::from_secs(20), arrived)
        .await
        .expect("the request start never reached the backend")
        .expect("backend task");
    tls.get_ref().0.set_zero_linger().expect("linger");
    drop(tls);
    assert_backend_saw_a_reset(seen, "backend still waiting 20 s after the client reset").await;
}

/// A client that goes silent mid-upload and is closed by idle_timeout must not leave the backend
/// with an orderly end either: what it received could pass for a complete upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_timeout_reaches_the_backend_as_a_reset() {
    let pki = Pki::new();
    let (backend, seen) = one_connection(|mut s| async move {
        let mut got = Vec::new();
        let end = s.read_to_end(&mut got).await;
        (got, end.map_err(|e| e.kind()))
    })
    .await;
    let cert = pki.leaf("relay.pem", "relay", &["relay.test"], Key::EcdsaP256);
    let shuck = Running::start(&format!(
        "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{backend}\"\ncertificates = {}\nidle_timeout = \"1s\"\n",
        toml_path(&cert)
    ));
    let mut tls = client(&pki, shuck.addr()).await;
    tls.write_all(b"POST / HTTP/1.1\r\nContent-Length: 1000\r\n\r\npart")
        .await
        .expect("request");
    tls.flush().await.expect("flush");
    assert_backend_saw_a_reset(seen, "backend still open 20 s after a 1 s idle timeout").await;
    // The client learns of it the same way.
    let mut rest = Vec::new();
    let client_end = tls.read_to_end(&mut rest).await;
    assert_eq!(
        client_end.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::ConnectionReset)
    );
}

/// The xorshift payload of `payload`, made a chunk at a time (a GiB is never held in memory).
struct Stream {
    x: u64,
    left: usize,
    carry: Vec<u8>,
}

impl Stream {
    fn new(seed: u64, len: usize) -> Stream {
        Stream {
            x: seed | 1,
            left: len,
            carry: Vec::new(),
        }
    }

    /// The next bytes (at most 64 KiB); empty at the end.
    fn next_chunk(&mut self) -> Vec<u8> {
        let n = self.left.min(64 * 1024);
        let mut out = std::mem::take(&mut self.carry);
        while out.len() < n {
            let mut x = self.x;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            self.x = x;
            out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        self.carry = out.split_off(n);
        self.left -= n;
        out
    }

    fn digest(seed: u64, len: usize) -> Vec<u8> {
        let mut s = Stream::new(seed, len);
        let mut h = Sha256::new();
        loop {
            let c = s.next_chunk();
            if c.is_empty() {
                return h.finalize().to_vec();
            }
            h.update(&c);
        }
    }
}

/// Like `sink_then_source_backend`, streaming its answer.
async fn streaming_backend() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.expect("accept");
        let want = s.read_u64().await.expect("length");
        let hash = sha256_until_eof(&mut s).await;
        s.write_all(&hash).await.expect("write hash");
        let mut down = Stream::new(want, want as usize);
        loop {
            let c = down.next_chunk();
            if c.is_empty() {
                break;
            }
            s.write_all(&c).await.expect("write");
        }
        s.shutdown().await.expect("shutdown");
    });
    addr
}

/// A GiB each way (`SHUCK_RELAY_BYTES` to change it), both directions at once, the client's
/// half-close before the backend's answer trailer: SHA-256 equal on both sides. Long in a debug
/// build, so `.ci/run` runs it (`--ignored`) rather than every `cargo test`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "long: run by .ci/run with --ignored"]
async fn a_gibibyte_each_way_arrives_intact_with_half_close() {
    let len: usize = std::env::var("SHUCK_RELAY_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 30);
    let pki = Pki::new();
    let shuck = start(&pki, streaming_backend().await);
    let started = std::time::Instant::now();
    let (mut r, mut w) = tokio::io::split(client(&pki, shuck.addr()).await);
    // The expected answer's digest, computed meanwhile on another thread.
    let want_down = tokio::task::spawn_blocking(move || Stream::digest(len as u64, len));
    let writer = async move {
        w.write_u64(len as u64).await.expect("len");
        let mut up = Stream::new(0xF00D, len);
        let mut sent = Sha256::new();
        loop {
            let c = up.next_chunk();
            if c.is_empty() {
                break;
            }
            sent.update(&c);
            w.write_all(&c).await.expect("write");
        }
        w.shutdown().await.expect("half-close");
        sent.finalize().to_vec()
    };
    let reader = async move {
        let mut hash = [0u8; 32];
        r.read_exact(&mut hash).await.expect("trailer hash");
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0usize;
        loop {
            let n = r.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got += n;
            h.update(&buf[..n]);
        }
        (hash, got, h.finalize().to_vec())
    };
    let (sent, (hash, got, down_hash)) = tokio::join!(writer, reader);
    let secs = started.elapsed().as_secs_f64();
    println!("{len} B each way in {secs:.1} s");
    assert_eq!(hash.to_vec(), sent, "upstream bytes differ");
    assert_eq!(got, len, "downstream length");
    let want_down = want_down.await.expect("digest");
    assert_eq!(down_hash, want_down, "downstream bytes differ");
    shuck.assert_alive();
}

/// Full records gathered for one send still leave as soon as the backend has nothing more for
/// now: a backend that sends exactly four full records (64 KiB) and then waits for the client's
/// word before it goes on gets that word only if the client received all of it meanwhile.
/// Repeated, so the gathering restarts after each flush; then the rest and the close. (Either
/// flush suffices, the pump's before it waits for its reader or the relay's after each poll;
/// without both this fails after 10 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gathered_records_leave_when_the_backend_pauses() {
    const ROUND: usize = 64 * 1024;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let backend = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.expect("accept");
        for round in 0..3u64 {
            s.write_all(&payload(round + 1, ROUND))
                .await
                .expect("send a round");
            let mut word = [0u8; 2];
            s.read_exact(&mut word).await.expect("the client's word");
            assert_eq!(&word, b"ok", "round {round}");
        }
        s.write_all(b"end").await.expect("send the end");
    });
    let pki = Pki::new();
    let shuck = start(&pki, backend);
    let mut tls = client(&pki, shuck.addr()).await;
    let mut got = vec![0u8; ROUND];
    for round in 0..3u64 {
        tokio::time::timeout(std::time::Duration::from_secs(10), tls.read_exact(&mut got))
            .await
            .unwrap_or_else(|_| {
                panic!("round {round}: the 64 KiB did not arrive while the backend waited")
            })
            .expect("read a round");
        assert!(
            got == payload(round + 1, ROUND),
            "round {round}: bytes differ"
        );
        tls.write_all(b"ok").await.expect("say ok");
    }
    let mut end = Vec::new();
    tls.read_to_end(&mut end).await.expect("read the end");
    assert_eq!(end, b"end");
}
