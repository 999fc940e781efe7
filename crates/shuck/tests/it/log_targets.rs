//! `log_target`: journald's native protocol and RFC 5424 syslog (a local socket, UDP, TCP with
//! octet counting), each read back by a listener the test binds; a line's priority and fields
//! arrive as the target reads them.

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::Shuck;

fn config(pki: &Pki, target: &str, address: &str) -> String {
    let cert = pki.leaf("l.pem", "l", &["l.test"], Key::EcdsaP256);
    format!(
        "log_target = \"{target}\"\nlog_address = \"{address}\"\n\
         [[frontend]]\nname = \"web\"\nlisten = \"127.0.0.1:0\"\ncertificates = {}\n",
        toml_path(&cert)
    )
}

/// A client that sends plain HTTP: a handshake failure shuck warns about.
fn plain_http(shuck: &Shuck) {
    let mut s = std::net::TcpStream::connect(shuck.addr()).expect("connect");
    std::io::Write::write_all(&mut s, b"GET / HTTP/1.1\r\n\r\n").expect("write");
    let _ = shuck_test_support::clients::read_all_bounded(&mut s);
}

/// Messages from `next` until one satisfies `want` (10 s at most); all of them.
fn until(mut next: impl FnMut() -> Option<String>, want: impl Fn(&str) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while Instant::now() < deadline {
        if let Some(m) = next() {
            let done = want(&m);
            seen.push(m);
            if done {
                return seen;
            }
        }
    }
    panic!("not received within 10 s; got:\n{}", seen.join("\n---\n"));
}

#[test]
fn journald_gets_each_line_with_its_priority_and_fields() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("journal.socket");
    let rx = UnixDatagram::bind(&path).expect("bind");
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let shuck = Shuck::start(&config(&pki, "journald", path.to_str().expect("utf-8")));
    plain_http(&shuck);
    let mut buf = vec![0u8; 65536];
    let next = || {
        let n = rx.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let seen = until(next, |m| m.contains("REASON=handshake_malformed"));
    let warning = seen.last().expect("the warning");
    for field in [
        "PRIORITY=4\n",
        "SYSLOG_IDENTIFIER=shuck\n",
        "FRONTEND=web\n",
        "CLIENT=127.0.0.1:",
    ] {
        assert!(warning.contains(field), "{field:?} in:\n{warning}");
    }
    assert!(
        warning.contains("MESSAGE=TLS handshake failed"),
        "{warning}"
    );
    assert!(
        seen.iter()
            .any(|m| m.starts_with("PRIORITY=6\n") && m.contains("MESSAGE=listening")),
        "{seen:?}"
    );
}

/// `<PRI>1 TIMESTAMP HOST shuck PID - SD MSG`, and the structured data's `reason`.
fn check_syslog(message: &str) {
    let parts: Vec<&str> = message.splitn(7, ' ').collect();
    assert_eq!(parts.len(), 7, "{message}");
    assert_eq!(parts[0], "<28>1", "daemon.warning: {message}");
    assert!(
        humantime::parse_rfc3339(parts[1]).is_ok(),
        "timestamp {}: {message}",
        parts[1]
    );
    assert_eq!(parts[3], "shuck", "{message}");
    assert!(parts[4].parse::<u32>().is_ok(), "{message}");
    assert_eq!(parts[5], "-", "{message}");
    assert!(parts[6].starts_with("[shuck@32473 "), "{message}");
    assert!(parts[6].contains(" frontend=\"web\""), "{message}");
    assert!(parts[6].contains("] TLS handshake failed"), "{message}");
}

/// RFC 5424 to a collector by UDP; RFC 3164, the form its readers take by default, to a local
/// socket.
#[test]
fn syslog_by_udp_and_by_a_local_socket() {
    let pki = Pki::new();
    let udp = UdpSocket::bind("127.0.0.1:0").expect("bind");
    udp.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let to = format!("udp://{}", udp.local_addr().expect("addr"));
    let shuck = Shuck::start(&config(&pki, "syslog", &to));
    plain_http(&shuck);
    let mut buf = vec![0u8; 65536];
    let next = || {
        let n = udp.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let seen = until(next, |m| m.contains("reason=\"handshake_malformed\""));
    check_syslog(seen.last().expect("the warning"));
    drop(shuck);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.socket");
    let rx = UnixDatagram::bind(&path).expect("bind");
    rx.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let shuck = Shuck::start(&config(&pki, "syslog", path.to_str().expect("utf-8")));
    plain_http(&shuck);
    let next = || {
        let n = rx.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let seen = until(next, |m| m.contains("reason=handshake_malformed"));
    // The local socket's form, RFC 3164: `<PRI>Mmm dd hh:mm:ss shuck[PID]: MESSAGE fields`.
    let local = seen.last().expect("the warning");
    assert!(local.starts_with("<28>"), "{local}");
    let after_time = &local[4 + "Nov 28 06:52:03 ".len()..];
    assert!(after_time.starts_with("shuck["), "{local}");
    assert!(
        after_time.contains("]: TLS handshake failed frontend=web "),
        "{local}"
    );
}

/// Over TCP each message is framed by its length (RFC 6587 octet counting).
#[test]
fn syslog_by_tcp_frames_each_message_by_its_length() {
    let pki = Pki::new();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let to = format!("tcp://{}", listener.local_addr().expect("addr"));
    let shuck = Shuck::start(&config(&pki, "syslog", &to));
    let (mut conn, _) = listener.accept().expect("shuck connects");
    conn.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    plain_http(&shuck);
    let mut pending: Vec<u8> = Vec::new();
    let next = || {
        let mut chunk = [0u8; 4096];
        if let Ok(n) = conn.read(&mut chunk) {
            pending.extend_from_slice(&chunk[..n]);
        }
        let space = pending.iter().position(|&b| b == b' ')?;
        let len: usize = std::str::from_utf8(&pending[..space]).ok()?.parse().ok()?;
        if pending.len() < space + 1 + len {
            return None;
        }
        let message = String::from_utf8_lossy(&pending[space + 1..space + 1 + len]).into_owned();
        pending.drain(..space + 1 + len);
        Some(message)
    };
    let seen = until(next, |m| m.contains("reason=\"handshake_malformed\""));
    assert!(seen.iter().all(|m| m.starts_with('<')), "{seen:?}");
    check_syslog(seen.last().expect("the warning"));
}
