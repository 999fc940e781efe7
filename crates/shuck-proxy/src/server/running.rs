//! What runs, as `shuck check` compares it: every setting a reload looks at, as text, written to
//! `state_dir/running.toml` at start and after each reload. `shuck check` reads it back and says
//! what a reload of the edited file would change, and what would need a restart. Settings only:
//! paths, addresses, names, never key material; a store URL goes without its password.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{Backend, CertSource, Config, Frontend, OcspMode};

/// The file under `state_dir`.
const FILE: &str = "running.toml";

/// What a running shuck recorded.
#[derive(Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    pub settings: BTreeMap<String, String>,
}

/// How a changed setting takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// On reload (SIGHUP).
    Reload,
    /// Only on restart or upgrade; a reload leaves it as it runs.
    Restart,
}

/// One setting that differs between what runs and a new configuration.
#[derive(Debug, PartialEq, Eq)]
pub struct Change {
    pub key: String,
    pub old: Option<String>,
    pub new: Option<String>,
    pub applies: Applies,
}

/// Writes what `config` runs to its state directory, if that exists (systemd's StateDirectory,
/// the package, or an ACME or OCSP set-up makes it; shuck does not make it just for this). A
/// directory shuck cannot write only costs `shuck check` the comparison.
pub fn record(config: &Config) {
    if !config.state_dir.is_dir() {
        return;
    }
    let snapshot = Snapshot {
        pid: std::process::id(),
        settings: settings(config),
    };
    let path = config.state_dir.join(FILE);
    let written = toml::to_string(&snapshot)
        .map_err(std::io::Error::other)
        .and_then(|text| crate::sys::state_files::write_private(&path, text.as_bytes()));
    if let Err(e) = written {
        tracing::info!(path = %path.display(), error = %e, "cannot record the running settings; shuck check will not show what a reload changes");
    }
}

/// What a shuck using `state_dir` recorded, if anything.
pub fn read(state_dir: &Path) -> Option<(PathBuf, Snapshot)> {
    let path = state_dir.join(FILE);
    let text = std::fs::read_to_string(&path).ok()?;
    let snapshot = toml::from_str(&text).ok()?;
    Some((path, snapshot))
}

/// Every setting, by a key naming it (`workers`, `frontend "web" listen`), as text.
pub fn settings(c: &Config) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    put("workers", c.workers.to_string());
    put("pin_cpus", c.pin_cpus.to_string());
    put("max_connections", c.max_connections.to_string());
    put("shutdown_grace", duration(c.shutdown_grace));
    put("reload_timeout", duration(c.reload_timeout));
    put("upgrade_confirm", duration(c.upgrade_confirm));
    put("upgrade_timeout", duration(c.upgrade_timeout));
    put("log_queue_lines", c.log_queue_lines.to_string());
    // Not log_format, log_level or log_connections: serve's flags may set them, which `shuck
    // check` does not see; nor user, group or allow_root, which act once, at start.
    put(
        "connection_log_format",
        format!("{:?}", c.connection_log_format),
    );
    put("metrics_listen", format!("{:?}", c.metrics_listen));
    put(
        "certificate_expiry_warning",
        duration(c.certificate_expiry_warning),
    );
    put("state_dir", c.state_dir.display().to_string());
    for fe in &c.frontends {
        frontend_settings(fe, &mut m);
    }
    m
}

fn frontend_settings(fe: &Frontend, m: &mut BTreeMap<String, String>) {
    let mut put = |k: &str, v: String| {
        let key = if k.is_empty() {
            format!("frontend {:?}", fe.name)
        } else {
            format!("frontend {:?} {k}", fe.name)
        };
        m.insert(key, v);
    };
    // The frontend itself: whether it has tasks of its own decides if a reload may add it.
    put(
        "",
        if runs_tasks(fe) {
            "with ACME or OCSP fetching"
        } else {
            "configured"
        }
        .into(),
    );
    put("listen", join(fe.listen.iter()));
    put(
        "backend",
        match &fe.backend {
            Backend::Demo => "the built-in demo page".into(),
            Backend::Tcp(v) => join(v.iter().map(|b| &b.name)),
        },
    );
    put("backend_policy", format!("{:?}", fe.backend_policy));
    put(
        "certificates",
        match &fe.certs {
            CertSource::SelfSigned => "self-signed".into(),
            CertSource::Files { paths, default } => format!(
                "{} (default {:?})",
                join(paths.iter().map(|p| p.display())),
                default
            ),
            CertSource::Acme(_) => "ACME".into(),
        },
    );
    if let CertSource::Acme(a) = &fe.certs {
        put(
            "acme",
            format!(
                "names {}, directory {}, key {:?}, contact {}, until_issued {:?}",
                a.names.join(" "),
                a.directory,
                a.key,
                a.contact.join(" "),
                a.until_issued
            ),
        );
    }
    put("ocsp", format!("{:?}", fe.ocsp));
    for (k, v) in tls_settings(fe) {
        put(k, v);
    }
}

