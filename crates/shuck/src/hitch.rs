//! `shuck import hitch FILE`: a hitch configuration (hitch.conf(5)) written as an equivalent
//! shuck.toml, with a comment at each option that does not carry over saying why, so an operator
//! moving from hitch starts from their own file rather than from the documentation.
//!
//! hitch's file is a list of `key = value` lines, where a value is a quoted string, bare tokens
//! (`on`, `4`, `TLSv1.2 TLSv1.3`) or a `{ … }` block of the same (a frontend, a pem-file).

use shuck_proxy::config::OPENSSL_TLS12_SUITES;

/// A value in a hitch file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Text(String),
    Block(Vec<(String, Value)>),
}

impl Value {
    fn text(&self) -> Option<&str> {
        match self {
            Value::Text(t) => Some(t),
            Value::Block(_) => None,
        }
    }

    /// hitch's booleans: on/off, yes/no, true/false, 1/0.
    fn on(&self) -> bool {
        matches!(
            self.text().map(str::to_ascii_lowercase).as_deref(),
            Some("on" | "yes" | "true" | "1")
        )
    }

    fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Block(b) => b.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            Value::Text(_) => None,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Equals,
    Open,
    Close,
    Newline,
}

fn tokens(text: &str) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '#' => break,
                '=' => out.push(Token::Equals),
                '{' => out.push(Token::Open),
                '}' => out.push(Token::Close),
                '"' => {
                    let mut s = String::new();
                    loop {
                        match chars.next() {
                            Some('"') => break,
                            Some('\\') => s.extend(chars.next()),
                            Some(c) => s.push(c),
                            None => return Err(format!("line {}: unclosed quote", n + 1)),
                        }
                    }
                    out.push(Token::Word(s));
                }
                c if c.is_whitespace() => {}
                c => {
                    let mut s = String::from(c);
                    while let Some(&c) = chars.peek() {
                        if c.is_whitespace() || "={}#\"".contains(c) {
                            break;
                        }
                        s.push(c);
                        chars.next();
                    }
                    out.push(Token::Word(s));
                }
            }
        }
        out.push(Token::Newline);
    }
    Ok(out)
}

/// The assignments of a file (or of a block, up to its `}`), from `toks[*at..]`. A value's bare
/// words run to the end of the line, or to a word followed by `=` (the next key, in a block
/// written on one line).
fn assignments(
    toks: &[Token],
    at: &mut usize,
    in_block: bool,
) -> Result<Vec<(String, Value)>, String> {
    let mut out = Vec::new();
    loop {
        let Some(tok) = toks.get(*at) else {
            return if in_block {
                Err("a block is not closed with }".into())
            } else {
                Ok(out)
            };
        };
        *at += 1;
        match tok {
            Token::Newline => {}
            Token::Close if in_block => return Ok(out),
            Token::Word(key) => {
                if toks.get(*at) != Some(&Token::Equals) {
                    return Err(format!("{key}: expected \"=\""));
                }
                *at += 1;
                while toks.get(*at) == Some(&Token::Newline) {
                    *at += 1;
                }
                let value = if toks.get(*at) == Some(&Token::Open) {
                    *at += 1;
                    Value::Block(assignments(toks, at, true)?)
                } else {
                    let mut words = Vec::new();
                    while let Some(Token::Word(w)) = toks.get(*at) {
                        if !words.is_empty() && toks.get(*at + 1) == Some(&Token::Equals) {
                            break;
                        }
                        words.push(w.clone());
                        *at += 1;
                    }
                    Value::Text(words.join(" "))
                };
                out.push((key.clone(), value));
            }
            t => return Err(format!("unexpected {t:?}")),
        }
    }
}

fn parse(text: &str) -> Result<Vec<(String, Value)>, String> {
    let toks = tokens(text)?;
    assignments(&toks, &mut 0, false)
}

