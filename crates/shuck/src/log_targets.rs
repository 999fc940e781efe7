//! `log_target = "journald"` and `"syslog"`: each event formatted as the target reads it, then
//! sent by the log thread (the same bounded queue as standard error: a target that lags drops
//! and counts lines, it never stops a worker).
//!
//! - journald's native protocol: one datagram per event, `KEY=value` lines: `PRIORITY` (syslog
//!   severity), `SYSLOG_IDENTIFIER=shuck`, `MESSAGE` (the line as the compact format shows it),
//!   and each of the event's fields under its name in capitals (`FRONTEND`, `CLIENT`, `REASON`,
//!   …), so `journalctl -p warning` and `journalctl REASON=handshake_timeout` work.
//! - RFC 5424 syslog: `<PRI>1 TIMESTAMP HOST shuck PID - [shuck@32473 key="value" …] MESSAGE`,
//!   facility daemon, to a collector by UDP (one datagram) or TCP (framed by length, RFC 6587
//!   octet counting); to a local socket (`/dev/log`), whose readers take RFC 3164 by default,
//!   `<PRI>Mmm dd hh:mm:ss shuck[PID]: MESSAGE key=value …`. 32473 is the enterprise number RFC 5612 sets aside for
//!   examples: shuck has none of its own.
//!
//! Values are kept on one line (a line break becomes a space): one event, one line.

use std::fmt::{self, Write as _};
use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;

use shuck_proxy::config::SyslogAddress;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Syslog's severity for a level (journald's `PRIORITY` is the same number).
fn severity(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// The daemon facility (3), as syslog's PRI counts it.
const FACILITY_DAEMON: u8 = 3;

/// An event's message and fields, each value on one line.
#[derive(Default)]
struct Collected {
    message: String,
    fields: Vec<(&'static str, String)>,
}

impl Collected {
    fn of(event: &Event<'_>) -> Collected {
        let mut c = Collected::default();
        event.record(&mut c);
        c
    }

    /// The message with its fields, as the compact format writes them.
    fn line(&self) -> String {
        let mut out = self.message.clone();
        for (k, v) in &self.fields {
            let _ = write!(out, " {k}={v}");
        }
        out
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

impl Visit for Collected {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let text = one_line(&format!("{value:?}"));
        if field.name() == "message" {
            self.message = text;
        } else {
            self.fields.push((field.name(), text));
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = one_line(value);
        } else {
            self.fields.push((field.name(), one_line(value)));
        }
    }
}

/// Events as journald's native protocol.
pub(crate) struct JournaldLines;

impl<S, N> FormatEvent<S, N> for JournaldLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let c = Collected::of(event);
        writeln!(w, "PRIORITY={}", severity(*event.metadata().level()))?;
        writeln!(w, "SYSLOG_IDENTIFIER=shuck")?;
        writeln!(w, "MESSAGE={}", c.line())?;
        for (k, v) in &c.fields {
            let name = journald_name(k);
            // journald keeps the names it reserves (and those starting `_`) for itself.
            if !name.is_empty()
                && !matches!(name.as_str(), "PRIORITY" | "MESSAGE" | "SYSLOG_IDENTIFIER")
            {
                writeln!(w, "{name}={v}")?;
            }
        }
        Ok(())
    }
}

/// A field name as journald accepts one: capitals, digits and `_`, not starting with `_`
/// (`log.target`, from a library's line, becomes `LOG_TARGET`).
fn journald_name(field: &str) -> String {
    let name: String = field
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    name.trim_start_matches('_').to_string()
}

/// Events as syslog messages: RFC 5424 to a collector (UDP, TCP), RFC 3164 to a local socket,
/// whose readers (journald's `/dev/log`, rsyslog's `imuxsock`) parse that form by default.
pub(crate) struct SyslogLines {
    pub(crate) hostname: String,
    pub(crate) local: bool,
}

impl<S, N> FormatEvent<S, N> for SyslogLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let c = Collected::of(event);
        let pri = FACILITY_DAEMON * 8 + severity(*event.metadata().level());
        if self.local {
            let now = time::OffsetDateTime::now_utc();
            let month = &format!("{:?}", now.month())[..3];
            return write!(
                w,
                "<{pri}>{month} {:>2} {:02}:{:02}:{:02} shuck[{}]: {}",
                now.day(),
                now.hour(),
                now.minute(),
                now.second(),
                std::process::id(),
                c.line()
            );
        }
        let now = humantime::format_rfc3339_micros(std::time::SystemTime::now());
        write!(
            w,
            "<{pri}>1 {now} {} shuck {} - ",
            self.hostname,
            std::process::id()
        )?;
        if c.fields.is_empty() {
            w.write_char('-')?;
        } else {
            w.write_str("[shuck@32473")?;
            for (k, v) in &c.fields {
                write!(w, " {k}=\"{}\"", sd_escape(v))?;
            }
            w.write_char(']')?;
        }
        write!(w, " {}", c.message)
    }
}

