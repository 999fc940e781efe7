//! How sessions are shared beyond one process: ticket keys from files a fleet shares, and a
//! session store (Redis) the hosts share.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::section::{OnChange, Section};
use super::{duration_or, key_err, resolve_path, resolve_paths, KeyError, RawFrontend};

/// How long a handshake waits for the store before going on without it.
const STORE_TIMEOUT: Duration = Duration::from_millis(2);

/// How a ticket key file is read (`session_ticket_key_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TicketKeyFormat {
    /// Raw bytes: nginx; base64 lines: HAProxy.
    #[default]
    Auto,
    /// nginx `ssl_session_ticket_key`: one raw 48- or 80-byte key per file, the first encrypts.
    Nginx,
    /// HAProxy `tls-ticket-keys`: base64 lines; of the last three, the second-to-last encrypts.
    Haproxy,
}

impl std::fmt::Display for TicketKeyFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TicketKeyFormat::Auto => "auto",
            TicketKeyFormat::Nginx => "nginx",
            TicketKeyFormat::Haproxy => "haproxy",
        })
    }
}

/// `session_cache_size`, `session_tickets`, `session_ticket_lifetime`, `session_ticket_keys`,
/// `session_ticket_key_format`.
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct Resumption {
    pub cache_size: usize,
    pub tickets: bool,
    /// Random ticket keys rotate this often (a ticket stays valid one to two lifetimes); with
    /// key files, a ticket is refused once this old.
    #[serde(serialize_with = "super::ser::duration")]
    pub ticket_lifetime: Duration,
    /// Ticket keys from files shared by a fleet, instead of random ones.
    pub ticket_keys: Option<TicketKeyFiles>,
}

/// The session cache and random ticket keys are kept and take the new size and lifetime; key
/// files are read again.
impl Section for Resumption {
    const KEY: &'static str = "resumption";
    const ON_CHANGE: OnChange = OnChange::NewConnections;
}

/// `session_ticket_keys`: the files, read when TLS is loaded (start, reload, `shuck check`).
#[derive(serde::Serialize, Debug, Clone, PartialEq, Eq)]
pub struct TicketKeyFiles {
    pub paths: Vec<PathBuf>,
    pub format: TicketKeyFormat,
}

impl RawFrontend {
    pub(super) fn validate_ticket_keys(
        &self,
        base: Option<&Path>,
        tickets_on: bool,
    ) -> Result<Option<TicketKeyFiles>, KeyError> {
        let paths = resolve_paths(base, self.session_ticket_keys.as_ref());
        if paths.is_empty() {
            if self.session_ticket_key_format.is_some() {
                return Err(key_err(
                    "session_ticket_key_format",
                    "needs session_ticket_keys",
                ));
            }
            return Ok(None);
        }
        if !tickets_on {
            return Err(key_err(
                "session_ticket_keys",
                "needs session_tickets = true (tickets are off)",
            ));
        }
        Ok(Some(TicketKeyFiles {
            paths,
            format: self.session_ticket_key_format.unwrap_or_default(),
        }))
    }
}

/// `session_store`: where sessions by ID are shared across hosts.
#[derive(Clone, PartialEq, Eq, serde::Serialize)]
pub struct SessionStoreSettings {
    /// `redis://…`, `rediss://…` or `unix:/path` (as the redis crate reads it).
    #[serde(serialize_with = "super::ser::url_without_password")]
    pub url: String,
    /// The longest a handshake waits for a lookup.
    #[serde(serialize_with = "super::ser::duration")]
    pub timeout: Duration,
    /// The file holding the key that seals stored sessions (shared by the fleet).
    pub key: PathBuf,
}

/// Without the URL's password: this is what logs and `running.toml` show.
impl std::fmt::Debug for SessionStoreSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionStoreSettings")
            .field("url", &self.url_for_display())
            .field("timeout", &self.timeout)
            .field("key", &self.key)
            .finish()
    }
}