/// A TOML string, as the toml crate writes one.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn list(items: &[String]) -> String {
    let q: Vec<String> = items.iter().map(|s| quoted(s)).collect();
    format!("[{}]", q.join(", "))
}

/// Lines of the output: settings and the comments beside them.
#[derive(Default)]
struct Lines(Vec<String>);

impl Lines {
    /// Sets `key` in the current section (the last `[[frontend]]`, or the top), replacing an
    /// earlier value there: a frontend's own option overrides the file's, and TOML allows a key
    /// once.
    fn set(&mut self, key: &str, value: String) {
        let prefix = format!("{key} = ");
        let mut line = value;
        line.insert_str(0, &prefix);
        let start = self
            .0
            .iter()
            .rposition(|l| l == "[[frontend]]")
            .map_or(0, |i| i + 1);
        match self.0[start..].iter_mut().find(|l| l.starts_with(&prefix)) {
            Some(existing) => *existing = line,
            None => self.0.push(line),
        }
    }

    /// A hitch option that does not carry over, and why.
    fn dropped(&mut self, key: &str, value: &Value, why: &str) {
        let shown = match value {
            Value::Text(t) => t.clone(),
            Value::Block(_) => "{ … }".into(),
        };
        self.note(&format!("hitch: {key} = {shown}: {why}"));
    }

    /// A comment: one line whatever `text` holds (a line break in a file name would otherwise
    /// end the comment and start a setting).
    fn note(&mut self, text: &str) {
        self.0.push(format!("# {}", one_line(text)));
    }

    /// Sets `key` to the number `text` is, or says why not.
    fn number(&mut self, key: &str, text: &str, hitch_key: &str) {
        match text.trim().parse::<u32>() {
            Ok(n) => self.set(key, n.to_string()),
            Err(_) => self.note(&format!(
                "hitch: {hitch_key} = {text}: not a number, left out"
            )),
        }
    }
}

/// `text` with control characters (line breaks among them) written as escapes.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// hitch's "[HOST]:PORT" (or "HOST:PORT"), "*" for every address, as shuck's listen addresses.
fn listen_addresses(spec: &str) -> Vec<String> {
    let spec = spec.split('+').next().unwrap_or(spec);
    let (host, port) = match spec.rsplit_once(':') {
        Some((h, p)) => (h.trim_start_matches('[').trim_end_matches(']'), p),
        None => ("*", spec),
    };
    match host {
        "*" | "" => vec![format!("0.0.0.0:{port}"), format!("[::]:{port}")],
        h if h.contains(':') => vec![format!("[{h}]:{port}")],
        h => vec![format!("{h}:{port}")],
    }
}

/// A hitch frontend: its addresses and its own options.
struct Frontend {
    listen: Vec<String>,
    options: Vec<(String, Value)>,
}

fn frontend_of(value: &Value) -> Frontend {
    match value {
        Value::Text(spec) => {
            let mut options = Vec::new();
            if let Some((_, cert)) = spec.split_once('+') {
                options.push(("pem-file".to_string(), Value::Text(cert.to_string())));
            }
            Frontend {
                listen: listen_addresses(spec),
                options,
            }
        }
        Value::Block(b) => {
            let host = value.get("host").and_then(Value::text).unwrap_or("*");
            let port = value.get("port").and_then(Value::text).unwrap_or("8443");
            Frontend {
                listen: listen_addresses(&format!("[{host}]:{port}")),
                options: b
                    .iter()
                    .filter(|(k, _)| k != "host" && k != "port")
                    .cloned()
                    .collect(),
            }
        }
    }
}

