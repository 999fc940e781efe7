//! The plain-HTTP listeners (`[[redirect]]`, port 80): every request is sent to the same host
//! and path over HTTPS (301 or 308), a host no frontend serves gets 421 (or `unknown_host`), and
//! `/.well-known/acme-challenge/<token>` answers an ACME HTTP-01 challenge: this process's, or
//! one another host of the fleet published in the store. Served on the main thread's runtime,
//! away from the workers. A connection gets one answer and is closed; its request must come
//! whole, at most 8 KiB, within 10 s; 1024 connections at most are open, more are closed at once;
//! 16 store lookups at most run at once, more get 503 (a budget of their own: a flood here does
//! not take the TLS-ALPN-01 validators' lookups).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::certs::acme::http01;
use crate::config::{Challenge, Redirect, UnknownHost};
use crate::metrics::Metrics;
use crate::worker::Engine;

/// The longest request head read.
const MAX_HEAD: usize = 8192;
/// A request must come whole within this long (a slow sender holds a connection no longer).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections open at once, across a listener's addresses.
const MAX_OPEN: usize = 1024;
/// Connections open at once from one client address: one client cannot take every slot (and
/// shut the CA's validators out).
const MAX_PER_CLIENT: usize = 16;
/// After the answer, what the client still sends is read and dropped for this long (64 KiB at
/// most) before the socket is closed: closing with unread bytes sends a reset, which may
/// destroy the answer before the client reads it (a POST body, a pipelined request).
const LINGER: Duration = Duration::from_secs(1);
/// Store lookups for another host's challenge at once.
const MAX_LOOKUPS: usize = 16;
/// How long a store lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

/// What one `[[redirect]]` section's listeners share.
pub(crate) struct Shared {
    settings: Redirect,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    open: Arc<Semaphore>,
    lookups: Semaphore,
    /// Connections open per client (an IPv4 address, an IPv6 /64; only those with one open are
    /// kept).
    per_client: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>,
}

impl Shared {
    pub(crate) fn new(settings: Redirect, engine: Arc<Engine>, metrics: Arc<Metrics>) -> Shared {
        Shared {
            settings,
            engine,
            metrics,
            open: Arc::new(Semaphore::new(MAX_OPEN)),
            lookups: Semaphore::new(MAX_LOOKUPS),
            per_client: std::sync::Mutex::default(),
        }
    }

    /// Takes one of `ip`'s connection slots; `None` when it has [`MAX_PER_CLIENT`] open. (The
    /// lock is this listener's, on the main runtime's one thread: never contended.)
    fn client_slot(self: &Arc<Self>, ip: std::net::IpAddr) -> Option<ClientSlot> {
        let ip = client_of(ip);
        let mut open = self
            .per_client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = open.entry(ip).or_insert(0);
        if *n >= MAX_PER_CLIENT {
            return None;
        }
        *n += 1;
        Some(ClientSlot(Arc::clone(self), ip))
    }
}

/// Who a connection counts against: its IPv4 address (an IPv4-mapped IPv6 one as such), or
/// its IPv6 /64 (one host commonly has all of it).
fn client_of(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip.to_canonical() {
        std::net::IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            std::net::IpAddr::V6(prefix.into())
        }
        v4 @ std::net::IpAddr::V4(_) => v4,
    }
}

/// One of a client address's connection slots, given back when dropped.
struct ClientSlot(Arc<Shared>, std::net::IpAddr);

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self
            .0
            .per_client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = open.get_mut(&self.1) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.1);
            }
        }
    }
}

/// Serves one address until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let label: Arc<str> = listener
        .local_addr()
        .map_or_else(|_| Arc::from("?"), |a| Arc::from(a.to_string()));
    loop {
        let Ok((s, peer)) = listener.accept().await else {
            // Out of descriptors or the like: wait rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = Arc::clone(&shared.open).try_acquire_owned() else {
            shared.metrics.redirect_request(&label, "too_many");
            continue; // dropped: closed at once
        };
        let Some(slot) = shared.client_slot(peer.ip()) else {
            shared.metrics.redirect_request(&label, "too_many");
            continue;
        };
        let (shared, label) = (Arc::clone(&shared), Arc::clone(&label));
        tokio::spawn(async move {
            let _held = (permit, slot);
            serve_one(s, peer, &shared, &label).await;
        });
    }
}

