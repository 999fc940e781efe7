//! Relay aborts as a real HTTP client sees them, through the `shuck` binary. The byte-level relay
//! tests (payloads, half-close, PROXY headers, resets, idle timeout) run the engine in-process:
//! crates/shuck-proxy/tests/relay.rs.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use shuck_test_support::clients::curl_at;
use shuck_test_support::configs::{Config, Frontend};
use shuck_test_support::pki::{Key, Pki};
use shuck_test_support::process::Shuck;

/// A backend that breaks off mid-answer with a reset must not look like a finished answer to
/// curl, which accepts a TCP close without close_notify as an end: shuck resets the client
/// connection too.
#[test]
fn curl_reports_an_answer_cut_by_a_backend_reset_as_a_failure() {
    let pki = Pki::new();
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let backend = l.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Len");
            socket2::SockRef::from(&s)
                .set_linger(Some(Duration::ZERO))
                .expect("linger");
            drop(s);
        }
    });
    let cert = pki.leaf("relay.pem", "relay", &["relay.test"], Key::EcdsaP256);
    let shuck = Shuck::start(
        &Config::new()
            .frontend(Frontend::new().backend(backend).certificates(&[cert]))
            .to_string(),
    );
    let out = curl_at(&pki, shuck.addr(), "relay.test", "/", &[]);
    assert!(
        !out.status.success(),
        "curl reported success for a cut answer: {:?} {:?}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
