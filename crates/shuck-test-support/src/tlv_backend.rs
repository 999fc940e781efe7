//! A raw backend for PROXY v2 tests and the tests' own reading of the header it receives
//! (independent of shuck's decoder): TLVs, SSL sub-TLVs, and the client certificate they carry.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::time::Duration;

/// A backend that keeps the bytes it receives up to the end of the HTTP request head, answers
/// 200, and sends what it received to the test.
pub struct RawBackend {
    pub addr: SocketAddr,
    pub got: mpsc::Receiver<Vec<u8>>,
}

impl RawBackend {
    pub fn start() -> RawBackend {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let (tx, got) = mpsc::channel();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let _ = s.set_read_timeout(Some(Duration::from_secs(20)));
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // The v2 signature itself holds CRLF CRLF: look for the end of the request head.
                while !request_complete(&buf) {
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok");
                if tx.send(buf).is_err() {
                    return;
                }
            }
        });
        RawBackend { addr, got }
    }

    pub fn next(&self) -> Vec<u8> {
        self.got
            .recv_timeout(Duration::from_secs(20))
            .expect("backend got no connection")
    }
}

pub fn request_complete(buf: &[u8]) -> bool {
    let Some(start) = buf
        .windows(9)
        .position(|w| w == b" HTTP/1.1" || w == b" HTTP/1.0")
    else {
        return false;
    };
    buf[start..].windows(4).any(|w| w == b"\r\n\r\n")
}

/// The test's own reading of a v2 header (independent of shuck's decoder): addresses skipped,
/// TLVs as (type, value), and the bytes after the header.
pub fn walk_v2(got: &[u8]) -> (Vec<(u8, Vec<u8>)>, Vec<u8>) {
    assert_eq!(
        &got[..12],
        b"\r\n\r\n\0\r\nQUIT\n",
        "no v2 signature: {got:02x?}"
    );
    assert_eq!(got[12], 0x21, "not v2 PROXY");
    let len = usize::from(u16::from_be_bytes([got[14], got[15]]));
    let addr_len = match got[13] {
        0x11 => 12,
        0x21 => 36,
        f => panic!("family {f:#x}"),
    };
    let mut tlvs = Vec::new();
    let mut rest = &got[16 + addr_len..16 + len];
    while !rest.is_empty() {
        let n = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        tlvs.push((rest[0], rest[3..3 + n].to_vec()));
        rest = &rest[3 + n..];
    }
    (tlvs, got[16 + len..].to_vec())
}

pub fn tlv(tlvs: &[(u8, Vec<u8>)], t: u8) -> Option<&[u8]> {
    tlvs.iter()
        .find(|(k, _)| *k == t)
        .map(|(_, v)| v.as_slice())
}

pub fn text(v: Option<&[u8]>) -> &str {
    v.map_or("<absent>", |v| std::str::from_utf8(v).expect("utf-8"))
}

pub fn first_cert_der(pem_file: &std::path::Path) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    let c = rustls::pki_types::CertificateDer::pem_file_iter(pem_file)
        .expect("read")
        .next()
        .expect("a certificate")
        .expect("pem");
    c.as_ref().to_vec()
}

/// The SSL sub-TLVs of `tlvs`' SSL TLV: (client flags, verify, [(type, value)]).
pub fn ssl_subs(tlvs: &[(u8, Vec<u8>)]) -> (u8, u32, Vec<(u8, Vec<u8>)>) {
    let ssl = tlv(tlvs, 0x20).expect("SSL TLV");
    let mut subs = Vec::new();
    let mut rest = &ssl[5..];
    while !rest.is_empty() {
        let n = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        subs.push((rest[0], rest[3..3 + n].to_vec()));
        rest = &rest[3 + n..];
    }
    let verify = u32::from_be_bytes([ssl[1], ssl[2], ssl[3], ssl[4]]);
    (ssl[0], verify, subs)
}
