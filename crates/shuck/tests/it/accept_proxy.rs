//! accept_proxy with raw sockets and real TLS clients: bad, truncated, never-completing and
//! untrusted PROXY headers refused and counted; received TLVs passed on only from listed
//! balancers; the one-frontend flags. What the backend receives is read by a raw backend.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use shuck_test_support::clients::{curl, read_all_bounded, sum, wait_metric};
use shuck_test_support::configs::{Config, Frontend};
use shuck_test_support::pki::{connector, toml_path, Key, Pki};
use shuck_test_support::process::Shuck;
use shuck_test_support::tlv_backend::{text, tlv, walk_v2, RawBackend};

/// Sends `bytes` (and optionally closes the write side), then waits for shuck to close the
/// connection without sending anything; returns what came back.
fn refused(addr: SocketAddr, bytes: &[u8], close_write: bool) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(bytes).expect("write");
    if close_write {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    read_all_bounded(&mut s)
}

/// A file with `frontend` and a metrics endpoint.
fn with_metrics(frontend: Frontend) -> String {
    Config::new()
        .set("metrics_listen", "127.0.0.1:0")
        .frontend(frontend)
        .to_string()
}

#[test]
fn accept_proxy_refuses_bad_headers_and_counts_them() {
    let pki = Pki::new();
    let cert = pki.leaf("s.pem", "s", &["pp.test"], Key::EcdsaP256);
    let backend = RawBackend::start();
    let frontend = Frontend::new()
        .backend(backend.addr)
        .certificates(&[cert])
        .set("accept_proxy", true)
        .set("proxy_header_timeout", "1s")
        .set("proxy_protocol", "v1");
    let shuck = Shuck::start(&with_metrics(frontend));
    let a = shuck.addr();
    // A TLS client that sends no header: its ClientHello is refused on the first byte.
    let direct = curl(&pki, &shuck, "pp.test", "/", &[]);
    assert!(!direct.status.success(), "served a client without a header");
    assert!(refused(a, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false).is_empty());
    assert!(refused(a, b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", false).is_empty());
    assert!(refused(a, b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 2\r\n", false).is_empty());
    // v2 with a CRC32C TLV that does not match.
    let mut bad_crc = b"\r\n\r\n\0\r\nQUIT\n\x21\x11\x00\x13".to_vec();
    bad_crc.extend([192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb]);
    bad_crc.extend([0x03, 0, 4, 0xde, 0xad, 0xbe, 0xef]);
    assert!(refused(a, &bad_crc, false).is_empty());
    // Truncated: the peer closes mid-header.
    assert!(refused(a, &bad_crc[..20], true).is_empty());
    // Never completes: closed by proxy_header_timeout (1s), not held open.
    let started = std::time::Instant::now();
    assert!(refused(a, b"PROXY TCP4 1.2", false).is_empty());
    assert!(started.elapsed() < Duration::from_secs(15));

    // After all that, a well-formed header followed by TLS is served, and the backend sees the
    // announced client.
    let answer = tls_after_header(
        &pki,
        a,
        b"PROXY TCP4 203.0.113.9 198.51.100.7 40000 443\r\n",
        "/ok",
    );
    assert!(answer.ends_with(b"ok"), "{answer:?}");
    let got = backend.next();
    assert!(
        got.starts_with(b"PROXY TCP4 203.0.113.9 198.51.100.7 40000 443\r\nGET /ok HTTP/1.0"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );

    // A worker counts a refusal once the connection is closed: the client may see the close
    // first, so wait for the last refusal's count (the timeout) before reading them all.
    let metrics = *shuck.addrs.last().expect("metrics addr");
    let m = wait_metric(
        metrics,
        "shuck_proxy_header_errors_total",
        &["reason=\"timeout\""],
        1,
    );
    let errs = |reason: &str| {
        sum(
            &m,
            "shuck_proxy_header_errors_total",
            &[&format!("reason=\"{reason}\"")],
        )
    };
    assert_eq!(errs("not_proxy"), 2, "{m}");
    assert_eq!(errs("v1_malformed"), 2, "{m}");
    assert_eq!(errs("bad_checksum"), 1, "{m}");
    assert_eq!(errs("closed"), 1, "{m}");
    assert_eq!(errs("timeout"), 1, "{m}");
    assert_eq!(
        sum(&m, "shuck_proxy_headers_total", &["command=\"proxy\""]),
        1,
        "{m}"
    );
}

#[test]
fn accept_proxy_from_closes_peers_outside_the_list() {
    let pki = Pki::new();
    let cert = pki.leaf("s.pem", "s", &["pp.test"], Key::EcdsaP256);
    let backend = RawBackend::start();
    let frontend = Frontend::new()
        .backend(backend.addr)
        .certificates(&[cert])
        .set("accept_proxy", true)
        .set("accept_proxy_from", ["192.0.2.0/24", "2001:db8::/32"]);
    let shuck = Shuck::start(&with_metrics(frontend));
    assert!(refused(
        shuck.addr(),
        b"PROXY TCP4 203.0.113.9 198.51.100.7 40000 443\r\n",
        false
    )
    .is_empty());
    // Counted as the connection's end is recorded, a moment after the client saw the close.
    let m = wait_metric(
        *shuck.addrs.last().expect("metrics addr"),
        "shuck_proxy_header_errors_total",
        &["reason=\"untrusted_peer\""],
        1,
    );
    assert_eq!(
        sum(
            &m,
            "shuck_proxy_header_errors_total",
            &["reason=\"untrusted_peer\""]
        ),
        1,
        "{m}"
    );
    assert!(backend.got.try_recv().is_err(), "backend reached");
}

/// Sends `header`, then a TLS handshake (SNI pp.test) and an HTTP/1.0 request for `path` over the
/// same connection; returns the answer.
fn tls_after_header(pki: &Pki, addr: SocketAddr, header: &[u8], path: &str) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(header).expect("header");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.set_nonblocking(true).expect("nonblocking");
        let tcp = tokio::net::TcpStream::from_std(s).expect("tokio");
        let name = rustls::pki_types::ServerName::try_from("pp.test").expect("name");
        let mut tls = connector(pki)
            .connect(name, tcp)
            .await
            .expect("TLS after a good header");
        tls.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
            .await
            .expect("write");
        let mut v = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(20), tls.read_to_end(&mut v)).await;
        v
    })
}

/// A v2 header from 203.0.113.9:40000 to 198.51.100.7:443 carrying `tlvs` (type, value).
fn v2_with(tlvs: &[(u8, &[u8])]) -> Vec<u8> {
    let mut body = vec![203, 0, 113, 9, 198, 51, 100, 7, 0x9c, 0x40, 0x01, 0xbb];
    for (t, v) in tlvs {
        body.push(*t);
        body.extend((v.len() as u16).to_be_bytes());
        body.extend(*v);
    }
    let mut h = b"\r\n\r\n\0\r\nQUIT\n\x21\x11".to_vec();
    h.extend((body.len() as u16).to_be_bytes());
    h.extend(body);
    h
}

/// Received unique-ID and custom TLVs reach the backend only from listed load balancers, and a
/// received TLV of the client-certificate type never does (it would forge a client identity).
#[test]
fn received_tlvs_pass_on_only_from_listed_balancers_and_never_a_client_certificate() {
    let pki = Pki::new();
    let cert = pki.leaf("s.pem", "s", &["pp.test"], Key::EcdsaP256);
    let header = v2_with(&[(0x05, b"lb-42"), (0xEA, b"\x01vpc-1"), (0xE0, b"forged")]);
    for (from, passes) in [
        ("accept_proxy_from = [\"127.0.0.0/8\"]\n", true),
        ("", false),
    ] {
        let backend = RawBackend::start();
        let shuck = Shuck::start(&format!(
            "[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"{}\"\ncertificates = {}\n\
             accept_proxy = true\n{from}proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"unique_id\"]\n",
            backend.addr,
            toml_path(&cert)
        ));
        let answer = tls_after_header(&pki, shuck.addr(), &header, "/");
        assert!(answer.ends_with(b"ok"), "{answer:?}");
        let (tlvs, _) = walk_v2(&backend.next());
        assert_eq!(tlv(&tlvs, 0xE0), None, "client certificate TLV passed on");
        if passes {
            assert_eq!(text(tlv(&tlvs, 0x05)), "lb-42");
            assert_eq!(tlv(&tlvs, 0xEA), Some(&b"\x01vpc-1"[..]));
        } else {
            assert_eq!(tlv(&tlvs, 0xEA), None);
            // shuck's own unique ID instead of the peer's.
            let id = text(tlv(&tlvs, 0x05));
            assert!(id != "lb-42" && !id.is_empty(), "{id}");
        }
    }
}

/// `--accept-proxy` without a file: the demo page reports the client the header announced.
#[test]
fn accept_proxy_flag_shows_the_announced_client_on_the_demo_page() {
    let pki = Pki::new();
    let cert = pki.leaf("s.pem", "s", &["pp.test"], Key::EcdsaP256);
    let shuck = Shuck::with()
        .args(&[
            "--cert",
            cert.to_str().expect("path"),
            "--listen",
            "127.0.0.1:0",
            "--accept-proxy",
        ])
        .run();
    let page = tls_after_header(
        &pki,
        shuck.addr(),
        b"PROXY TCP4 203.0.113.9 198.51.100.7 40000 443\r\n",
        "/",
    );
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains("203.0.113.9:40000"), "{page}");
    assert!(!curl(&pki, &shuck, "pp.test", "/", &[]).status.success());
    drop(shuck);

    // --accept-proxy-from: a peer outside the list is closed before its header is read, one
    // inside is served.
    for (from, served) in [("192.0.2.0/24", false), ("127.0.0.0/8", true)] {
        let shuck = Shuck::with()
            .args(&[
                "--cert",
                cert.to_str().expect("path"),
                "--listen",
                "127.0.0.1:0",
                "--accept-proxy",
                "--accept-proxy-from",
                from,
            ])
            .run();
        let header = b"PROXY TCP4 203.0.113.9 198.51.100.7 40000 443\r\n";
        if served {
            let page = tls_after_header(&pki, shuck.addr(), header, "/");
            assert!(String::from_utf8_lossy(&page).contains("203.0.113.9:40000"));
        } else {
            assert!(refused(shuck.addr(), header, false).is_empty());
            shuck.wait_log("not in accept_proxy_from");
        }
    }
}