const TLS13_SUITES: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// `ciphers` (TLS 1.2, OpenSSL names) and `ciphersuites` (TLS 1.3) as shuck's one list.
fn cipher_suites(ciphers: Option<&Value>, suites: Option<&Value>, out: &mut Lines) {
    if ciphers.is_none() && suites.is_none() {
        return;
    }
    let mut tls12: Vec<String> = Vec::new();
    if let Some(v) = ciphers {
        let names: Vec<&str> = v.text().unwrap_or("").split(':').collect();
        let keywords = names.iter().any(|n| {
            n.starts_with(['!', '+', '-', '@']) || n.chars().all(|c| c.is_ascii_uppercase())
        });
        let (known, unknown): (Vec<&str>, Vec<&str>) = names
            .iter()
            .partition(|n| OPENSSL_TLS12_SUITES.iter().any(|(o, _)| o == *n));
        if keywords || known.is_empty() {
            out.dropped(
                "ciphers",
                v,
                "an OpenSSL cipher string (keywords or no suite rustls has): shuck's TLS 1.2 suites are kept (ECDHE with AES-GCM or ChaCha20-Poly1305 only)",
            );
        } else {
            if !unknown.is_empty() {
                out.note(&format!(
                    "hitch: ciphers {} left out: rustls has no such suite (shuck offers ECDHE with AES-GCM or ChaCha20-Poly1305 only)",
                    unknown.join(":")
                ));
            }
            tls12 = known
                .iter()
                .filter_map(|n| {
                    OPENSSL_TLS12_SUITES
                        .iter()
                        .find(|(o, _)| o == n)
                        .map(|(_, s)| (*s).to_string())
                })
                .collect();
        }
    }
    if tls12.is_empty() {
        tls12 = OPENSSL_TLS12_SUITES
            .iter()
            .map(|(_, s)| (*s).to_string())
            .collect();
    }
    let mut tls13: Vec<String> = TLS13_SUITES.iter().map(|s| (*s).to_string()).collect();
    if let Some(v) = suites {
        let given: Vec<&str> = v.text().unwrap_or("").split(':').collect();
        let known: Vec<String> = given
            .iter()
            .filter(|n| TLS13_SUITES.contains(n))
            .map(|n| (*n).to_string())
            .collect();
        if known.len() < given.len() {
            out.note(&format!(
                "hitch: ciphersuites {}: only {} carried over (rustls has no CCM suites)",
                v.text().unwrap_or(""),
                known.join(":")
            ));
        }
        if !known.is_empty() {
            tls13 = known;
        }
    }
    tls13.extend(tls12);
    out.set("ciphersuites", list(&tls13));
}

