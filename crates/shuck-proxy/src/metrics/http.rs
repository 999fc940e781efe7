//! The metrics endpoint: plain HTTP on `metrics_listen`, served on the main thread's runtime.
//! `GET` or `HEAD` of `/metrics` (Prometheus text; a query string is ignored), `/healthz` (200
//! while the process runs its loops: this endpoint is one of them) and `/readyz` (200 while it
//! serves, 503 while it starts or drains: what a balancer or a Kubernetes probe asks), and `/`,
//! the status page (`status`).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::pending::{Pending, Place};
use super::Metrics;

/// Scrapes (and status pages) served at once; more wait for a slot. Probes need none.
const MAX_SCRAPES: usize = 8;
/// Scrapes that may wait for a slot; past that, one is answered 503 at once. With the slots and
/// `pending`'s cap, the connections this endpoint holds stay within the descriptors kept back
/// for the process (`sys::limits`): clients that ask and never read cannot pile up.
const MAX_WAITING: usize = 8;
/// A scraper sends its request at once (Prometheus does): a connection that has not within this
/// long is closed. Until then it holds no slot (see `pending`).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// A scraper gets this long to get a slot, and as long again to read the answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the endpoint until the task is dropped. Scrapes are rare and cheap, so this runs on
/// the main thread's runtime, away from the workers.
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
    let slots = Arc::new(Slots {
        serving: tokio::sync::Semaphore::new(MAX_SCRAPES),
        waiting: tokio::sync::Semaphore::new(MAX_WAITING),
    });
    let pending = Pending::default();
    loop {
        let Ok((s, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<Place>();
        let (shared, slots) = (metrics.clone(), slots.clone());
        let task = tokio::spawn(async move {
            if let Ok(place) = rx.await {
                serve_one(s, place, &shared, &slots).await;
            }
        });
        let (place, evicted) = pending.admit(peer.ip(), task.abort_handle());
        metrics.endpoint_evicted.inc_by(evicted as u64);
        let _ = tx.send(place);
    }
}

/// Scrapes being served, and those waiting for their turn.
struct Slots {
    serving: tokio::sync::Semaphore,
    waiting: tokio::sync::Semaphore,
}

/// One connection: its request (leaving `place` once it came), then the answer; a probe at
/// once, a scrape or the status page once a slot is free (503 at once when too many wait).
async fn serve_one(mut s: tokio::net::TcpStream, place: Place, metrics: &Metrics, slots: &Slots) {
    let Ok(Some(head)) = tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut s)).await else {
        return;
    };
    drop(place);
    let _slot = if is_probe(&head) {
        None
    } else {
        let Ok(waiting) = slots.waiting.try_acquire() else {
            let busy = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nbusy\n";
            let _ = tokio::time::timeout(REQUEST_TIMEOUT, s.write_all(busy)).await;
            return;
        };
        let Ok(Ok(slot)) = tokio::time::timeout(SCRAPE_TIMEOUT, slots.serving.acquire()).await
        else {
            return;
        };
        drop(waiting);
        Some(slot)
    };
    let _ = tokio::time::timeout(SCRAPE_TIMEOUT, respond(s, &head, metrics)).await;
}

/// `/healthz` or `/readyz`: answered without a slot (nothing to encode).
fn is_probe(head: &[u8]) -> bool {
    matches!(path_of(head), b"/healthz" | b"/readyz")
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

async fn respond(mut s: tokio::net::TcpStream, head: &[u8], metrics: &Metrics) {
    let answer = answer(head, metrics);
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

/// The request line's method and path (without its query string).
fn method_and_path(head: &[u8]) -> (&[u8], &[u8]) {
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, target) = (
        words.next().unwrap_or_default(),
        words.next().unwrap_or_default(),
    );
    (
        method,
        target.split(|&b| b == b'?').next().unwrap_or_default(),
    )
}

/// Whether the request's `Accept` names OpenMetrics (Prometheus servers ask for it first);
/// anything else gets the text format 0.0.4, which every reader takes.
fn wants_openmetrics(head: &[u8]) -> bool {
    head.split(|&b| b == b'\n').skip(1).any(|line| {
        let line = line.to_ascii_lowercase();
        line.starts_with(b"accept:")
            && line
                .windows(b"application/openmetrics-text".len())
                .any(|w| w == b"application/openmetrics-text")
    })
}

fn path_of(head: &[u8]) -> &[u8] {
    method_and_path(head).1
}

fn answer(head: &[u8], metrics: &Metrics) -> Answer {
    let (method, path) = method_and_path(head);
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
        b"/metrics" if wants_openmetrics(head) => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        b"/metrics" => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.encode_text_004(),
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
