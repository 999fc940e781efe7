//! What a worker shows of its relayed connections on the admin socket (`shuck ctl show
//! connections`), and the filter an operator picks them with, to list or to close. The
//! description lives in the worker's registry of relayed connections (`conn::idle`): a few
//! words per connection, written when its relay starts; names are looked up only when asked.

use std::net::{IpAddr, SocketAddr};
use std::rc::Rc;

use serde::Serialize;

use crate::backend::BackendPool;
use crate::conn::idle::Seen;
use crate::worker::WorkerFrontend;

/// One relayed connection, as its worker registered it.
pub(crate) struct ConnInfo {
    pub(crate) fe: Rc<WorkerFrontend>,
    pub(crate) client: SocketAddr,
    /// The server name asked for (kept while an admin socket is configured).
    pub(crate) sni: Option<Box<str>>,
    pub(crate) alpn: Alpn,
    /// The TLS version's wire number (0x0303 TLS 1.2, 0x0304 TLS 1.3).
    pub(crate) version: u16,
    /// The route taken: its place in the frontend's `route` list.
    pub(crate) route: Option<u16>,
    /// The backend: its pool and its place there.
    pub(crate) pool: Rc<BackendPool>,
    pub(crate) backend: u16,
}

impl ConnInfo {
    /// The route's name, `default` for the frontend's own backends.
    fn route_name(&self) -> &str {
        self.route
            .and_then(|i| self.fe.cfg.route.0.get(usize::from(i)))
            .map_or("default", |r| r.name.as_str())
    }
}

impl std::fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnInfo")
            .field("frontend", &self.fe.cfg.name)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// An ALPN protocol of up to 15 bytes, kept inline (longer ones are cut; none common is).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Alpn {
    len: u8,
    bytes: [u8; 15],
}

impl Alpn {
    pub(crate) fn of(protocol: Option<&[u8]>) -> Alpn {
        let mut a = Alpn::default();
        if let Some(p) = protocol {
            let n = p.len().min(a.bytes.len());
            a.bytes[..n].copy_from_slice(&p[..n]);
            a.len = u8::try_from(n).unwrap_or(0);
        }
        a
    }

    fn as_string(&self) -> Option<String> {
        (self.len > 0).then(|| String::from_utf8_lossy(&self.bytes[..usize::from(self.len)]).into())
    }
}

/// Which connections a command is about; every given field must match.
#[derive(Debug, Clone, Default)]
pub struct ConnFilter {
    pub frontend: Option<String>,
    /// The route taken (`default`: the frontend's own backends).
    pub route: Option<String>,
    /// The client's address is in this network.
    pub client: Option<ipnet::IpNet>,
    /// The server name asked for, without regard to case.
    pub sni: Option<String>,
    /// The backend, as the configuration writes it (a host name: any of its addresses) or as
    /// `show backends` lists it.
    pub backend: Option<String>,
}

impl ConnFilter {
    pub(crate) fn picks(&self, c: &ConnInfo) -> bool {
        let client = c.client.ip().to_canonical();
        self.frontend.as_ref().is_none_or(|f| *f == c.fe.cfg.name)
            && self
                .client
                .is_none_or(|n| n.contains(&client) || n.contains(&v4_mapped(client)))
            && self
                .sni
                .as_ref()
                .is_none_or(|s| c.sni.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(s)))
            && self.route.as_ref().is_none_or(|r| *r == c.route_name())
            && self.backend.as_ref().is_none_or(|b| {
                c.pool
                    .name_of(usize::from(c.backend))
                    .is_some_and(|m| crate::backend::dns::stands_for(b, m))
            })
    }
}

/// An IPv4 address as IPv6 (`::ffff:a.b.c.d`), for a filter written that way.
fn v4_mapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(a) => IpAddr::V6(a.to_ipv6_mapped()),
        v6 @ IpAddr::V6(_) => v6,
    }
}

/// One connection as the admin socket shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionView {
    pub worker: usize,
    pub frontend: String,
    pub client: SocketAddr,
    pub sni: Option<String>,
    pub alpn: Option<String>,
    /// "TLSv1.2" or "TLSv1.3".
    pub version: String,
    pub route: Option<String>,
    pub backend: String,
    pub age_ms: u64,
    pub idle_ms: u64,
    /// Bytes from the client to the backend, and back.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Told to close, not gone yet.
    pub closing: bool,
}

impl ConnectionView {
    pub(crate) fn of(worker: usize, c: &ConnInfo, seen: Seen) -> ConnectionView {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        ConnectionView {
            worker,
            frontend: c.fe.cfg.name.clone(),
            client: c.client,
            sni: c.sni.as_deref().map(str::to_string),
            alpn: c.alpn.as_string(),
            version: match c.version {
                0x0304 => "TLSv1.3".into(),
                0x0303 => "TLSv1.2".into(),
                v => format!("0x{v:04x}"),
            },
            route: c.route.map(|_| c.route_name().to_string()),
            backend: c
                .pool
                .name_of(usize::from(c.backend))
                .unwrap_or_default()
                .to_string(),
            age_ms: ms(seen.age),
            idle_ms: ms(seen.idle),
            bytes_in: seen.moved.0,
            bytes_out: seen.moved.1,
            closing: seen.closing,
        }
    }
}
