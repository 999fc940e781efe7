//! `connection_log_format = "<template>"`: the access line as the operator's template spells
//! it (`config::log_template`), each `{field}` replaced by the connection's value, `-` for one
//! it has not got (as the `fields` format writes it).

use std::fmt::Write as _;

use crate::config::log_template::{LogField, LogTemplate, Piece};

/// What a line may say, gathered by the access log.
pub(crate) struct Values<'a> {
    pub accepted: std::time::SystemTime,
    pub frontend: &'a str,
    pub client: std::net::SocketAddr,
    pub worker: usize,
    pub balancer: Option<std::net::SocketAddr>,
    pub reason: Option<&'a str>,
    pub error: Option<String>,
    pub protocol: Option<&'a str>,
    pub cipher: Option<&'a str>,
    pub group: Option<&'a str>,
    pub resumed: bool,
    pub sni: Option<&'a str>,
    pub alpn: Option<&'a str>,
    pub listen: Option<std::net::SocketAddr>,
    pub client_cert: Option<&'a str>,
    pub client_verify: Option<String>,
    pub backend_source: Option<std::net::SocketAddr>,
    pub route: Option<&'a str>,
    pub backend: Option<&'a str>,
    pub id: &'a str,
    pub ja4: Option<&'a str>,
    pub up: u64,
    pub down: u64,
    pub handshake_ms: Option<u64>,
    pub connect_ms: Option<u64>,
    pub ms: u64,
}

/// `template` with `v`'s values.
pub(crate) fn render(template: &LogTemplate, v: &Values<'_>) -> String {
    let mut out = String::with_capacity(template.source.len() + 64);
    for piece in &template.pieces {
        match piece {
            Piece::Text(t) => out.push_str(t),
            Piece::Field(f) => field(&mut out, *f, v),
        }
    }
    out
}

fn dash<T: std::fmt::Display>(out: &mut String, value: Option<T>) {
    match value {
        Some(x) => {
            let _ = write!(out, "{x}");
        }
        None => out.push('-'),
    }
}

fn field(out: &mut String, f: LogField, v: &Values<'_>) {
    match f {
        LogField::Time => {
            let _ = write!(out, "{}", humantime::format_rfc3339_millis(v.accepted));
        }
        LogField::Frontend => out.push_str(v.frontend),
        LogField::Client => dash(out, Some(v.client)),
        LogField::ClientIp => dash(out, Some(v.client.ip())),
        LogField::ClientPort => dash(out, Some(v.client.port())),
        LogField::Worker => dash(out, Some(v.worker)),
        LogField::Balancer => dash(out, v.balancer),
        LogField::Reason => dash(out, v.reason),
        LogField::Error => dash(out, v.error.as_deref()),
        LogField::Protocol => dash(out, v.protocol),
        LogField::Cipher => dash(out, v.cipher),
        LogField::Group => dash(out, v.group),
        LogField::Resumed => dash(out, Some(v.resumed)),
        LogField::Sni => dash(out, v.sni),
        LogField::Alpn => dash(out, v.alpn),
        LogField::Listen => dash(out, v.listen),
        LogField::ClientCert => dash(out, v.client_cert),
        LogField::ClientVerify => dash(out, v.client_verify.as_deref()),
        LogField::BackendSource => dash(out, v.backend_source),
        LogField::Route => dash(out, v.route),
        LogField::Backend => dash(out, v.backend),
        LogField::Id => dash(out, (!v.id.is_empty()).then_some(v.id)),
        LogField::Ja4 => dash(out, v.ja4),
        LogField::Up => dash(out, Some(v.up)),
        LogField::Down => dash(out, Some(v.down)),
        LogField::HandshakeMs => dash(out, v.handshake_ms),
        LogField::ConnectMs => dash(out, v.connect_ms),
        LogField::Ms => dash(out, Some(v.ms)),
    }
}
