//! Just enough HTTP/1.x for the benchmark: a GET, then the answer's status and size checked
//! while the body is counted, not stored (bulk answers are megabytes).

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::stats::Failure;

/// The request line and headers; HTTP/1.0 without keep-alive as in Bernat's benchmark, HTTP/1.1 for
/// keep-alive with `Connection: close` on the last request.
pub fn request(path: &str, host: &str, keepalive: bool, last: bool) -> Vec<u8> {
    let (version, conn) = match (keepalive, last) {
        (false, _) => ("HTTP/1.0", ""),
        (true, false) => ("HTTP/1.1", ""),
        (true, true) => ("HTTP/1.1", "Connection: close\r\n"),
    };
    format!("GET {path} {version}\r\nHost: {host}\r\nUser-Agent: shuck-bench\r\n{conn}\r\n")
        .into_bytes()
}

const MAX_HEAD: usize = 64 * 1024;

/// What the answer must look like.
#[derive(Debug, Clone, Copy)]
pub struct Expect {
    pub status: u16,
    /// Body bytes; `None` accepts any size that matches Content-Length.
    pub size: Option<u64>,
}

/// Reads one answer; returns the bytes received (head and body). Without Content-Length the
/// body runs to end of stream; with it, reading stops at its end so keep-alive can go on.
/// `more_to_come`: another request follows on this connection, so the answer must have a
/// Content-Length (a chunked or unbounded one would wait for an end that never comes).
pub async fn read_response<S: AsyncRead + Unpin>(
    s: &mut S,
    buf: &mut [u8],
    expect: Expect,
    more_to_come: bool,
) -> Result<u64, (Failure, String)> {
    let io = |e: std::io::Error| (Failure::Io, e.to_string());
    let mut head: Vec<u8> = Vec::with_capacity(512);
    let (head_len, status, length) = loop {
        let n = s.read(buf).await.map_err(io)?;
        if n == 0 {
            return Err((
                Failure::Io,
                "connection closed before a complete answer head".into(),
            ));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            let (status, length) = parse_head(&head[..end])?;
            break (end + 4, status, length);
        }
        if head.len() > MAX_HEAD {
            return Err((Failure::Io, "answer head larger than 64 KiB".into()));
        }
    };
    if status != expect.status {
        return Err((
            Failure::Status,
            format!("status {status}, expected {}", expect.status),
        ));
    }
    if more_to_come && length.is_none() {
        return Err((
            Failure::Size,
            "answer without Content-Length (chunked?): --keepalive needs answers with a length"
                .into(),
        ));
    }
    let mut body = (head.len() - head_len) as u64;
    let mut total = head.len() as u64;
    match length {
        Some(len) => {
            while body < len {
                let n = s.read(buf).await.map_err(io)?;
                if n == 0 {
                    return Err((
                        Failure::Size,
                        format!("answer cut at {body} of {len} bytes"),
                    ));
                }
                body += n as u64;
                total += n as u64;
            }
            if body > len {
                return Err((
                    Failure::Size,
                    format!("{body} body bytes, Content-Length {len}"),
                ));
            }
        }
        None => loop {
            match s.read(buf).await {
                Ok(0) => break,
                Ok(n) => {
                    body += n as u64;
                    total += n as u64;
                }
                // Many servers close without close_notify; without a length, end of stream is
                // the end of the body either way.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(io(e)),
            }
        },
    }
    if let Some(want) = expect.size {
        if body != want {
            return Err((Failure::Size, format!("{body} body bytes, expected {want}")));
        }
    }
    Ok(total)
}

fn parse_head(head: &[u8]) -> Result<(u16, Option<u64>), (Failure, String)> {
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let status = first
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.split_whitespace().nth(1))
        .and_then(|c| c.parse::<u16>().ok())
        .ok_or_else(|| {
            (
                Failure::Status,
                format!("not an HTTP/1.x status line: {first:?}"),
            )
        })?;
    let mut length = None;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = Some(v.trim().parse::<u64>().map_err(|_| {
                    (
                        Failure::Status,
                        format!("bad Content-Length {:?}", v.trim()),
                    )
                })?);
            }
        }
    }
    Ok((status, length))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(answer: &[u8], expect: Expect) -> Result<u64, (Failure, String)> {
        read_then(answer, expect, false)
    }

    fn read_then(
        answer: &[u8],
        expect: Expect,
        more_to_come: bool,
    ) -> Result<u64, (Failure, String)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut src = answer;
        let mut buf = vec![0u8; 7]; // tiny reads: heads and bodies arrive in pieces
        rt.block_on(read_response(&mut src, &mut buf, expect, more_to_come))
    }

    #[test]
    fn keepalive_refuses_an_answer_without_length_instead_of_waiting_for_its_end() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        let (kind, why) = read_then(chunked, OK, true).unwrap_err();
        assert_eq!(kind, Failure::Size);
        assert!(why.contains("Content-Length"), "{why}");
        let sized = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
        assert!(read_then(sized, OK, true).is_ok());
    }

    const OK: Expect = Expect {
        status: 200,
        size: None,
    };

    #[test]
    fn counts_head_and_body_with_content_length() {
        let a = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789";
        assert_eq!(read(a, OK), Ok(a.len() as u64));
        assert!(read(
            a,
            Expect {
                status: 200,
                size: Some(10)
            }
        )
        .is_ok());
        assert_eq!(
            read(
                a,
                Expect {
                    status: 200,
                    size: Some(1024)
                }
            )
            .unwrap_err()
            .0,
            Failure::Size
        );
    }

    #[test]
    fn stops_at_content_length_so_keepalive_can_continue() {
        // A second answer follows; only the first is consumed by a correct reader only if it
        // never over-reads, which the benchmark guarantees by not pipelining. Here we check that
        // a body longer than announced is caught.
        let a = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\n0123456789";
        assert_eq!(read(a, OK).unwrap_err().0, Failure::Size);
    }

    #[test]
    fn without_length_reads_to_end_of_stream() {
        let a = b"HTTP/1.0 200 OK\r\n\r\nabcdef";
        assert!(read(
            a,
            Expect {
                status: 200,
                size: Some(6)
            }
        )
        .is_ok());
    }

    #[test]
    fn wrong_status_truncation_and_garbage_fail_with_their_kind() {
        assert_eq!(
            read(b"HTTP/1.1 503 Busy\r\n\r\n", OK).unwrap_err().0,
            Failure::Status
        );
        assert_eq!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc", OK)
                .unwrap_err()
                .0,
            Failure::Size
        );
        assert_eq!(
            read(b"SSH-2.0-x\r\n\r\n", OK).unwrap_err().0,
            Failure::Status
        );
        assert_eq!(read(b"HTTP/1.1 200 OK\r\n", OK).unwrap_err().0, Failure::Io);
    }

    #[test]
    fn requests_follow_the_keepalive_choice() {
        let r = String::from_utf8(request("/x", "h", false, true)).unwrap();
        assert!(r.starts_with("GET /x HTTP/1.0\r\nHost: h\r\n") && !r.contains("Connection"));
        let r = String::from_utf8(request("/", "h", true, false)).unwrap();
        assert!(r.starts_with("GET / HTTP/1.1\r\n") && !r.contains("Connection"));
        let r = String::from_utf8(request("/", "h", true, true)).unwrap();
        assert!(r.contains("Connection: close\r\n\r\n"));
    }
}
