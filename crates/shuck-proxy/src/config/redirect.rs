//! `[[redirect]]`: a plain-HTTP listener (port 80) that sends every request to the same host and
//! path over HTTPS, and answers the ACME HTTP-01 challenge (`/.well-known/acme-challenge/…`).

use std::net::SocketAddr;

use serde::Deserialize;

use super::{key_err, KeyError, OneOrMany};

/// `[[redirect]]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRedirect {
    pub listen: Option<OneOrMany<String>>,
    /// 301 (the default) or 308.
    pub code: Option<u16>,
    /// The port put in the `Location` (443, the default, is left out).
    pub https_port: Option<u16>,
    /// Where a request for a host no frontend serves goes (else 421 Misdirected Request).
    pub unknown_host: Option<String>,
}

/// What a request for a host no frontend serves gets.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub enum UnknownHost {
    /// 421 Misdirected Request.
    Misdirected,
    /// A redirect to this `https://` URL, whatever the path asked.
    To(String),
}

/// One plain-HTTP listener, validated.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Redirect {
    pub listen: Vec<SocketAddr>,
    /// 301 or 308.
    pub code: u16,
    pub https_port: u16,
    pub unknown_host: UnknownHost,
}

impl RawRedirect {
    pub(super) fn validate(&self, i: usize) -> Result<Redirect, KeyError> {
        let at = |key: &str| format!("redirect[{i}].{key}");
        let raw = self
            .listen
            .clone()
            .map(OneOrMany::into_vec)
            .unwrap_or_default();
        if raw.is_empty() {
            return Err(key_err(
                &at("listen"),
                "missing: the addresses to answer plain HTTP on (\"*:80\")",
            ));
        }
        let mut listen = Vec::new();
        for entry in &raw {
            for addr in super::listen::listen_addresses(entry)
                .map_err(|e| key_err(&at("listen"), e.message))?
            {
                if listen.contains(&addr) {
                    return Err(key_err(&at("listen"), format!("{addr} is listed twice")));
                }
                listen.push(addr);
            }
        }
        let code = self.code.unwrap_or(301);
        if code != 301 && code != 308 {
            return Err(key_err(
                &at("code"),
                format!("{code} is not 301 or 308 (308 keeps the method: a POST stays a POST)"),
            ));
        }
        let https_port = self.https_port.unwrap_or(443);
        if https_port == 0 {
            return Err(key_err(&at("https_port"), "0 is not a port"));
        }
        let unknown_host = match &self.unknown_host {
            None => UnknownHost::Misdirected,
            Some(u) if is_https_url(u) => UnknownHost::To(u.clone()),
            Some(u) => {
                return Err(key_err(
                    &at("unknown_host"),
                    format!("{u:?} is not an https:// URL without spaces or control characters"),
                ))
            }
        };
        Ok(Redirect {
            listen,
            code,
            https_port,
            unknown_host,
        })
    }
}

/// An `https://` URL that can go into a `Location` header as it is.
fn is_https_url(u: &str) -> bool {
    u.len() > "https://".len()
        && u.starts_with("https://")
        && u.bytes().all(|b| b.is_ascii_graphic())
}

/// No two listeners (redirect, frontend or metrics) on one address.
pub(super) fn check_addresses_free(c: &super::Config) -> Result<(), KeyError> {
    let mut seen: Vec<SocketAddr> = c.metrics_listen.into_iter().collect();
    for fe in &c.frontends {
        seen.extend(fe.listen.addrs.iter().copied());
    }
    for (i, r) in c.redirect.iter().enumerate() {
        for a in &r.listen {
            if a.port() != 0 && seen.contains(a) {
                return Err(key_err(
                    &format!("redirect[{i}].listen"),
                    format!("{a} is already listened on"),
                ));
            }
            seen.push(*a);
        }
    }
    Ok(())
}

/// HTTP-01 is answered on port 80 by a `[[redirect]]` listener: without one, no order could
/// ever be validated.
pub(super) fn check_http01_answered(c: &super::Config) -> Result<(), KeyError> {
    if !c.redirect.is_empty() {
        return Ok(());
    }
    for fe in &c.frontends {
        if fe
            .acme()
            .is_some_and(|a| a.challenge == super::Challenge::Http01)
        {
            return Err(key_err(
                &format!("frontend {:?}: acme.challenge", fe.name),
                "\"http-01\" is answered on port 80 by a [[redirect]] listener, and none is configured",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(listen: &str) -> RawRedirect {
        RawRedirect {
            listen: Some(OneOrMany::One(listen.into())),
            ..RawRedirect::default()
        }
    }

    #[test]
    fn defaults_are_301_to_port_443_and_421_for_other_hosts() {
        let r = raw("127.0.0.1:80").validate(0).unwrap();
        assert_eq!(
            (r.code, r.https_port, r.unknown_host),
            (301, 443, UnknownHost::Misdirected)
        );
    }

    #[test]
    fn bad_codes_urls_and_missing_addresses_are_refused_by_key() {
        let mut r = raw("127.0.0.1:80");
        r.code = Some(302);
        assert!(r.validate(0).unwrap_err().key.contains("redirect[0].code"));
        let mut r = raw("127.0.0.1:80");
        r.unknown_host = Some("http://example.com/".into());
        assert!(r
            .validate(1)
            .unwrap_err()
            .key
            .contains("redirect[1].unknown_host"));
        let mut r = raw("127.0.0.1:80");
        r.unknown_host = Some("https://example.com/a b".into());
        assert!(r.validate(0).is_err());
        assert!(RawRedirect::default().validate(0).is_err());
        assert!(raw("nowhere").validate(0).is_err());
    }
}