/// One connection: its request, then one answer, then closed.
async fn serve_one(mut s: TcpStream, peer: SocketAddr, shared: &Shared, label: &str) {
    let Ok(head) = tokio::time::timeout(REQUEST_TIMEOUT, read_head(&mut s)).await else {
        shared.metrics.redirect_request(label, "timeout");
        return;
    };
    let head = match head {
        Head::Whole(h) => h,
        Head::Closed => return,
        Head::TooLong => {
            shared.metrics.redirect_request(label, "bad_request");
            return;
        }
    };
    let request = Request::parse(&head);
    let (answer, outcome) = match &request {
        None => (
            Answer::text("400 Bad Request", "bad request\n"),
            "bad_request",
        ),
        Some(r) => answer(r, shared).await,
    };
    shared.metrics.redirect_request(label, outcome);
    if shared.engine.log_connections() {
        let (method, host, path) = request
            .as_ref()
            .map_or(("", "", ""), |r| (r.method, r.host.as_str(), r.path));
        // Client-sent text is shown escaped (`?`) and cut: a line stays one line.
        tracing::info!(listener = %label, client = %peer, method = ?cut(method), host = ?cut(host), path = ?cut(path), status = answer.status, outcome, "plain HTTP request");
    }
    let head_only = request.as_ref().is_some_and(|r| r.method == "HEAD");
    if tokio::time::timeout(REQUEST_TIMEOUT, write(&mut s, &answer, head_only))
        .await
        .is_ok_and(|w| w.is_ok())
    {
        linger(&mut s).await;
    }
}

/// Reads and drops what the client still sends, [`LINGER`] and 64 KiB at most, until it closes.
async fn linger(s: &mut TcpStream) {
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut left: usize = 64 * 1024;
        while left > 0 {
            match s.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

/// What reading a request head came to.
enum Head {
    Whole(Vec<u8>),
    /// The client closed (or failed) first.
    Closed,
    /// More than [`MAX_HEAD`] without its end.
    TooLong,
}

fn cut(s: &str) -> &str {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Reads until the head is whole (each byte looked at once: a client sending a byte at a time
/// costs no more than one sending it all).
async fn read_head(s: &mut TcpStream) -> Head {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return Head::Closed,
            Ok(n) => n,
        };
        // The end may straddle two reads: look from three bytes before the new ones.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        let new = &head[from..];
        if new.windows(4).any(|w| w == b"\r\n\r\n") || new.windows(2).any(|w| w == b"\n\n") {
            return Head::Whole(head);
        }
        if head.len() >= MAX_HEAD {
            return Head::TooLong;
        }
    }
}

/// What a request asked, from its head.
#[derive(Debug)]
struct Request<'a> {
    method: &'a str,
    /// The host asked for, lower case, without port or final dot; empty when none or not a
    /// DNS name.
    host: String,
    /// The request target's path and query, as sent (`/` for an absolute URL without one).
    path: &'a str,
}

impl<'a> Request<'a> {
    /// `None`: not an HTTP/1 request head, or a target that is neither a path nor an
    /// `http://` URL.
    fn parse(head: &'a [u8]) -> Option<Request<'a>> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        if !matches!(req.parse(head), Ok(httparse::Status::Complete(_))) {
            return None;
        }
        let (method, target) = (req.method?, req.path?);
        if !target.bytes().all(|b| b.is_ascii_graphic()) {
            return None;
        }
        let mut hosts = req
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case("host"));
        let host_header = hosts.next().and_then(|h| std::str::from_utf8(h.value).ok());
        if hosts.next().is_some() {
            return None; // RFC 9112 §3.2: more than one Host is a bad request
        }
        let absolute = target
            .get(..7)
            .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
            .map(|_| &target[7..]);
        let (host, path) = match absolute {
            // Absolute form (RFC 9112 §3.2.2): its authority wins over Host.
            Some(rest) => {
                let end = rest.find(['/', '?']).unwrap_or(rest.len());
                let (authority, path) = rest.split_at(end);
                (Some(authority), if path.is_empty() { "/" } else { path })
            }
            None if target.starts_with('/') => (host_header, target),
            None => return None,
        };
        Some(Request {
            method,
            host: host.map(dns_host).unwrap_or_default(),
            path,
        })
    }
}

