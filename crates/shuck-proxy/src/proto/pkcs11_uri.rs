//! PKCS#11 URIs (RFC 7512), the way a key in a token is named wherever a key file could be:
//! `pkcs11:token=edge;object=web?pin-source=file:/etc/shuck/pin`. The path says which token
//! and which object (`token`, `manufacturer`, `serial`, `model`, `slot-id`, `object`, `id`,
//! `type`), the query how to reach it (`pin-value`, `pin-source`, `module-path`). Values are
//! percent-decoded. An attribute this parser does not know is refused rather than ignored, so
//! a misspelt one cannot select another key.

use std::path::PathBuf;

/// A parsed URI. Its `Debug` leaves the PIN out.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Pkcs11Uri {
    pub token: Option<String>,
    pub manufacturer: Option<String>,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub slot_id: Option<u64>,
    /// The object's label (CKA_LABEL).
    pub object: Option<String>,
    /// The object's id (CKA_ID), raw bytes.
    pub id: Option<Vec<u8>>,
    /// Where the PIN comes from, if the token needs one.
    pub pin: Option<Pin>,
    /// The module to load, when the URI names one (else the configured `pkcs11_module`).
    pub module_path: Option<PathBuf>,
}

/// A PIN, given in the URI or read from a file when the token is opened.
#[derive(Clone, PartialEq, Eq)]
pub enum Pin {
    Value(String),
    File(PathBuf),
}

impl std::fmt::Debug for Pin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pin::Value(_) => f.write_str("Value(hidden)"),
            Pin::File(p) => write!(f, "File({})", p.display()),
        }
    }
}

impl std::fmt::Debug for Pkcs11Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// Why a URI was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UriError {
    #[error("does not start with \"pkcs11:\"")]
    Scheme,
    #[error("has an attribute that is not name=value (a character of a value not %-encoded?)")]
    NotAttribute,
    #[error("unknown attribute {0:?}")]
    Unknown(String),
    #[error("attribute {0:?} given twice")]
    Twice(String),
    #[error("bad %-encoding in the value of {0:?}")]
    Percent(String),
    #[error("{0:?} is not supported: {1}")]
    Unsupported(String, &'static str),
    #[error("slot-id {0:?} is not a number")]
    SlotId(String),
    #[error("type={0:?}: only private keys are served from a token")]
    Type(String),
    #[error("names no object: give object= or id=")]
    NoObject,
}

impl Pkcs11Uri {
    /// Parses `text`.
    pub fn parse(text: &str) -> Result<Pkcs11Uri, UriError> {
        // The scheme is case-blind (RFC 3986).
        if !Pkcs11Uri::is_uri(text) {
            return Err(UriError::Scheme);
        }
        let rest = &text["pkcs11:".len()..];
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut uri = Pkcs11Uri::default();
        for attr in path.split(';').filter(|a| !a.is_empty()) {
            uri.path_attribute(attr)?;
        }
        for attr in query.split('&').filter(|a| !a.is_empty()) {
            uri.query_attribute(attr)?;
        }
        if uri.object.is_none() && uri.id.is_none() {
            return Err(UriError::NoObject);
        }
        Ok(uri)
    }

    /// Whether `text` is meant as a PKCS#11 URI (rather than a file name).
    pub fn is_uri(text: &str) -> bool {
        text.get(.."pkcs11:".len())
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("pkcs11:"))
    }

    fn path_attribute(&mut self, attr: &str) -> Result<(), UriError> {
        let (name, raw) = split(attr)?;
        let value = decode(raw).map_err(|()| UriError::Percent(name.into()))?;
        let text = || String::from_utf8(value.clone()).map_err(|_| UriError::Percent(name.into()));
        match name {
            "token" => set(&mut self.token, text()?, name),
            "manufacturer" => set(&mut self.manufacturer, text()?, name),
            "serial" => set(&mut self.serial, text()?, name),
            "model" => set(&mut self.model, text()?, name),
            "object" => set(&mut self.object, text()?, name),
            "id" => set(&mut self.id, value, name),
            "slot-id" => {
                let t = text()?;
                let n = t.parse().map_err(|_| UriError::SlotId(t.clone()))?;
                set(&mut self.slot_id, n, name)
            }
            "type" => match text()?.as_str() {
                "private" => Ok(()),
                other => Err(UriError::Type(other.into())),
            },
            "slot-manufacturer"
            | "slot-description"
            | "library-manufacturer"
            | "library-description"
            | "library-version" => Err(UriError::Unsupported(
                name.into(),
                "name the token by token=, serial= or slot-id=",
            )),
            other => Err(UriError::Unknown(other.into())),
        }
    }

    fn query_attribute(&mut self, attr: &str) -> Result<(), UriError> {
        let (name, raw) = split(attr)?;
        let value = decode(raw)
            .ok()
            .and_then(|v| String::from_utf8(v).ok())
            .ok_or_else(|| UriError::Percent(name.into()))?;
        match name {
            "pin-value" => set(&mut self.pin, Pin::Value(value), name),
            // RFC 7512 allows a URI or a path; shuck reads local files only: file:///p,
            // file:/p or /p.
            "pin-source" => {
                let path = value
                    .strip_prefix("file://")
                    .or_else(|| value.strip_prefix("file:"))
                    .unwrap_or(&value);
                if !path.starts_with('/') {
                    return Err(UriError::Unsupported(
                        name.into(),
                        "give a local file by its absolute path (file:/etc/shuck/pin)",
                    ));
                }
                set(&mut self.pin, Pin::File(PathBuf::from(path)), name)
            }
            "module-path" => set(&mut self.module_path, PathBuf::from(value), name),
            "module-name" => Err(UriError::Unsupported(
                name.into(),
                "give the module by module-path or pkcs11_module",
            )),
            other => Err(UriError::Unknown(other.into())),
        }
    }

    /// The URI without its PIN, for messages and logs.
    pub fn redacted(&self) -> String {
        let mut parts = Vec::new();
        let mut push = |name: &str, v: &Option<String>| {
            if let Some(v) = v {
                parts.push(format!("{name}={}", encode(v.as_bytes())));
            }
        };
        push("token", &self.token);
        push("manufacturer", &self.manufacturer);
        push("serial", &self.serial);
        push("model", &self.model);
        push("slot-id", &self.slot_id.map(|n| n.to_string()));
        push("object", &self.object);
        if let Some(id) = &self.id {
            parts.push(format!("id={}", encode(id)));
        }
        let mut out = format!("pkcs11:{}", parts.join(";"));
        let mut query = Vec::new();
        match &self.pin {
            Some(Pin::Value(_)) => query.push("pin-value=(hidden)".to_string()),
            Some(Pin::File(p)) => query.push(format!("pin-source=file:{}", p.display())),
            None => {}
        }
        if let Some(m) = &self.module_path {
            query.push(format!("module-path={}", m.display()));
        }
        if !query.is_empty() {
            out.push('?');
            out.push_str(&query.join("&"));
        }
        out
    }
}