impl SessionStoreSettings {
    /// The URL without its password (in the user part or a `pass=` query parameter, as the redis
    /// crate reads Unix-socket URLs), for logs and `shuck check`.
    pub fn url_for_display(&self) -> String {
        let (url, query) = match self.url.split_once('?') {
            Some((u, q)) => (u, Some(q)),
            None => (self.url.as_str(), None),
        };
        let mut shown = match url.split_once("://") {
            // The last '@' ends the user part: a password may hold one.
            Some((scheme, rest)) => match rest.rsplit_once('@') {
                Some((creds, host)) => {
                    let user = creds.split(':').next().unwrap_or("");
                    format!("{scheme}://{user}:***@{host}")
                }
                None => url.to_string(),
            },
            None => url.to_string(),
        };
        if let Some(q) = query {
            let params: Vec<String> = q
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k == "pass" || k == "password" => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            shown.push('?');
            shown.push_str(&params.join("&"));
        }
        shown
    }
}

impl RawFrontend {
    pub(super) fn validate_session_store(
        &self,
        base: Option<&Path>,
    ) -> Result<Option<SessionStoreSettings>, KeyError> {
        let Some(url) = &self.session_store else {
            for (key, set) in [
                (
                    "session_store_timeout",
                    self.session_store_timeout.is_some(),
                ),
                ("session_store_key", self.session_store_key.is_some()),
            ] {
                if set {
                    return Err(key_err(key, "needs session_store"));
                }
            }
            return Ok(None);
        };
        let url = store_url("session_store", url)?;
        let timeout = duration_or(
            "session_store_timeout",
            self.session_store_timeout.as_deref(),
            STORE_TIMEOUT,
        )?;
        if timeout.is_zero() || timeout > Duration::from_secs(1) {
            return Err(key_err(
                "session_store_timeout",
                "must be above 0 and at most 1s: a handshake waits this long when the store is slow",
            ));
        }
        let Some(key) = self.session_store_key.clone() else {
            return Err(key_err(
                "session_store",
                "needs session_store_key: the file whose secret seals the stored sessions (the same on every host)",
            ));
        };
        Ok(Some(SessionStoreSettings {
            url,
            timeout,
            key: resolve_path(base, key),
        }))
    }
}

/// A store URL as the redis crate (or shuck's Sentinel and Cluster forms) reads it, checked for
/// its scheme: `unix:/path` becomes `unix:///path`.
pub(super) fn store_url(key: &str, url: &str) -> Result<String, KeyError> {
    let url = match url.strip_prefix("unix:") {
        // `unix:/run/redis.sock` as operators write it; the redis crate wants a URL.
        Some(path) if !path.starts_with("//") => format!("unix://{path}"),
        _ => url.to_string(),
    };
    // No "://": nothing is echoed (it may be `user:password@host`).
    let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
    if !matches!(
        scheme,
        "redis"
            | "rediss"
            | "unix"
            | "redis+unix"
            | "redis+sentinel"
            | "rediss+sentinel"
            | "redis+cluster"
            | "rediss+cluster"
    ) {
        return Err(key_err(
            key,
            format!("{scheme:?}: expected redis://HOST:PORT, rediss://HOST:PORT, unix:/PATH, redis+sentinel://HOST:PORT,HOST:PORT/MASTER or redis+cluster://HOST:PORT,HOST:PORT"),
        ));
    }
    Ok(url)
}

/// The URL without its password, for logs and `shuck check` (see
/// [`SessionStoreSettings::url_for_display`]).
pub(crate) fn url_without_password(url: &str) -> String {
    SessionStoreSettings {
        url: url.to_string(),
        timeout: STORE_TIMEOUT,
        key: PathBuf::new(),
    }
    .url_for_display()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_shown() {
        let shown = |url: &str| {
            SessionStoreSettings {
                url: url.into(),
                timeout: STORE_TIMEOUT,
                key: PathBuf::new(),
            }
            .url_for_display()
        };
        assert_eq!(shown("redis://10.0.0.1:6379"), "redis://10.0.0.1:6379");
        assert_eq!(
            shown("redis://app:s3cr@t@r:6379/0"),
            "redis://app:***@r:6379/0"
        );
        assert_eq!(
            shown("unix:///run/redis.sock?db=1&pass=hunter2"),
            "unix:///run/redis.sock?db=1&pass=***"
        );
    }
}
