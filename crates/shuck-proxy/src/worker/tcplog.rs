//! `connection_log_format = "haproxy"`: a connection's line as HAProxy's `option tcplog` writes
//! it, so HAProxy's log tools (halog, the `HAPROXYTCP` patterns of Logstash and Fluentd) read
//! it, followed by what TLS settled:
//!
//! `client_ip:port [accept_date] frontend~ backend/server Tw/Tc/Tt bytes_read termination_state
//! actconn/feconn/beconn/srv_conn/retries srv_queue/backend_queue ssl_version ssl_cipher sni`
//!
//! The frontend carries HAProxy's `~` for a TLS frontend; `backend` is the route (`default`
//! without one) and `server` the backend's address, `<NOSRV>` when none was reached. Times are
//! HAProxy's: `Tw` the wait before the backend is tried (the handshake, here), `Tc` the connect,
//! `Tt` the whole connection, in ms, `-1` for a phase never reached. `bytes_read` counts what
//! the backend sent. shuck keeps no queues and counts retries nowhere: those and the per-backend
//! and per-server connection counts are 0; `actconn` and `feconn` are the process's and the
//! frontend's open connections when the line is written.

use std::fmt;

use crate::conn::conn_error::Reason;

/// What one line says, gathered by the access log.
pub(crate) struct TcpLog<'a> {
    pub client: std::net::SocketAddr,
    /// When the connection was accepted.
    pub accepted: std::time::SystemTime,
    pub frontend: &'a str,
    pub route: &'a str,
    pub server: Option<&'a str>,
    pub handshake_ms: Option<u64>,
    pub connect_ms: Option<u64>,
    pub total_ms: u64,
    pub bytes_down: u64,
    pub reason: Option<Reason>,
    pub connections: (usize, usize),
    pub tls: Option<(&'a str, &'a str)>,
    pub sni: Option<&'a str>,
}

/// HAProxy's accept date, `28/Nov/2026:06:52:03.123` (UTC).
fn accept_date(t: std::time::SystemTime) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let at = time::OffsetDateTime::from(t);
    format!(
        "{:02}/{}/{}:{:02}:{:02}:{:02}.{:03}",
        at.day(),
        MONTHS[usize::from(u8::from(at.month())) - 1],
        at.year(),
        at.hour(),
        at.minute(),
        at.second(),
        at.millisecond()
    )
}

/// A time in ms, or HAProxy's -1 for a phase never reached.
struct Ms(Option<u64>);

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("-1"),
        }
    }
}

impl fmt::Display for TcpLog<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Tc: from the handshake's end to the backend's answer.
        let tc = self
            .connect_ms
            .map(|c| c.saturating_sub(self.handshake_ms.unwrap_or(0)));
        let (tls_version, cipher) = self.tls.unwrap_or(("-", "-"));
        write!(
            f,
            "{}:{} [{}] {}~ {}/{} {}/{}/{} {} {} {}/{}/0/0/0 0/0 {} {} {}",
            self.client.ip(),
            self.client.port(),
            accept_date(self.accepted),
            self.frontend,
            self.route,
            self.server.unwrap_or("<NOSRV>"),
            Ms(self.handshake_ms),
            Ms(tc),
            self.total_ms,
            self.bytes_down,
            self.reason.map_or("--", Reason::termination_state),
            self.connections.0,
            self.connections.1,
            tls_version,
            cipher,
            self.sni.unwrap_or("-"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_haproxys() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_795_848_723_123);
        assert_eq!(accept_date(t), "28/Nov/2026:06:52:03.123");
    }
}