/// A frontend's options (the file's, then the frontend's own) as shuck keys.
#[allow(clippy::too_many_lines)] // Reason: one arm per hitch option, in hitch.conf(5)'s order.
fn frontend_keys(
    options: &[(String, Value)],
    (base, listen): (&std::path::Path, &[String]),
    out: &mut Lines,
) {
    let last = |key: &str| options.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v);
    // (chain, key apart); directories end in '/'.
    let mut certificates: Vec<(String, Option<String>)> = Vec::new();
    let mut handled = std::collections::BTreeSet::new();
    for (key, value) in options {
        handled.insert(key.as_str());
        let text = value.text().unwrap_or("");
        match key.as_str() {
            "pem-file" => match value {
                Value::Text(p) => certificates.push((p.clone(), None)),
                Value::Block(_) => {
                    let cert = value.get("cert").and_then(Value::text).unwrap_or("");
                    let key = value.get("private-key").and_then(Value::text);
                    certificates.push((cert.to_string(), key.map(str::to_string)));
                    if let Some(ocsp) = value.get("ocsp-resp-file").and_then(Value::text) {
                        out.note(&format!(
                            "hitch: ocsp-resp-file = {ocsp}: shuck staples the DER response in `<certificate>.ocsp` beside the certificate (ocsp = \"file\", the default): copy it there"
                        ));
                    }
                }
            },
            "pem-dir" => {
                out.note(&format!("hitch: pem-dir = {text}: shuck loads the *.pem files of the directory (hitch: every file, or those pem-dir-glob matches)"));
                certificates.push((format!("{}/", text.trim_end_matches('/')), None));
            }
            "pem-dir-glob" if text == "*.pem" => {}
            "pem-dir-glob" => out.dropped(key, value, "shuck loads every *.pem of a directory"),
            "backend" if text.starts_with('/') => {
                out.set("backend", quoted(&format!("unix:{text}")));
            }
            "backend" => out.set("backend", quoted(&listen_addresses(text)[0])),
            "alpn-protos" => {
                let protos: Vec<String> = text
                    .split(',')
                    .map(|p| p.trim().to_string())
                    .filter(|p| !p.is_empty())
                    .collect();
                out.set("alpn", list(&protos));
            }
            "tls-protos" => {
                let (keep, drop): (Vec<&str>, Vec<&str>) = text
                    .split_whitespace()
                    .partition(|p| matches!(*p, "TLSv1.2" | "TLSv1.3"));
                if !drop.is_empty() {
                    out.note(&format!(
                        "hitch: tls-protos {}: left out, shuck speaks TLS 1.2 and 1.3 only",
                        drop.join(" ")
                    ));
                }
                let versions: Vec<String> = keep.iter().map(|p| p.replace("TLSv", "TLS")).collect();
                if !versions.is_empty() {
                    out.set("protocols", list(&versions));
                }
            }
            "ssl" | "tls" => out.dropped(
                key,
                value,
                "deprecated in hitch; shuck speaks TLS 1.2 and 1.3",
            ),
            "prefer-server-ciphers" => {
                out.dropped(key, value, "shuck always chooses by its own order");
            }
            "ecdh-curve" if text == "auto" => {}
            "ecdh-curve" => {
                let groups: Vec<String> = text.split(':').map(str::to_string).collect();
                out.set("groups", list(&groups));
            }
            "sni-nomatch-abort" if value.on() => out.set("unknown_sni", quoted("reject")),
            "sni-nomatch-abort" => out.set("unknown_sni", quoted("default")),
            "client-verify" => {
                let mode = match text {
                    "required" | "require" => "required",
                    "optional" => "optional",
                    _ => "none",
                };
                out.set("client_auth", quoted(mode));
            }
            "client-verify-ca" => out.set("client_ca", quoted(text)),
            "write-proxy-v1" if value.on() => out.set("proxy_protocol", quoted("v1")),
            "write-proxy-v2" if value.on() => out.set("proxy_protocol", quoted("v2")),
            "write-proxy-v1" | "write-proxy-v2" | "write-ip" | "proxy-proxy" if !value.on() => {}
            "write-ip" => out.dropped(
                key,
                value,
                "shuck sends PROXY v1 or v2 headers, not a bare address",
            ),
            "proxy-proxy" => {
                out.set("accept_proxy", "true".into());
                out.set("proxy_protocol", quoted("v2"));
                out.note("hitch: proxy-proxy = on: shuck reads the balancer's header and writes its own (v2 here; \"v1\" if the backend wants that) with the client's addresses from it");
            }
            "proxy-tlv" if !value.on() && last("write-proxy-v2").is_some_and(Value::on) => {
                out.set("proxy_protocol_tlvs", "[]".into());
            }
            "backlog" => out.number("backlog", text, key),
            "enable-tcp-fastopen" | "recv-bufsize" | "send-bufsize" => {
                out.dropped(key, value, "shuck leaves these to the kernel's defaults");
            }
            "session-cache" => match text.parse::<usize>() {
                Ok(0) | Err(_) => {}
                Ok(n) => out.set("session_cache_size", n.to_string()),
            },
            "ocsp-dir" => {
                out.set("ocsp", quoted("fetch"));
                out.note(&format!("hitch: ocsp-dir = {text}: shuck fetches staples itself and keeps them in state_dir/ocsp/"));
            }
            "ocsp-verify-staple" => {
                out.dropped(key, value, "shuck always checks a staple before serving it");
            }
            "ocsp-connect-tmo" | "ocsp-resp-tmo" | "ocsp-refresh-interval" => out.dropped(
                key,
                value,
                "shuck's OCSP fetching times itself from the response's nextUpdate",
            ),
            "keepalive" => out.dropped(
                key,
                value,
                "shuck sets no TCP keepalive; idle_timeout closes silent connections",
            ),
            "backend-refresh" => out.dropped(
                key,
                value,
                "shuck resolves backend names at start and on every reload (SIGHUP)",
            ),
            // Read elsewhere (ciphers with ciphersuites below), or nothing to write.
            "ciphers" | "ciphersuites" | "proxy-tlv" | "match-global-certs" => {}
            _ => out.dropped(key, value, "not known to this converter"),
        }
    }
    cipher_suites(last("ciphers"), last("ciphersuites"), out);
    // Relative paths were relative to hitch's working directory; the converted file is read
    // from wherever it is put, so they are made absolute from the hitch file's directory.
    let absolute = |p: &str| base.join(p).display().to_string();
    let certificates: Vec<(String, Option<String>)> = certificates
        .into_iter()
        .map(|(c, k)| (absolute(&c), k.as_deref().map(absolute)))
        .collect();
    let loopback_only = listen.iter().all(|l| {
        l.parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback())
    });
    if certificates.is_empty() && loopback_only {
        out.note("hitch.conf names no usable pem-file (hitch may take it on its command line): list your bundles in certificates; self-signed until then (on loopback only)");
        out.set("self_signed", "true".into());
    } else if certificates.is_empty() {
        // A self-signed certificate on a public address would be served to real clients.
        out.note("hitch.conf names no usable pem-file (hitch may take it on its command line): list your bundles here, e.g. certificates = [\"/etc/hitch/site.pem\"]; until then `shuck check` refuses this file");
    } else {
        let entries: Vec<String> = certificates
            .iter()
            .map(|(c, k)| match k {
                Some(k) => format!("{{ cert = {}, key = {} }}", quoted(c), quoted(k)),
                None => quoted(c),
            })
            .collect();
        out.set("certificates", format!("[{}]", entries.join(", ")));
        // hitch serves its last pem-file to a client whose SNI matches none; shuck its first
        // unless told.
        let last_file = certificates.iter().rev().find(|(c, _)| !c.ends_with('/'));
        if let Some((last, _)) = last_file.filter(|_| certificates.len() > 1) {
            out.set("default_certificate", quoted(last));
        }
    }
    if !handled.contains("backend") {
        out.note("hitch's default backend");
        out.set("backend", quoted("127.0.0.1:8000"));
    }
}