/// A frontend's TLS, timeouts, PROXY and resumption settings.
fn tls_settings(fe: &Frontend) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    let mut put = |k: &'static str, value: String| v.push((k, value));
    put(
        "sni",
        format!("unknown {:?}, missing {:?}", fe.unknown_sni, fe.missing_sni),
    );
    put(
        "versions",
        join(fe.versions.iter().map(|v| format!("{:?}", v.version))),
    );
    put(
        "ciphersuites",
        join(fe.ciphersuites.iter().map(|s| format!("{:?}", s.suite()))),
    );
    put(
        "groups",
        join(fe.groups.iter().map(|g| format!("{:?}", g.name()))),
    );
    put(
        "alpn",
        join(
            fe.alpn
                .iter()
                .map(|p| String::from_utf8_lossy(p).into_owned()),
        ),
    );
    put(
        "timeouts",
        format!(
            "handshake {}, idle {}, connect {}, backend_cooldown {}",
            duration(fe.handshake_timeout),
            duration(fe.idle_timeout),
            duration(fe.connect_timeout),
            duration(fe.backend_cooldown)
        ),
    );
    put("backlog", fe.backlog.to_string());
    put("defer_accept", duration(fe.defer_accept));
    put("ktls", fe.ktls.to_string());
    put("record_layer", fe.record_layer.as_str().to_string());
    put(
        "proxy_protocol",
        format!("{:?} {:?}", fe.proxy_protocol, fe.proxy_tlvs),
    );
    put("accept_proxy", format!("{:?}", fe.accept_proxy));
    put(
        "client_auth",
        format!(
            "{:?}, ca {:?}, crls {:?}",
            fe.client_auth, fe.client_ca, fe.client_crls
        ),
    );
    put(
        "resumption",
        format!(
            "cache {}, tickets {}, keys {:?}",
            fe.session_cache_size, fe.session_tickets, fe.ticket_keys
        ),
    );
    put(
        "session_ticket_lifetime",
        duration(fe.session_ticket_lifetime),
    );
    put(
        "session_store",
        fe.session_store.as_ref().map_or_else(
            || "none".into(),
            |s| {
                format!(
                    "{}, timeout {}, key {}",
                    s.url_for_display(),
                    duration(s.timeout),
                    s.key.display()
                )
            },
        ),
    );
    v
}

/// What differs between `old` (what runs) and `new`, and how each change would take effect.
pub fn changes(old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Vec<Change> {
    let keys: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    keys.into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| Change {
            applies: applies(k, old, new),
            key: k.clone(),
            old: old.get(k).cloned(),
            new: new.get(k).cloned(),
        })
        .collect()
}