fn split(attr: &str) -> Result<(&str, &str), UriError> {
    // The text itself is not shown: it may be part of a PIN.
    attr.split_once('=').ok_or(UriError::NotAttribute)
}

fn set<T>(slot: &mut Option<T>, value: T, name: &str) -> Result<(), UriError> {
    if slot.is_some() {
        return Err(UriError::Twice(name.into()));
    }
    *slot = Some(value);
    Ok(())
}

/// `%XX` sequences (two hex digits) as bytes, the rest as it is.
fn decode(raw: &str) -> Result<Vec<u8>, ()> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = raw
                .get(i + 1..i + 3)
                .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or(())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Bytes as URI text: unreserved characters as they are, the rest `%XX`.
fn encode(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfcs_forms_parse_and_the_pin_stays_hidden() {
        let u = Pkcs11Uri::parse(
            "pkcs11:token=edge%20one;object=web;id=%01%02?pin-value=1234&module-path=/usr/lib/softhsm/libsofthsm2.so",
        )
        .unwrap();
        assert_eq!(u.token.as_deref(), Some("edge one"));
        assert_eq!(u.object.as_deref(), Some("web"));
        assert_eq!(u.id.as_deref(), Some(&[1u8, 2][..]));
        assert_eq!(u.pin, Some(Pin::Value("1234".into())));
        let shown = format!("{u:?}");
        assert!(!shown.contains("1234"), "{shown}");
        assert_eq!(
            shown,
            "pkcs11:token=edge%20one;object=web;id=%01%02?pin-value=(hidden)&module-path=/usr/lib/softhsm/libsofthsm2.so"
        );
        let f = Pkcs11Uri::parse("pkcs11:object=k;type=private?pin-source=file:/etc/pin").unwrap();
        assert_eq!(f.pin, Some(Pin::File("/etc/pin".into())));
    }

    #[test]
    fn what_could_select_the_wrong_key_is_refused() {
        let e = |t: &str| Pkcs11Uri::parse(t).unwrap_err();
        assert_eq!(e("file:/x"), UriError::Scheme);
        assert!(Pkcs11Uri::parse("PKCS11:object=a").is_ok());
        assert_eq!(e("pkcs11:token=a"), UriError::NoObject);
        assert_eq!(e("pkcs11:objekt=a"), UriError::Unknown("objekt".into()));
        assert_eq!(
            e("pkcs11:object=a;object=b"),
            UriError::Twice("object".into())
        );
        assert_eq!(
            e("pkcs11:object=a;type=cert"),
            UriError::Type("cert".into())
        );
        assert_eq!(e("pkcs11:object=a%2"), UriError::Percent("object".into()));
        assert_eq!(e("pkcs11:object=a%+f"), UriError::Percent("object".into()));
        // Nothing of a value shows in an error: it may be a PIN.
        let pin = e("pkcs11:object=a?pin-value=12&34");
        assert_eq!(pin, UriError::NotAttribute);
        assert!(!pin.to_string().contains("34"));
        assert!(!e("pkcs11:object=a?pin-value=1%zz")
            .to_string()
            .contains("zz"));
        assert!(matches!(
            e("pkcs11:object=a;slot-description=x"),
            UriError::Unsupported(..)
        ));
        assert!(matches!(
            e("pkcs11:object=a?pin-source=file://host/p"),
            UriError::Unsupported(..)
        ));
        let f = Pkcs11Uri::parse("pkcs11:object=a?pin-source=file:///etc/pin").unwrap();
        assert_eq!(f.pin, Some(Pin::File("/etc/pin".into())));
        assert_eq!(e("pkcs11:object=a;slot-id=x"), UriError::SlotId("x".into()));
        assert_eq!(
            e("pkcs11:object=a?pin-value=1&pin-source=/p"),
            UriError::Twice("pin-source".into())
        );
    }
}