/// A Host value as a DNS name (lower case, no port, no final dot); empty when it is not one
/// (an IP address, a bracketed IPv6 literal, anything else).
fn dns_host(value: &str) -> String {
    let value = value.trim();
    let name = match value.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => value,
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let labels_ok = name.split('.').all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    });
    let is_ip = name.parse::<std::net::IpAddr>().is_ok()
        || name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if name.len() > 253 || !labels_ok || is_ip {
        return String::new();
    }
    name
}

/// An answer to write.
struct Answer {
    status: &'static str,
    location: Option<String>,
    body: String,
}

impl Answer {
    fn text(status: &'static str, body: &str) -> Answer {
        Answer {
            status,
            location: None,
            body: body.to_string(),
        }
    }

    fn redirect(code: u16, location: String) -> Answer {
        Answer {
            status: if code == 308 {
                "308 Permanent Redirect"
            } else {
                "301 Moved Permanently"
            },
            body: format!("{location}\n"),
            location: Some(location),
        }
    }
}

/// The answer to a request, and its outcome label.
async fn answer(r: &Request<'_>, shared: &Shared) -> (Answer, &'static str) {
    let path_only = r.path.split('?').next().unwrap_or_default();
    if let Some(token) = path_only.strip_prefix(http01::PATH_PREFIX) {
        return challenge(token, shared).await;
    }
    let settings = &shared.settings;
    if !r.host.is_empty() && serves(&r.host, shared) {
        let port = match settings.https_port {
            443 => String::new(),
            p => format!(":{p}"),
        };
        // `http://host?q` has no path of its own: its query goes after "/".
        let slash = if r.path.starts_with('/') { "" } else { "/" };
        let location = format!("https://{}{port}{slash}{}", r.host, r.path);
        return (Answer::redirect(settings.code, location), "redirected");
    }
    match &settings.unknown_host {
        UnknownHost::To(url) => (Answer::redirect(settings.code, url.clone()), "unknown_host"),
        UnknownHost::Misdirected => (
            Answer::text(
                "421 Misdirected Request",
                "no site of this name is served here\n",
            ),
            "unknown_host",
        ),
    }
}

/// Whether `host` is a name some frontend serves: a certificate of one names it, one orders it
/// from an ACME CA, or one gets certificates on demand (its ask endpoint judges the name at
/// the TLS handshake).
fn serves(host: &str, shared: &Shared) -> bool {
    let config = shared.engine.in_force();
    let by_acme = config.frontends.iter().filter_map(|f| f.acme()).any(|a| {
        a.on_demand.is_some()
            || a.names.iter().any(|n| {
                n == host
                    || n.strip_prefix("*.")
                        .is_some_and(|p| host.split_once('.').is_some_and(|(_, h)| h == p))
            })
    });
    by_acme || shared.metrics.serves_name(host)
}

/// The key authorization for `token`: this process's pending challenge, else one another host
/// of the fleet published in a store of a frontend validated by HTTP-01.
async fn challenge(token: &str, shared: &Shared) -> (Answer, &'static str) {
    let not_found = || {
        (
            Answer::text("404 Not Found", "no such challenge\n"),
            "challenge_unknown",
        )
    };
    if !http01::is_token(token) {
        return not_found();
    }
    if let Some(a) = shared.engine.challenges.http.answer(token) {
        return (Answer::text("200 OK", &a), "challenge");
    }
    let stores = fleet_stores(shared);
    if stores.is_empty() {
        return not_found();
    }
    let Ok(_slot) = shared.lookups.try_acquire() else {
        return (Answer::text("503 Service Unavailable", "busy\n"), "busy");
    };
    let until = tokio::time::Instant::now() + LOOKUP_TIMEOUT;
    for store in stores {
        if let Some(v) = store.get_by(&http01::store_key(token), until).await {
            if let Ok(a) = String::from_utf8(v) {
                return (Answer::text("200 OK", &a), "challenge");
            }
        }
    }
    not_found()
}

