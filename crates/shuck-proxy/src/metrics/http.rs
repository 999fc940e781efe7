//! The metrics endpoint: plain HTTP on `metrics_listen`, served on the main thread's runtime.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::Metrics;

/// Scrapes served at once; more wait in the listen backlog.
const MAX_SCRAPES: usize = 8;
/// A scraper sends its request at once (Prometheus does): a connection that has not within this
/// long gives its slot up, so a few idle connections cannot keep the scrapers out.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// A scraper gets this long to read the answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `GET /metrics` over plain HTTP until the task is dropped. Scrapes are rare and cheap,
/// so this runs on the main thread's runtime, away from the workers.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(MAX_SCRAPES));
    loop {
        let Ok(permit) = limit.clone().acquire_owned().await else {
            return;
        };
        let Ok((s, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(SCRAPE_TIMEOUT, scrape(s, &metrics)).await;
            drop(permit);
        });
    }
}

/// Reads the request head, up to 8 KiB; `None` when the client closed or went quiet.
async fn read_request(s: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    Some(head)
}

async fn scrape(mut s: tokio::net::TcpStream, metrics: &Metrics) {
    let Ok(Some(head)) = tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut s)).await else {
        return;
    };
    let (status, ctype, body) = if head.starts_with(b"GET /metrics ") {
        (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        )
    } else {
        (
            "404 Not Found",
            "text/plain",
            "only GET /metrics is served here\n".to_string(),
        )
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(resp.as_bytes()).await;
    let _ = s.shutdown().await;
}
