//! What runs, as `shuck check` compares it: every setting a reload looks at, as text, written to
//! `state_dir/running.toml` at start and after each reload. `shuck check` reads it back and says
//! what a reload of the edited file would change, and what would need a restart. Settings only:
//! paths, addresses, names, never key material; a store URL goes without its password.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::config::frontend::Applies;
use crate::config::frontend::{on_change_of, OnChange, SECTIONS};
use crate::config::global::Recorded;
use crate::config::{global, Config, Frontend};

/// The file under `state_dir`.
const FILE: &str = "running.toml";

/// The shape of the settings recorded, raised whenever their keys or renderings change: a
/// record in another shape is not compared (every setting would look changed).
pub const FORMAT: u32 = 3;

/// What a running shuck recorded.
#[derive(Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    /// [`FORMAT`] of the shuck that wrote it (absent: the first shape).
    #[serde(default)]
    pub format: u32,
    pub settings: BTreeMap<String, String>,
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
        format: FORMAT,
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
    for k in global::GLOBAL_KEYS
        .iter()
        .filter(|k| k.recorded == Recorded::Yes)
    {
        m.insert(k.key.to_string(), (k.value)(c));
    }
    for fe in &c.frontends {
        frontend_settings(fe, &mut m);
    }
    m
}

fn frontend_settings(fe: &Frontend, m: &mut BTreeMap<String, String>) {
    let whole = format!("frontend {:?}", fe.name);
    // The frontend itself: whether it has tasks of its own decides if a reload may add it.
    let kind = if fe.runs_tasks() {
        "with ACME or OCSP fetching"
    } else {
        "configured"
    };
    m.insert(whole.clone(), kind.into());
    for (key, value) in fe.rendered_sections() {
        m.insert(format!("{whole} {key}"), value);
    }
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

/// How a change of `key` takes effect: what `reload::Reloader` applies and what it leaves, from
/// the same declarations (`config::global::GLOBAL_KEYS`, `config::frontend::SECTIONS`).
fn applies(key: &str, old: &BTreeMap<String, String>, new: &BTreeMap<String, String>) -> Applies {
    let Some((frontend, section)) = frontend_key(key) else {
        return global::applies(key).unwrap_or(Applies::Restart);
    };
    let whole = |m: &BTreeMap<String, String>| m.get(frontend).cloned();
    let tasks = |v: Option<String>| v.is_some_and(|v| v.starts_with("with ACME"));
    // A frontend added or removed: all of it as the frontend itself, not if it renews
    // certificates or fetches staples.
    if whole(old).is_none() || whole(new).is_none() {
        return if tasks(whole(old)) || tasks(whole(new)) {
            Applies::Restart
        } else {
            Applies::Reload
        };
    }
    // A frontend one of whose sections keeps the whole frontend as it runs.
    let kept_whole = SECTIONS.iter().any(|(k, on)| {
        let of = |m: &BTreeMap<String, String>| m.get(&format!("{frontend} {k}")).cloned();
        matches!(on, OnChange::RestartFrontend(_)) && of(old) != of(new)
    });
    let restart = match section {
        // The frontend gains or loses tasks of its own (its `ocsp` or `acme` changed).
        None => true,
        Some(s) => on_change_of(s).map(OnChange::applies) != Some(Applies::Reload),
    };
    if kept_whole || restart {
        Applies::Restart
    } else {
        Applies::Reload
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

/// The fields that differ between two renderings of a section (`Name { a: 1, b: [2, 3] }`), as
/// (".a", old, new); the whole values under "" when either is not such a struct or their
/// fields differ in name.
pub fn differing_fields<'a>(old: &'a str, new: &'a str) -> Vec<(String, &'a str, &'a str)> {
    match (struct_fields(old), struct_fields(new)) {
        (Some(a), Some(b)) if a.iter().map(|f| f.0).eq(b.iter().map(|f| f.0)) => a
            .into_iter()
            .zip(b)
            .filter(|(x, y)| x.1 != y.1)
            .map(|((name, x), (_, y))| (format!(".{name}"), x, y))
            .collect(),
        _ => vec![(String::new(), old, new)],
    }
}

/// The top-level fields of a derived `Debug` rendering of a struct, in order.
fn struct_fields(text: &str) -> Option<Vec<(&str, &str)>> {
    let body = text.strip_suffix(" }")?;
    let body = &body[body.find(" { ")? + 3..];
    let mut fields = Vec::new();
    let (mut depth, mut quoted, mut escaped, mut start) = (0i32, false, false, 0);
    for (i, &b) in body.as_bytes().iter().enumerate() {
        if escaped {
            escaped = false;
            continue;
        }
        match b {
            b'\\' if quoted => escaped = true,
            b'"' => quoted = !quoted,
            b'(' | b'[' | b'{' if !quoted => depth += 1,
            b')' | b']' | b'}' if !quoted => depth -= 1,
            b',' if !quoted && depth == 0 => {
                fields.push(field(&body[start..i])?);
                start = i + 2;
            }
            _ => {}
        }
    }
    fields.push(field(body.get(start..)?)?);
    Some(fields)
}

fn field(text: &str) -> Option<(&str, &str)> {
    let (name, value) = text.split_once(": ")?;
    name.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
        .then_some((name, value))
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
    fn differing_fields_name_only_what_changed() {
        let old =
            r#"Listen { addrs: [127.0.0.1:1, 127.0.0.1:2], backlog: 16, note: "a, b\\", x: 1 }"#;
        let new =
            r#"Listen { addrs: [127.0.0.1:1, 127.0.0.1:2], backlog: 64, note: "a, c\\", x: 2 }"#;
        assert_eq!(
            differing_fields(old, new),
            [
                (".backlog".to_string(), "16", "64"),
                (".note".to_string(), r#""a, b\\""#, r#""a, c\\""#),
                (".x".to_string(), "1", "2")
            ]
        );
        assert_eq!(
            differing_fields("Round", "Least"),
            [(String::new(), "Round", "Least")]
        );
        assert_eq!(
            differing_fields("Some(A { x: 1 })", "None"),
            [(String::new(), "Some(A { x: 1 })", "None")]
        );
    }

    #[test]
    fn a_store_password_is_not_recorded() {
        let c = config(&format!(
            "{WEB}session_store = \"redis://user:s3cret@127.0.0.1:6379/\"\nsession_store_key = \"/k\"\n"
        ));
        let text = toml::to_string(&Snapshot {
            pid: 1,
            format: FORMAT,
            settings: settings(&c),
        })
        .unwrap();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains("127.0.0.1:6379"), "{text}");
    }
}
