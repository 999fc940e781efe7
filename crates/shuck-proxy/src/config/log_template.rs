//! `connection_log_format = "<template>"`: an access line written as the operator spells it, as
//! nginx's `log_format` does: text with `{name}` for the connection's fields (the names of the
//! `fields` format), `{{` and `}}` for braces. Parsed once, at load; an unknown name is an error
//! naming the names there are.

use std::fmt;

/// A field a template may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogField {
    /// When the connection was accepted, RFC 3339 with milliseconds (UTC).
    Time,
    Frontend,
    /// The client's address and port; `client_ip` and `client_port` apart.
    Client,
    ClientIp,
    ClientPort,
    Worker,
    Balancer,
    Reason,
    Error,
    Protocol,
    Cipher,
    Group,
    Resumed,
    Sni,
    Alpn,
    Listen,
    ClientCert,
    ClientVerify,
    BackendSource,
    Route,
    Backend,
    Id,
    Ja4,
    Up,
    Down,
    HandshakeMs,
    ConnectMs,
    Ms,
}

impl LogField {
    pub const ALL: [LogField; 28] = [
        LogField::Time,
        LogField::Frontend,
        LogField::Client,
        LogField::ClientIp,
        LogField::ClientPort,
        LogField::Worker,
        LogField::Balancer,
        LogField::Reason,
        LogField::Error,
        LogField::Protocol,
        LogField::Cipher,
        LogField::Group,
        LogField::Resumed,
        LogField::Sni,
        LogField::Alpn,
        LogField::Listen,
        LogField::ClientCert,
        LogField::ClientVerify,
        LogField::BackendSource,
        LogField::Route,
        LogField::Backend,
        LogField::Id,
        LogField::Ja4,
        LogField::Up,
        LogField::Down,
        LogField::HandshakeMs,
        LogField::ConnectMs,
        LogField::Ms,
    ];

    /// Its name in a template, the same as in the `fields` format.
    pub fn name(self) -> &'static str {
        match self {
            LogField::Time => "time",
            LogField::Frontend => "frontend",
            LogField::Client => "client",
            LogField::ClientIp => "client_ip",
            LogField::ClientPort => "client_port",
            LogField::Worker => "worker",
            LogField::Balancer => "balancer",
            LogField::Reason => "reason",
            LogField::Error => "error",
            LogField::Protocol => "protocol",
            LogField::Cipher => "cipher",
            LogField::Group => "group",
            LogField::Resumed => "resumed",
            LogField::Sni => "sni",
            LogField::Alpn => "alpn",
            LogField::Listen => "listen",
            LogField::ClientCert => "client_cert",
            LogField::ClientVerify => "client_verify",
            LogField::BackendSource => "backend_source",
            LogField::Route => "route",
            LogField::Backend => "backend",
            LogField::Id => "id",
            LogField::Ja4 => "ja4",
            LogField::Up => "up",
            LogField::Down => "down",
            LogField::HandshakeMs => "handshake_ms",
            LogField::ConnectMs => "connect_ms",
            LogField::Ms => "ms",
        }
    }
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum Piece {
    Text(String),
    Field(LogField),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LogTemplate {
    pub source: String,
    pub pieces: Vec<Piece>,
}

impl fmt::Display for LogTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl LogTemplate {
    /// `text` parsed; an error says which name is unknown, or where a brace is left open.
    pub fn parse(text: &str) -> Result<LogTemplate, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(i) = rest.find(['{', '}']) {
            literal.push_str(&rest[..i]);
            let (brace, after) = (rest.as_bytes()[i], &rest[i + 1..]);
            if after.as_bytes().first() == Some(&brace) {
                literal.push(char::from(brace));
                rest = &after[1..];
                continue;
            }
            if brace == b'}' {
                return Err(format!(
                    "a lone `}}` at byte {i} of the template (write `}}}}`)"
                ));
            }
            let end = after
                .find('}')
                .ok_or_else(|| format!("`{{` at byte {i} is not closed"))?;
            let name = &after[..end];
            let field = LogField::ALL
                .into_iter()
                .find(|f| f.name() == name)
                .ok_or_else(|| {
                    let names: Vec<&str> = LogField::ALL.iter().map(|f| f.name()).collect();
                    format!(
                        "{{{name}}} is not a field; the fields: {}",
                        names.join(", ")
                    )
                })?;
            if !literal.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut literal)));
            }
            pieces.push(Piece::Field(field));
            rest = &after[end + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        if !pieces.iter().any(|p| matches!(p, Piece::Field(_))) {
            return Err("names no field: write fields as {client}, {sni}, {ms}, ...".into());
        }
        Ok(LogTemplate {
            source: text.to_string(),
            pieces,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_text_and_escaped_braces() {
        let t = LogTemplate::parse("{client} [{time}] {{x}} {sni} {ms}ms").expect("parsed");
        assert_eq!(
            t.pieces,
            vec![
                Piece::Field(LogField::Client),
                Piece::Text(" [".into()),
                Piece::Field(LogField::Time),
                Piece::Text("] {x} ".into()),
                Piece::Field(LogField::Sni),
                Piece::Text(" ".into()),
                Piece::Field(LogField::Ms),
                Piece::Text("ms".into()),
            ]
        );
        let e = LogTemplate::parse("{clinet}").expect_err("unknown");
        assert!(
            e.contains("{clinet} is not a field; the fields: time, frontend"),
            "{e}"
        );
        assert!(LogTemplate::parse("{client").is_err());
        assert!(LogTemplate::parse("a } b {ms}").is_err());
        assert!(LogTemplate::parse("no fields").is_err());
    }
}
