//! The built-in demo backend: answers each HTTP/1.x request with a page describing the TLS
//! connection, so `shuck serve --self-signed` shows what was negotiated on a fresh machine.

use std::fmt::Write as _;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::tls::handshake::Summary;

const MAX_HEAD: usize = 16 * 1024;
const MAX_REQUESTS: usize = 100;

/// Who is asking, for the page: the client, the frontend and worker that serve it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Visitor<'a> {
    pub(crate) client: std::net::SocketAddr,
    pub(crate) frontend: &'a str,
    pub(crate) worker: usize,
}

/// Renders the page body for one connection.
pub(crate) fn page(info: &Summary, who: Visitor<'_>, records: &str) -> String {
    let mut s = String::with_capacity(512);
    let _ = writeln!(s, "shuck demo backend: your TLS connection");
    let _ = writeln!(s, "protocol: {}", info.protocol);
    let _ = writeln!(s, "cipher: {}", info.cipher);
    let _ = writeln!(
        s,
        "group: {}",
        info.group.unwrap_or("none (resumed TLS 1.2)")
    );
    let _ = writeln!(s, "resumed: {}", if info.resumed { "yes" } else { "no" });
    let _ = writeln!(s, "sni: {}", info.sni.as_deref().unwrap_or("none"));
    let _ = writeln!(s, "alpn: {}", info.alpn.as_deref().unwrap_or("none"));
    let _ = writeln!(s, "records: {records}");
    let _ = writeln!(s, "client: {}", who.client);
    let _ = writeln!(s, "frontend: {}", who.frontend);
    let _ = writeln!(s, "worker: {}", who.worker);
    s
}

/// What the request head asked for.
struct Request {
    keep_alive: bool,
    body_len: usize,
}

/// Where the request head ends: after its empty line. Lines end in CRLF, or in a bare LF as
/// many test clients send (RFC 9112 lets a server accept that).
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.iter()
        .enumerate()
        .find_map(|(i, &b)| match (b, &buf[i + 1..]) {
            (b'\n', [b'\n', ..]) => Some(i + 2),
            (b'\n', [b'\r', b'\n', ..]) => Some(i + 3),
            _ => None,
        })
}

fn parse_head(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let request_line = lines.next()?;
    let mut parts = request_line.split(' ');
    let (_method, _target, version) = (parts.next()?, parts.next()?, parts.next()?);
    let mut keep_alive = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return None,
    };
    let mut body_len = 0;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("connection") {
            if value.eq_ignore_ascii_case("close") {
                keep_alive = false;
            } else if value.eq_ignore_ascii_case("keep-alive") {
                keep_alive = true;
            }
        } else if name.eq_ignore_ascii_case("content-length") {
            body_len = value.parse().ok()?;
        }
    }
    Some(Request {
        keep_alive,
        body_len,
    })
}

/// Serves requests on `stream` until the client closes, asks to close, or goes idle.
pub(crate) async fn serve<S>(stream: &mut S, body: &str, idle: Duration) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut buf = Vec::with_capacity(1024);
    for _ in 0..MAX_REQUESTS {
        // Read one request head.
        let head_end = loop {
            if let Some(end) = head_end(&buf) {
                break end;
            }
            if buf.len() >= MAX_HEAD {
                let _ = within(
                    idle,
                    respond(stream, 431, "Request Header Fields Too Large\n", false),
                )
                .await;
                return Ok(());
            }
            let mut chunk = [0u8; 2048];
            let n = match tokio::time::timeout(idle, stream.read(&mut chunk)).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => 0,
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(()),
            };
            if n == 0 {
                return within(idle, stream.shutdown()).await;
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let Some(req) = parse_head(&buf[..head_end]) else {
            let bad = "Bad Request: this demo backend speaks HTTP/1.x\n";
            let _ = within(idle, respond(stream, 400, bad, false)).await;
            return Ok(());
        };
        // Discard a request body.
        let mut rest = buf.split_off(head_end);
        buf.clear();
        let mut to_skip = req.body_len;
        let skip_now = to_skip.min(rest.len());
        to_skip -= skip_now;
        rest.drain(..skip_now);
        while to_skip > 0 {
            let mut chunk = [0u8; 2048];
            let n = within(idle, stream.read(&mut chunk)).await?;
            if n == 0 {
                return Ok(());
            }
            let used = n.min(to_skip);
            to_skip -= used;
            rest.extend_from_slice(&chunk[used..n]);
        }
        buf = rest;
        within(idle, respond(stream, 200, body, req.keep_alive)).await?;
        if !req.keep_alive {
            return within(idle, stream.shutdown()).await;
        }
    }
    within(idle, stream.shutdown()).await
}

/// Every read and write is bounded by the idle timeout, so a silent client cannot hold a slot.
async fn within<T>(
    idle: Duration,
    f: impl std::future::Future<Output = std::io::Result<T>>,
) -> std::io::Result<T> {
    tokio::time::timeout(idle, f)
        .await
        .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
}

async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    status: u16,
    body: &str,
    keep_alive: bool,
) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        _ => "Request Header Fields Too Large",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: {}\r\nServer: shuck\r\n\r\n",
        body.len(),
        if keep_alive { "keep-alive" } else { "close" }
    );
    let mut out = Vec::with_capacity(head.len() + body.len());
    out.extend_from_slice(head.as_bytes());
    out.extend_from_slice(body.as_bytes());
    stream.write_all(&out).await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_ends_at_its_empty_line_whatever_the_line_ends() {
        assert_eq!(head_end(b"GET / HTTP/1.0\r\n\r\nbody"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.0\n\nbody"), Some(16));
        assert_eq!(head_end(b"GET / HTTP/1.0\r\nA: b\n\r\n"), Some(23));
        assert_eq!(head_end(b"GET / HTTP/1.0\r\nA: b\r\n"), None);
    }

    #[tokio::test]
    async fn bare_lf_requests_are_answered() {
        let (mut client, mut server) = tokio::io::duplex(4096);
        let serving =
            tokio::spawn(async move { serve(&mut server, "page\n", Duration::from_secs(5)).await });
        client.write_all(b"GET / HTTP/1.0\n\n").await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut answer))
            .await
            .expect("answered, not left to the idle timeout")
            .unwrap();
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\npage\n"), "{text}");
        serving.await.unwrap().unwrap();
    }

    #[test]
    fn heads() {
        let r = parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(r.keep_alive);
        let r = parse_head(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert!(!r.keep_alive);
        let r = parse_head(b"POST / HTTP/1.1\r\nConnection: close\r\nContent-Length: 5\r\n\r\n")
            .unwrap();
        assert!(!r.keep_alive);
        assert_eq!(r.body_len, 5);
        assert!(parse_head(b"\x16\x03\x01garbage\r\n\r\n").is_none());
    }
}