/// Options that belong to the process, not to a frontend.
fn process_keys(options: &[(String, Value)], out: &mut Lines) {
    for (key, value) in options {
        let text = value.text().unwrap_or("");
        match key.as_str() {
            "workers" if text.trim() == "auto" => out.note(
                "hitch: workers = auto: left out, shuck's default is one worker per core",
            ),
            "workers" => out.number("workers", text, key),
            "user" => out.set("user", quoted(text)),
            "group" => out.set("group", quoted(text)),
            "log-level" => {
                let level = match text {
                    "0" | "1" => "error",
                    _ => "info",
                };
                out.set("log_level", quoted(level));
            }
            "quiet" if value.on() => out.set("log_level", quoted("error")),
            "daemon" if !value.on() => {}
            "daemon" => out.dropped(key, value, "shuck stays in the foreground: run it under systemd (contrib/shuck.service) or another supervisor"),
            "chroot" => out.dropped(key, value, "no chroot in shuck (docs/configuration.md, \"user\", says why and what to use instead)"),
            "syslog" | "syslog-facility" | "log-filename" => out.dropped(key, value, "shuck logs to standard error, which systemd's journal (or your supervisor) collects"),
            "ssl-engine" => out.dropped(key, value, "no OpenSSL engines: shuck's crypto is aws-lc"),
            _ => {}
        }
    }
}

const PROCESS_KEYS: [&str; 11] = [
    "workers",
    "user",
    "group",
    "log-level",
    "quiet",
    "daemon",
    "chroot",
    "syslog",
    "syslog-facility",
    "log-filename",
    "ssl-engine",
];

