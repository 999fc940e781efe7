//! Configurations for a shuck under test, key by key, where that reads better than a TOML string:
//! values are quoted and paths escaped here, and a frontend starts on a fresh port of 127.0.0.1.
//!
//! ```
//! use shuck_test_support::configs::{Config, Frontend};
//! let toml = Config::new()
//!     .set("metrics_listen", "127.0.0.1:0")
//!     .frontend(Frontend::new().backend("127.0.0.1:8080").self_signed().set("alpn", ["h2"]))
//!     .to_string();
//! assert!(toml.contains("[[frontend]]\nlisten = \"127.0.0.1:0\"\nbackend = \"127.0.0.1:8080\"\n"));
//! ```

use std::fmt;
use std::path::Path;

/// A value as TOML writes it.
pub trait TomlValue {
    fn toml(&self) -> String;
}

impl TomlValue for str {
    fn toml(&self) -> String {
        quoted(self)
    }
}

impl TomlValue for String {
    fn toml(&self) -> String {
        quoted(self)
    }
}

impl TomlValue for Path {
    fn toml(&self) -> String {
        quoted(&self.display().to_string())
    }
}

impl TomlValue for std::path::PathBuf {
    fn toml(&self) -> String {
        self.as_path().toml()
    }
}

impl TomlValue for std::net::SocketAddr {
    fn toml(&self) -> String {
        quoted(&self.to_string())
    }
}

impl TomlValue for bool {
    fn toml(&self) -> String {
        self.to_string()
    }
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl TomlValue for $t {
            fn toml(&self) -> String {
                self.to_string()
            }
        }
    )*};
}

integers!(u8, u16, u32, u64, usize, i64);

impl<T: TomlValue + ?Sized> TomlValue for &T {
    fn toml(&self) -> String {
        (**self).toml()
    }
}

impl<T: TomlValue> TomlValue for [T] {
    fn toml(&self) -> String {
        let items: Vec<String> = self.iter().map(TomlValue::toml).collect();
        format!("[{}]", items.join(", "))
    }
}

impl<T: TomlValue, const N: usize> TomlValue for [T; N] {
    fn toml(&self) -> String {
        self.as_slice().toml()
    }
}

impl<T: TomlValue> TomlValue for Vec<T> {
    fn toml(&self) -> String {
        self.as_slice().toml()
    }
}

/// A TOML string, as the toml crate writes one.
fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// `key = value` in `lines`, replacing an earlier value of `key`.
fn set_line(lines: &mut Vec<(String, String)>, key: &str, value: &impl TomlValue) {
    let value = value.toml();
    match lines.iter_mut().find(|(k, _)| k == key) {
        Some(line) => line.1 = value,
        None => lines.push((key.into(), value)),
    }
}

/// One `[[frontend]]`.
#[derive(Debug, Clone)]
pub struct Frontend {
    lines: Vec<(String, String)>,
}

impl Default for Frontend {
    fn default() -> Self {
        Frontend::new()
    }
}

impl Frontend {
    /// A frontend listening on a fresh port of 127.0.0.1, and nothing else yet.
    pub fn new() -> Frontend {
        Frontend {
            lines: vec![("listen".into(), "127.0.0.1:0".toml())],
        }
    }

    /// Sets `key` (replacing an earlier value of it).
    #[must_use]
    pub fn set(mut self, key: &str, value: impl TomlValue) -> Frontend {
        set_line(&mut self.lines, key, &value);
        self
    }

    #[must_use]
    pub fn name(self, name: &str) -> Frontend {
        self.set("name", name)
    }

    #[must_use]
    pub fn backend(self, addr: impl fmt::Display) -> Frontend {
        self.set("backend", addr.to_string())
    }

    #[must_use]
    pub fn certificates<P: AsRef<Path>>(self, paths: &[P]) -> Frontend {
        let paths: Vec<&Path> = paths.iter().map(AsRef::as_ref).collect();
        self.set("certificates", paths)
    }

    #[must_use]
    pub fn self_signed(self) -> Frontend {
        self.set("self_signed", true)
    }
}

impl fmt::Display for Frontend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "[[frontend]]")?;
        for (k, v) in &self.lines {
            writeln!(f, "{k} = {v}")?;
        }
        Ok(())
    }
}

/// A whole file: global keys, then the frontends.
#[derive(Debug, Clone, Default)]
pub struct Config {
    globals: Vec<(String, String)>,
    frontends: Vec<Frontend>,
}

impl Config {
    pub fn new() -> Config {
        Config::default()
    }

    /// Sets the global `key` (replacing an earlier value of it).
    #[must_use]
    pub fn set(mut self, key: &str, value: impl TomlValue) -> Config {
        set_line(&mut self.globals, key, &value);
        self
    }

    #[must_use]
    pub fn frontend(mut self, frontend: Frontend) -> Config {
        self.frontends.push(frontend);
        self
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, v) in &self.globals {
            writeln!(f, "{k} = {v}")?;
        }
        for fe in &self.frontends {
            write!(f, "{fe}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the builder writes is what shuck reads: parsed and validated by the engine.
    #[test]
    fn the_engine_reads_what_the_builder_writes() {
        let odd = Path::new("/tmp/a \"quoted\" \\ dir/cert.pem");
        let text = Config::new()
            .set("workers", 2u32)
            .set("metrics_listen", "127.0.0.1:0")
            .set("workers", 3u32)
            .frontend(
                Frontend::new()
                    .name("web")
                    .backend("127.0.0.1:8080")
                    .certificates(&[odd])
                    .set("alpn", ["h2", "http/1.1"])
                    .set("session_tickets", false),
            )
            .to_string();
        let raw =
            shuck_proxy::config::RawConfig::parse(&text, &shuck_proxy::config::Origin::CommandLine)
                .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(raw.workers, Some(3), "{text}");
        let fe = &raw.frontends[0];
        assert_eq!(fe.name.as_deref(), Some("web"));
        let certificates: Vec<std::path::PathBuf> = fe
            .certificates
            .clone()
            .map(shuck_proxy::config::OneOrMany::into_vec)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|e| match e {
                shuck_proxy::config::CertEntry::Path(p) => Some(p),
                shuck_proxy::config::CertEntry::Pair(_) => None,
            })
            .collect();
        assert_eq!(certificates, vec![odd.to_path_buf()]);
        assert_eq!(
            fe.alpn.as_deref(),
            Some(&["h2".to_string(), "http/1.1".to_string()][..])
        );
        assert_eq!(fe.session_tickets, Some(false));
    }
}