/// The fleet stores of the frontends that validate by HTTP-01 (opened at start).
fn fleet_stores(shared: &Shared) -> Vec<Arc<crate::store::fleet::FleetStore>> {
    let config = shared.engine.in_force();
    let mut stores: Vec<Arc<crate::store::fleet::FleetStore>> = Vec::new();
    for fe in &config.frontends {
        let http01 = fe.acme().is_some_and(|a| a.challenge == Challenge::Http01);
        let Some(s) = fe.fleet_store().filter(|_| http01) else {
            continue;
        };
        if let Ok(store) = shared.engine.fleet_stores.shared(&s.url, &s.key) {
            if !stores.iter().any(|x| Arc::ptr_eq(x, &store)) {
                stores.push(store);
            }
        }
    }
    stores
}

async fn write(s: &mut TcpStream, a: &Answer, head_only: bool) -> std::io::Result<()> {
    let location = a
        .location
        .as_ref()
        .map(|l| format!("Location: {l}\r\n"))
        .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {}\r\n{location}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        a.status,
        a.body.len()
    );
    if !head_only {
        out.push_str(&a.body);
    }
    s.write_all(out.as_bytes()).await?;
    s.shutdown().await
}

/// The listening sockets of every `[[redirect]]`, bound now (port 80 needs the privileges the
/// process drops after start), or taken from an old process (an upgrade).
pub(crate) fn bind(
    c: &crate::config::Config,
    inherited: &mut crate::sys::upgrade::Inherited,
) -> crate::error::Result<Vec<(usize, std::net::TcpListener)>> {
    let mut out = Vec::new();
    let mut index = 0;
    for (i, r) in c.redirect.iter().enumerate() {
        for addr in &r.listen {
            let taken = inherited
                .take(super::bindings::REDIRECT, index, *addr)
                .pop();
            let l = if let Some(l) = taken {
                l
            } else {
                let refuse = |source| {
                    crate::error::Error::bind(*addr, crate::error::Listener::Redirect, source)
                };
                // SO_REUSEPORT would share the port with whoever has it (a web server).
                if crate::sys::listener::in_use(*addr) {
                    return Err(refuse(std::io::ErrorKind::AddrInUse.into()));
                }
                crate::sys::listener::bind(*addr, 1024).map_err(refuse)?
            };
            out.push((i, l));
            index += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_counted_by_ipv4_address_or_ipv6_64() {
        let v6 = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        assert_eq!(client_of(v6("2001:db8:1:2:a::1")), v6("2001:db8:1:2::"));
        assert_eq!(client_of(v6("2001:db8:1:2:b::9")), v6("2001:db8:1:2::"));
        assert_eq!(client_of(v6("::ffff:192.0.2.7")), v6("192.0.2.7"));
        assert_eq!(client_of(v6("192.0.2.7")), v6("192.0.2.7"));
    }

    #[test]
    fn hosts_lose_port_case_and_final_dot_and_addresses_are_not_names() {
        assert_eq!(dns_host("Shop.Example.COM.:80"), "shop.example.com");
        assert_eq!(dns_host("shop.example"), "shop.example");
        for bad in [
            "127.0.0.1",
            "[::1]:80",
            "a b",
            "-x.example",
            "",
            "x..example",
        ] {
            assert_eq!(dns_host(bad), "", "{bad}");
        }
    }

    #[test]
    fn requests_give_their_host_and_path_an_absolute_url_its_own() {
        let r = Request::parse(b"GET /a?b=c HTTP/1.1\r\nHost: Shop.Example\r\n\r\n").unwrap();
        assert_eq!(
            (r.method, r.host.as_str(), r.path),
            ("GET", "shop.example", "/a?b=c")
        );
        let r =
            Request::parse(b"GET http://other.example:80 HTTP/1.1\r\nHost: shop.example\r\n\r\n")
                .unwrap();
        assert_eq!((r.host.as_str(), r.path), ("other.example", "/"));
        assert!(Request::parse(b"GET * HTTP/1.1\r\nHost: a.example\r\n\r\n").is_none());
        let r = Request::parse(b"GET HTTP://Other.Example?q HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.path), ("other.example", "?q"));
        assert!(
            Request::parse(b"GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n")
                .is_none()
        );
        assert!(Request::parse(b"\x16\x03\x01\x00\x05hello\r\n\r\n").is_none());
        let r = Request::parse(b"GET / HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(r.host, "");
    }
}