/// The shuck.toml equivalent to the hitch configuration `text`.
pub(crate) fn convert(text: &str, source: &str) -> Result<String, String> {
    let all = parse(text)?;
    let base = std::path::Path::new(source)
        .parent()
        .unwrap_or(std::path::Path::new("."));
    let (process, rest): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|(k, _)| PROCESS_KEYS.contains(&k.as_str()));
    let (fronts, shared): (Vec<_>, Vec<_>) = rest.into_iter().partition(|(k, _)| k == "frontend");
    let mut frontends: Vec<Frontend> = fronts.iter().map(|(_, v)| frontend_of(v)).collect();
    let mut out = Lines::default();
    out.note(&format!(
        "Converted from {source} by `shuck import hitch`; check it with `shuck check --config FILE`."
    ));
    process_keys(&process, &mut out);
    if frontends.is_empty() {
        out.note("hitch.conf has no frontend: hitch's default, every address on port 8443");
        frontends.push(frontend_of(&Value::Text("[*]:8443".into())));
    }
    let one = frontends.iter().all(|f| f.options.is_empty());
    if one {
        let listen: Vec<String> = frontends.iter().flat_map(|f| f.listen.clone()).collect();
        frontends = vec![Frontend {
            listen,
            options: Vec::new(),
        }];
    }
    for (i, fe) in frontends.iter().enumerate() {
        out.0.push(String::new());
        out.0.push("[[frontend]]".into());
        let name = if one {
            "hitch".to_string()
        } else {
            format!("hitch{i}")
        };
        out.set("name", quoted(&name));
        out.set("listen", list(&fe.listen));
        // The frontend's own pem-files replace the file's, unless match-global-certs says both.
        let own_certs = fe.options.iter().any(|(k, _)| k == "pem-file");
        let global_too = fe
            .options
            .iter()
            .any(|(k, v)| k == "match-global-certs" && v.on());
        let mut options: Vec<(String, Value)> = shared
            .iter()
            .filter(|(k, _)| !(own_certs && !global_too && k == "pem-file"))
            .cloned()
            .collect();
        options.extend(fe.options.iter().cloned());
        frontend_keys(&options, (base, &fe.listen), &mut out);
    }
    Ok(out.0.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_bare_tokens_quotes_and_comments_are_read() {
        let got = parse(
            "frontend = {\n  host = \"*\"\n  port = \"443\" # https\n}\ntls-protos = TLSv1.2 TLSv1.3\npem-file = { cert = \"a # b.pem\" private-key = \"k\" }\n",
        )
        .unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(
            got[0].1.get("port").and_then(Value::text),
            Some("443"),
            "{got:?}"
        );
        assert_eq!(got[1].1.text(), Some("TLSv1.2 TLSv1.3"));
        assert_eq!(
            got[2].1.get("cert").and_then(Value::text),
            Some("a # b.pem")
        );
        assert!(parse("frontend = {\nport = 1\n").is_err());
        assert!(parse("backend \"x\"").is_err());
    }

    #[test]
    fn addresses_in_hitch_notation_become_shuck_addresses() {
        assert_eq!(listen_addresses("[*]:443"), ["0.0.0.0:443", "[::]:443"]);
        assert_eq!(listen_addresses("[127.0.0.1]:6086"), ["127.0.0.1:6086"]);
        assert_eq!(listen_addresses("[::1]:443+/c.pem"), ["[::1]:443"]);
    }

    #[test]
    fn what_does_not_carry_over_is_a_comment_saying_why() {
        let out = convert(
            "daemon = on\nwrite-ip = on\nciphers = \"HIGH:!aNULL\"\nfoo = bar\n",
            "hitch.conf",
        )
        .unwrap();
        for want in [
            "# hitch: daemon = on: shuck stays in the foreground",
            "# hitch: write-ip = on:",
            "# hitch: ciphers = HIGH:!aNULL: an OpenSSL cipher string",
            "# hitch: foo = bar: not known to this converter",
        ] {
            assert!(out.contains(want), "{want}\n{out}");
        }
        let out = convert("backend = \"/run/varnish.sock\"\n", "h").unwrap();
        assert!(
            out.contains("backend = \"unix:/run/varnish.sock\""),
            "{out}"
        );
        // A frontend's own option overrides the file's (one key, valid TOML); hitch's default
        // certificate is its last; relative paths are from the hitch file's directory.
        let out = convert(
            "tls-protos = TLSv1.2\npem-file = \"a.pem\"\npem-file = \"/c/b.pem\"\nfrontend = {\n host = \"*\"\n port = \"443\"\n tls-protos = TLSv1.3\n sni-nomatch-abort = off\n}\nsni-nomatch-abort = on\n",
            "/etc/hitch/hitch.conf",
        )
        .unwrap();
        let parsed: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        let fe = &parsed["frontend"][0];
        assert_eq!(fe["protocols"].as_array().map(Vec::len), Some(1), "{out}");
        assert_eq!(fe["protocols"][0].as_str(), Some("TLS1.3"), "{out}");
        assert_eq!(fe["unknown_sni"].as_str(), Some("default"), "{out}");
        assert_eq!(
            fe["certificates"][0].as_str(),
            Some("/etc/hitch/a.pem"),
            "{out}"
        );
        assert_eq!(
            fe["default_certificate"].as_str(),
            Some("/c/b.pem"),
            "{out}"
        );
        // Debian's hitch is built without its session cache, so only here.
        let out = convert("session-cache = 1000\n", "h").unwrap();
        assert!(out.contains("session_cache_size = 1000"), "{out}");
    }

    /// Nothing in the hitch file or its path reaches the output but as a TOML value or inside one
    /// comment line: a path holding a line break, or a value holding quotes, `=` or `#`, cannot
    /// add a setting. (hitch's own grammar keeps a quoted value on one line.)
    #[test]
    fn line_breaks_and_quotes_in_names_and_values_add_no_setting() {
        let value = r#"x\" metrics_listen = \"0.0.0.0:9911\" #"#;
        let conf = format!(
            "workers = \"2 admin = 1\"\nbacklog = \"9 user = \\\"root\\\"\"\nciphers = \"{value}\"\nfoo = \"{value}\"\nocsp-dir = \"{value}\"\npem-dir = \"/d{value}\"\nfrontend = {{\n host = \"*\"\n port = \"443\"\n}}\n",
        );
        let parsed = parse(&conf).unwrap_or_else(|e| panic!("{e}\n{conf}"));
        assert!(
            parsed
                .iter()
                .any(|(_, v)| v.text().is_some_and(|t| t.contains("\" metrics_listen"))),
            "the hitch file holds quotes in values: {parsed:?}"
        );
        let source = "/etc/x\nmetrics_listen = \"0.0.0.0:9911\"\r\n#/hitch.conf";
        let out = convert(&conf, source).unwrap();
        let toml: toml::Value = toml::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        let top: Vec<&String> = toml.as_table().unwrap().keys().collect();
        assert_eq!(top, ["frontend"], "{out}");
        let fe = toml["frontend"][0].as_table().unwrap();
        for key in ["metrics_listen", "user", "admin", "backlog"] {
            assert!(!fe.contains_key(key), "{key}: {out}");
        }
        assert_eq!(
            fe["certificates"][0].as_str(),
            Some(r#"/dx" metrics_listen = "0.0.0.0:9911" #/"#),
            "a value is kept whole, as a TOML string: {out}"
        );
        for line in out.lines() {
            assert!(
                line.is_empty()
                    || line.starts_with('#')
                    || line.starts_with("[[")
                    || line.contains(" = "),
                "{line:?}: {out}"
            );
        }
        assert!(out.contains("not a number"), "workers, backlog: {out}");
    }
}