/// A structured-data value: `"`, `\` and `]` escaped (RFC 5424, 6.3.3).
fn sd_escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for ch in v.chars() {
        if matches!(ch, '"' | '\\' | ']') {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}

/// This host's name for the syslog header (`-` when it has none).
pub(crate) fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty() && h.is_ascii() && !h.contains(' '))
        .unwrap_or_else(|| "-".into())
}

/// Where the log thread sends each formatted event: one `write` is one event.
pub(crate) enum Sink {
    Datagram(UnixDatagram, PathBuf),
    Udp(UdpSocket, SocketAddr),
    /// Connected on first use and again after an error, at most once per [`RECONNECT`].
    Tcp(Option<TcpStream>, SocketAddr, Option<std::time::Instant>),
}

/// How long a TCP collector that failed is left alone (lines meanwhile are dropped, counted).
const RECONNECT: std::time::Duration = std::time::Duration::from_secs(5);

/// A datagram socket that never waits: a full receiver drops the line (counted).
fn datagram() -> io::Result<UnixDatagram> {
    let s = UnixDatagram::unbound()?;
    s.set_nonblocking(true)?;
    Ok(s)
}

impl Sink {
    pub(crate) fn journald(path: PathBuf) -> io::Result<Sink> {
        Ok(Sink::Datagram(datagram()?, path))
    }

    pub(crate) fn syslog(address: &SyslogAddress) -> io::Result<Sink> {
        Ok(match address {
            SyslogAddress::Unix(p) => Sink::Datagram(datagram()?, p.clone()),
            SyslogAddress::Udp(a) => {
                let any: SocketAddr = if a.is_ipv4() {
                    ([0, 0, 0, 0], 0).into()
                } else {
                    (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
                };
                let s = UdpSocket::bind(any)?;
                s.set_nonblocking(true)?;
                Sink::Udp(s, *a)
            }
            SyslogAddress::Tcp(a) => Sink::Tcp(None, *a, None),
        })
    }

    fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        match self {
            Sink::Datagram(s, path) => s.send_to(msg, &*path).map(drop),
            Sink::Udp(s, to) => s.send_to(msg, *to).map(drop),
            Sink::Tcp(stream, to, failed_at) => {
                if stream.is_none() {
                    if failed_at.is_some_and(|t| t.elapsed() < RECONNECT) {
                        return Err(io::ErrorKind::NotConnected.into());
                    }
                    let s = TcpStream::connect_timeout(to, std::time::Duration::from_secs(2))
                        .and_then(|s| {
                            s.set_write_timeout(Some(std::time::Duration::from_secs(2)))?;
                            Ok(s)
                        })
                        .inspect_err(|_| *failed_at = Some(std::time::Instant::now()))?;
                    *stream = Some(s);
                }
                let s = stream.as_mut().ok_or(io::ErrorKind::NotConnected)?;
                let framed = [format!("{} ", msg.len()).as_bytes(), msg].concat();
                s.write_all(&framed).inspect_err(|_| {
                    *stream = None;
                    *failed_at = Some(std::time::Instant::now());
                })
            }
        }
    }
}

impl Write for Sink {
    /// One event: sent whole, or counted as a dropped line when the target refuses it (a
    /// daemon not running, a full socket buffer), never retried by blocking.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.send(buf).is_err() {
            shuck_proxy::logging::LINES_DROPPED.inc();
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_data_values_are_escaped() {
        assert_eq!(sd_escape(r#"a"b\c]d"#), r#"a\"b\\c\]d"#);
        assert_eq!(one_line("a\nb\rc"), "a b c");
        assert_eq!(journald_name("log.target"), "LOG_TARGET");
        assert_eq!(journald_name("_x"), "X");
    }
}