/// How a change of `key` takes effect: what `reload::Reloader` applies and what it leaves.
fn applies(key: &str, old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Applies {
    // Global keys: these reload; the others wait for a restart.
    const RELOADED: [&str; 7] = [
        "max_connections",
        "shutdown_grace",
        "reload_timeout",
        "upgrade_confirm",
        "upgrade_timeout",
        "connection_log_format",
        "certificate_expiry_warning",
    ];
    let Some((frontend, setting)) = frontend_key(key) else {
        return if RELOADED.contains(&key) {
            Applies::Reload
        } else {
            Applies::Restart
        };
    };
    let of = |m: &BTreeMap<String, String>, s: &str| m.get(&format!("{frontend} {s}")).cloned();
    let whole = |m: &BTreeMap<String, String>| m.get(frontend).cloned();
    let tasks = |v: Option<String>| v.is_some_and(|v| v.starts_with("with ACME"));
    // A frontend whose `acme` changed is kept as it runs, all of it.
    if whole(old).is_some() && whole(new).is_some() && of(old, "acme") != of(new, "acme") {
        return Applies::Restart;
    }
    // A frontend added or removed: all of it as the frontend itself, not if it renews
    // certificates or fetches staples.
    if whole(old).is_none() || whole(new).is_none() {
        return if tasks(whole(old)) || tasks(whole(new)) {
            Applies::Restart
        } else {
            Applies::Reload
        };
    }
    match setting {
        // The frontend gains or loses tasks of its own (its `ocsp` or `acme` changed): the
        // reload keeps it as it runs. And the addresses already bound keep their backlog.
        None | Some("ocsp" | "backlog") => Applies::Restart,
        // Random ticket keys keep the lifetime they were made with; keys from files do not.
        Some("session_ticket_lifetime") => {
            let random = of(old, "resumption")
                .is_some_and(|r| r.contains("tickets true") && r.ends_with("keys None"));
            if random {
                Applies::Restart
            } else {
                Applies::Reload
            }
        }
        _ => Applies::Reload,
    }
}

/// `frontend "web" listen` → (`frontend "web"`, Some("listen")); `frontend "web"` → (…, None).
fn frontend_key(key: &str) -> Option<(&str, Option<&str>)> {
    if !key.starts_with("frontend \"") {
        return None;
    }
    match key.rfind("\" ") {
        Some(end) => Some((&key[..=end], Some(&key[end + 2..]))),
        None => Some((key, None)),
    }
}

/// Whether the frontend has tasks of its own (ACME renewal, OCSP fetching) that start with the
/// process: adding or removing it takes a restart.
pub(crate) fn runs_tasks(fe: &Frontend) -> bool {
    matches!(fe.certs, CertSource::Acme(_)) || fe.ocsp == OcspMode::Fetch
}

fn duration(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn join<T: std::fmt::Display>(items: impl Iterator<Item = T>) -> String {
    items.map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Origin, RawConfig};

    fn config(text: &str) -> Config {
        RawConfig::parse(text, &Origin::CommandLine)
            .and_then(|raw| raw.validate(Origin::CommandLine, None))
            .unwrap()
    }

    const WEB: &str =
        "[[frontend]]\nname = \"web\"\nself_signed = true\nbackend = \"127.0.0.1:1\"\n";

    #[test]
    fn changes_say_what_a_reload_applies_and_what_needs_a_restart() {
        let old = settings(&config(&format!("workers = 2\n{WEB}")));
        let new = settings(&config(&format!(
            "workers = 3\nmax_connections = 10\nshutdown_grace = \"7s\"\n{}listen = [\"127.0.0.1:1443\"]\n[[frontend]]\nname = \"api\"\nself_signed = true\nocsp = \"fetch\"\n",
            WEB.replace("127.0.0.1:1", "127.0.0.1:2")
        )));
        let got: Vec<(String, Applies)> = changes(&old, &new)
            .into_iter()
            .filter(|c| !c.key.starts_with("frontend \"api\" "))
            .map(|c| (c.key, c.applies))
            .collect();
        let want = [
            ("frontend \"api\"", Applies::Restart),
            ("frontend \"web\" backend", Applies::Reload),
            ("frontend \"web\" listen", Applies::Reload),
            ("max_connections", Applies::Reload),
            ("shutdown_grace", Applies::Reload),
            ("workers", Applies::Restart),
        ];
        assert_eq!(got, want.map(|(k, a)| (k.to_string(), a)));
        assert!(changes(&old, &old).is_empty());
    }

    #[test]
    fn a_store_password_is_not_recorded() {
        let c = config(&format!(
            "{WEB}session_store = \"redis://user:s3cret@127.0.0.1:6379/\"\nsession_store_key = \"/k\"\n"
        ));
        let text = toml::to_string(&Snapshot {
            pid: 1,
            settings: settings(&c),
        })
        .unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("127.0.0.1:6379"), "{text}");
    }
}
