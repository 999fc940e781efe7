//! The metrics endpoint: plain HTTP on `metrics_listen`, served on the main thread's runtime.
//! `GET` or `HEAD` of `/metrics` (Prometheus text; a query string is ignored), `/healthz` (200
//! while the process runs its loops: this endpoint is one of them) and `/readyz` (200 while it
//! serves, 503 while it starts or drains: what a balancer or a Kubernetes probe asks), and `/`,
//! the status page (`status`).

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
pub(crate) async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    // The status page's history, sampled while the endpoint serves (and stopped with it).
    let sampler = {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(super::status::EVERY);
            loop {
                tick.tick().await;
                metrics.sample_history();
            }
        })
    };
    let _stop_sampler = AbortOnDrop(sampler);
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

/// Aborts a task when dropped (the endpoint's own tasks end with it).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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
    let answer = answer(&head, metrics);
    let mut resp = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
        answer.status,
        answer.content_type,
        answer.body.len(),
        answer.extra_header,
    );
    if !answer.head_only {
        resp.push_str(&answer.body);
    }
    let _ = s.write_all(resp.as_bytes()).await;
    let _ = s.shutdown().await;
}

/// What a request gets.
struct Answer {
    status: &'static str,
    content_type: &'static str,
    body: String,
    extra_header: &'static str,
    /// `HEAD`: the headers of the `GET` answer, without its body.
    head_only: bool,
}

const TEXT: &str = "text/plain; charset=utf-8";
const PATHS: &str = "served here: / (the status page), /metrics, /healthz, /readyz\n";

fn answer(head: &[u8], metrics: &Metrics) -> Answer {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    let known = matches!(path, b"/" | b"/metrics" | b"/healthz" | b"/readyz");
    let head_only = method == b"HEAD";
    if known && !(head_only || method == b"GET") {
        return Answer {
            status: "405 Method Not Allowed",
            content_type: TEXT,
            body: "GET or HEAD\n".into(),
            extra_header: "Allow: GET, HEAD\r\n",
            head_only,
        };
    }
    let (status, content_type, body) = match path {
        b"/metrics" => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        b"/" => ("200 OK", "text/html; charset=utf-8", metrics.status_page()),
        b"/healthz" => ("200 OK", TEXT, "ok\n".into()),
        b"/readyz" => match metrics.phase() {
            Phase::Serving => ("200 OK", TEXT, "ready\n".into()),
            Phase::Starting => ("503 Service Unavailable", TEXT, "starting\n".into()),
            Phase::Draining => ("503 Service Unavailable", TEXT, "draining\n".into()),
        },
        _ => ("404 Not Found", TEXT, PATHS.into()),
    };
    Answer {
        status,
        content_type,
        body,
        extra_header: "",
        head_only,
    }
}

/// Where the process is, for `/readyz`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Binding, loading: not listening yet.
    Starting,
    /// Listening with its certificates loaded.
    Serving,
    /// Stopping: no new connections, the open ones finishing.
    Draining,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(request: &str, m: &Metrics) -> Answer {
        answer(request.as_bytes(), m)
    }

    #[test]
    fn paths_methods_and_query_strings() {
        let m = Metrics::new();
        m.set_phase(Phase::Serving);
        assert_eq!(ask("GET /metrics HTTP/1.1\r\n\r\n", &m).status, "200 OK");
        let q = ask("GET /metrics?name[]=x HTTP/1.1\r\n\r\n", &m);
        assert!(q.body.contains("shuck_connections_accepted"), "{}", q.body);
        let head = ask("HEAD /metrics HTTP/1.1\r\n\r\n", &m);
        assert!(head.head_only && head.status == "200 OK");
        assert_eq!(ask("GET /healthz HTTP/1.1\r\n\r\n", &m).body, "ok\n");
        assert_eq!(
            ask("POST /readyz HTTP/1.1\r\n\r\n", &m).status,
            "405 Method Not Allowed"
        );
        assert_eq!(
            ask("GET /nope HTTP/1.1\r\n\r\n", &m).status,
            "404 Not Found"
        );
        assert_eq!(
            ask("GET /metricsx HTTP/1.1\r\n\r\n", &m).status,
            "404 Not Found"
        );
    }

    #[test]
    fn readiness_follows_the_phase() {
        let m = Metrics::new();
        let ready = |m: &Metrics| ask("GET /readyz HTTP/1.1\r\n\r\n", m);
        assert_eq!(ready(&m).status, "503 Service Unavailable");
        assert_eq!(ready(&m).body, "starting\n");
        m.set_phase(Phase::Serving);
        assert_eq!(ready(&m).status, "200 OK");
        m.set_phase(Phase::Draining);
        assert_eq!(ready(&m).body, "draining\n");
    }
}
