//! `shuck bench backend`: a minimal HTTP/1.x server answering every GET with N bytes, so a
//! benchmark needs no web server. `/size/N` asks for N bytes instead (bulk runs).

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::BenchError;

/// Largest answer `/size/N` may ask for.
pub const MAX_SIZE: u64 = 64 * 1024 * 1024;
const CHUNK: [u8; 16 * 1024] = [b'x'; 16 * 1024];

pub struct BackendOptions {
    pub listen: String,
    pub size: u64,
    pub ready_file: Option<PathBuf>,
}

/// Binds, writes the ready file, then serves until the process is stopped.
pub fn run(o: &BackendOptions) -> Result<(), BenchError> {
    if o.size > MAX_SIZE {
        return Err(BenchError::Option {
            flag: "--size",
            reason: format!("at most {MAX_SIZE} bytes"),
        });
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(BenchError::Threads)?;
    rt.block_on(async {
        let l = TcpListener::bind(&o.listen)
            .await
            .map_err(|source| BenchError::Bind {
                addr: o.listen.clone(),
                source,
            })?;
        let addr = l.local_addr().map_err(|source| BenchError::Bind {
            addr: o.listen.clone(),
            source,
        })?;
        if let Some(p) = &o.ready_file {
            std::fs::write(p, format!("{addr}\n")).map_err(|source| BenchError::Write {
                path: p.clone(),
                source,
            })?;
        }
        eprintln!(
            "shuck bench backend: listening on {addr}, answering {} bytes",
            o.size
        );
        serve(l, o.size).await;
        Ok(())
    })
}

pub async fn serve(l: TcpListener, size: u64) {
    loop {
        let Ok((s, _)) = l.accept().await else {
            // Out of descriptors, say: back off instead of spinning.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        tokio::spawn(async move {
            let _ = connection(s, size).await;
        });
    }
}

/// Requests on one connection: HTTP/1.1 keeps it open unless asked to close, HTTP/1.0 closes.
async fn connection(mut s: TcpStream, default_size: u64) -> std::io::Result<()> {
    s.set_nodelay(true)?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        let Some(end) = read_head(&mut s, &mut buf).await? else {
            return Ok(());
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let first = lines.next().unwrap_or_default();
        let mut parts = first.split_whitespace();
        let (method, path, version) = (parts.next(), parts.next(), parts.next());
        let close_asked = lines.any(|l| {
            l.split_once(':').is_some_and(|(k, v)| {
                k.trim().eq_ignore_ascii_case("connection")
                    && v.trim().eq_ignore_ascii_case("close")
            })
        });
        let keep = version == Some("HTTP/1.1") && !close_asked;
        let size = path
            .and_then(|p| p.strip_prefix("/size/"))
            .and_then(|n| n.parse::<u64>().ok())
            .filter(|n| *n <= MAX_SIZE)
            .unwrap_or(default_size);
        if method != Some("GET") || path.is_none() {
            s.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await?;
            return Ok(());
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\nContent-Type: text/plain\r\n{}\r\n",
            if keep { "" } else { "Connection: close\r\n" }
        );
        // One write for small answers: head and body in one segment, as a file server would.
        let mut first = head.into_bytes();
        let mut left = size;
        let take = left.min(CHUNK.len() as u64) as usize;
        first.extend_from_slice(&CHUNK[..take]);
        left -= take as u64;
        s.write_all(&first).await?;
        while left > 0 {
            let n = left.min(CHUNK.len() as u64) as usize;
            s.write_all(&CHUNK[..n]).await?;
            left -= n as u64;
        }
        if !keep {
            return s.shutdown().await;
        }
    }
}

/// Reads until a blank line; `None` at a clean end of stream.
async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(end));
        }
        if buf.len() > 64 * 1024 {
            return Err(std::io::Error::other("request head over 64 KiB"));
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Starts the backend on a background thread (tests, the shootout): returns its address.
pub fn spawn(size: u64) -> Result<SocketAddr, BenchError> {
    let std_l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|source| BenchError::Bind {
        addr: "127.0.0.1:0".into(),
        source,
    })?;
    let addr = std_l.local_addr().map_err(|source| BenchError::Bind {
        addr: "127.0.0.1:0".into(),
        source,
    })?;
    std_l
        .set_nonblocking(true)
        .map_err(|source| BenchError::Bind {
            addr: addr.to_string(),
            source,
        })?;
    std::thread::Builder::new()
        .name("bench-backend".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(l) = TcpListener::from_std(std_l) {
                    serve(l, size).await;
                }
            });
        })
        .map_err(BenchError::Threads)?;
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, req: &str) -> Vec<u8> {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut v = Vec::new();
        s.read_to_end(&mut v).unwrap();
        v
    }

    fn body_len(answer: &[u8]) -> usize {
        let end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
        answer.len() - end - 4
    }

    #[test]
    fn answers_the_configured_size_and_closes_http10() {
        let a = spawn(1024).unwrap();
        let ans = get(a, "GET / HTTP/1.0\r\nHost: x\r\n\r\n");
        assert!(ans.starts_with(b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n"));
        assert_eq!(body_len(&ans), 1024);
        let ans = get(a, "GET /size/1048576 HTTP/1.0\r\n\r\n");
        assert_eq!(body_len(&ans), 1_048_576);
    }

    #[test]
    fn keeps_http11_open_until_connection_close() {
        let a = spawn(10).unwrap();
        let ans = get(
            a,
            "GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /size/3 HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        let text = String::from_utf8(ans).unwrap();
        assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 2, "{text}");
        assert!(text.ends_with("\r\n\r\nxxx"), "{text}");
    }

    #[test]
    fn refuses_what_is_not_a_get() {
        let a = spawn(10).unwrap();
        let ans = get(a, "POST / HTTP/1.1\r\n\r\n");
        assert!(ans.starts_with(b"HTTP/1.1 400"));
    }
}
