//! How the configuration is written out as values (`serde::Serialize`), for `running.toml` and
//! `shuck check`'s comparison: durations as people write them (`"5s"`), TLS parameters by name,
//! store URLs without their password. Never key material: sections hold paths, not keys.

use std::time::Duration;

use serde::ser::{SerializeSeq, Serializer};

/// A section as a TOML value: a table of its fields, a string or a list; an absent section
/// (`None`, which TOML holds only as a missing key) as the string `"none"`.
pub(crate) fn value_of<T: serde::Serialize>(section: &T) -> toml::Value {
    #[derive(serde::Serialize)]
    struct Holder<'a, T> {
        value: &'a T,
    }
    match toml::Value::try_from(Holder { value: section }) {
        Ok(toml::Value::Table(mut t)) => t
            .remove("value")
            .unwrap_or_else(|| toml::Value::String("none".into())),
        Ok(other) => other,
        Err(e) => toml::Value::String(format!("(not recorded: {e})")),
    }
}

/// `"1m 30s"`, as in the configuration file.
pub(crate) fn duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

/// A duration that may be absent.
#[expect(
    clippy::ref_option,
    reason = "serde's serialize_with hands the field by reference"
)]
pub(crate) fn opt_duration<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    match d {
        Some(d) => duration(d, s),
        None => s.serialize_none(),
    }
}

/// A list of strings: names (protocol versions, cipher suites, groups, ALPN protocols) or
/// values as they print.
fn strings<S: Serializer, T: std::fmt::Display>(
    items: impl ExactSizeIterator<Item = T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut seq = s.serialize_seq(Some(items.len()))?;
    for item in items {
        seq.serialize_element(&item.to_string())?;
    }
    seq.end()
}

/// The names rustls gives its parameters (`TLSv1_3`, `TLS13_AES_128_GCM_SHA256`), from `Debug`.
fn names<S: Serializer, T: std::fmt::Debug>(
    items: impl ExactSizeIterator<Item = T>,
    s: S,
) -> Result<S::Ok, S::Error> {
    strings(items.map(|i| format!("{i:?}")), s)
}

/// Values shown as they print (`10.0.0.0/8`).
pub(crate) fn shown<S: Serializer, T: std::fmt::Display>(
    items: &[T],
    s: S,
) -> Result<S::Ok, S::Error> {
    strings(items.iter(), s)
}

/// A PROXY protocol version, `v1` or `v2`, as configured.
#[expect(
    clippy::ref_option,
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's serialize_with hands the field by reference"
)]
pub(crate) fn version<S: Serializer>(
    v: &Option<crate::proto::proxy_protocol::Version>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use crate::proto::proxy_protocol::Version;
    match v {
        Some(Version::V1) => s.serialize_str("v1"),
        Some(Version::V2) => s.serialize_str("v2"),
        None => s.serialize_none(),
    }
}

/// A store's URL, its password left out.
pub(crate) fn url_without_password<S: Serializer>(url: &str, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&super::url_without_password(url))
}

impl serde::Serialize for super::Versions {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        names(self.0.iter().map(|v| v.version), s)
    }
}

impl serde::Serialize for super::Suites {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        names(self.0.iter().map(rustls::SupportedCipherSuite::suite), s)
    }
}

impl serde::Serialize for super::Groups {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        names(self.0.iter().map(|g| g.name()), s)
    }
}

impl serde::Serialize for super::Alpn {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        strings(self.0.iter().map(|p| String::from_utf8_lossy(p)), s)
    }
}

/// As its `Debug` shows it: the address, the name it was given, its weight when not 1.
impl serde::Serialize for super::BackendAddr {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{self:?}"))
    }
}
