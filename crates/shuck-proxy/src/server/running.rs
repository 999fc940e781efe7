//! What runs, as `shuck check` compares it: every setting a reload looks at, as TOML values
//! (each frontend section serialized by `config::ser`), written to `state_dir/running.toml` at
//! start and after each reload. `shuck check` reads it back and says
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
pub const FORMAT: u32 = 4;

/// What a running shuck recorded.
#[derive(Debug, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    /// [`FORMAT`] of the shuck that wrote it (absent: the first shape).
    #[serde(default)]
    pub format: u32,
    pub settings: BTreeMap<String, toml::Value>,
}

/// One setting that differs between what runs and a new configuration.
#[derive(Debug, PartialEq)]
pub struct Change {
    pub key: String,
    pub old: Option<toml::Value>,
    pub new: Option<toml::Value>,
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

/// Every setting, by a key naming it (`workers`, `frontend "web" listen`), as a TOML value.
pub fn settings(c: &Config) -> BTreeMap<String, toml::Value> {
    let mut m = BTreeMap::new();
    for k in global::GLOBAL_KEYS
        .iter()
        .filter(|k| k.recorded == Recorded::Yes)
    {
        m.insert(k.key.to_string(), toml::Value::String((k.value)(c)));
    }
    for fe in &c.frontends {
        frontend_settings(fe, &mut m);
    }
    m
}

/// The key under which a frontend itself is recorded: a table saying whether it has tasks of
/// its own (ACME renewal, OCSP fetching), which decides whether a reload may add or remove it.
const TASKS: &str = "runs_tasks";

fn frontend_settings(fe: &Frontend, m: &mut BTreeMap<String, toml::Value>) {
    let whole = format!("frontend {:?}", fe.name);
    let mut itself = toml::Table::new();
    itself.insert(TASKS.into(), toml::Value::Boolean(fe.runs_tasks()));
    m.insert(whole.clone(), toml::Value::Table(itself));
    for (key, value) in fe.section_values() {
        m.insert(format!("{whole} {key}"), value);
    }
}

/// What differs between `old` (what runs) and `new`, and how each change would take effect.
pub fn changes(
    old: &BTreeMap<String, toml::Value>,
    new: &BTreeMap<String, toml::Value>,
) -> Vec<Change> {
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
fn applies(
    key: &str,
    old: &BTreeMap<String, toml::Value>,
    new: &BTreeMap<String, toml::Value>,
) -> Applies {
    let Some((frontend, section)) = frontend_key(key) else {
        return global::applies(key).unwrap_or(Applies::Restart);
    };
    let whole = |m: &BTreeMap<String, toml::Value>| m.get(frontend).cloned();
    let tasks = |v: Option<toml::Value>| {
        v.and_then(|v| v.get(TASKS).and_then(toml::Value::as_bool)) == Some(true)
    };
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
        let of = |m: &BTreeMap<String, toml::Value>| m.get(&format!("{frontend} {k}")).cloned();
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

/// The fields that differ between two values of a section, as (".field", old, new) shown
/// inline in TOML's syntax; the whole values under "" when either is not a table.
pub fn differing_fields(old: &toml::Value, new: &toml::Value) -> Vec<(String, String, String)> {
    let (Some(a), Some(b)) = (old.as_table(), new.as_table()) else {
        // A global key's value is its text (`workers: 2 -> 3`), shown as such.
        let whole = |v: &toml::Value| v.as_str().map_or_else(|| inline(v), str::to_string);
        return vec![(String::new(), whole(old), whole(new))];
    };
    let none = toml::Value::String("none".into());
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .map(|k| {
            let (x, y) = (a.get(k).unwrap_or(&none), b.get(k).unwrap_or(&none));
            (format!(".{k}"), inline(x), inline(y))
        })
        .collect()
}

/// A value on one line: `"5s"`, `["127.0.0.1:443"]`, `{ addrs = [...], backlog = 511 }`.
pub fn inline(v: &toml::Value) -> String {
    match v {
        toml::Value::Array(items) => {
            format!(
                "[{}]",
                items.iter().map(inline).collect::<Vec<_>>().join(", ")
            )
        }
        toml::Value::Table(t) => {
            let fields: Vec<String> = t
                .iter()
                .map(|(k, v)| format!("{k} = {}", inline(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        other => other.to_string(),
    }
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
        let value = |text: &str| toml::from_str::<toml::Table>(text).unwrap()["s"].clone();
        let old = value("s = { addrs = [\"127.0.0.1:1\"], backlog = 16, note = \"a, b\", x = 1 }");
        let new = value("s = { addrs = [\"127.0.0.1:1\"], backlog = 64, note = \"a, c\" }");
        assert_eq!(
            differing_fields(&old, &new),
            [
                (".backlog".to_string(), "16".to_string(), "64".to_string()),
                (
                    ".note".to_string(),
                    r#""a, b""#.to_string(),
                    r#""a, c""#.to_string()
                ),
                (".x".to_string(), "1".to_string(), r#""none""#.to_string()),
            ]
        );
        let (round, least) = (
            value("s = \"round_robin\""),
            value("s = \"least_connections\""),
        );
        assert_eq!(
            differing_fields(&round, &least),
            [(
                String::new(),
                "round_robin".to_string(),
                "least_connections".to_string()
            )]
        );
    }

    #[test]
    fn sections_are_recorded_as_values_not_text() {
        let c = config(&format!("{WEB}idle_timeout = \"90s\"\n"));
        let s = settings(&c);
        let timeouts = &s["frontend \"web\" timeouts"];
        assert_eq!(
            timeouts.get("idle").and_then(toml::Value::as_str),
            Some("1m 30s"),
            "{timeouts}"
        );
        let tls = &s["frontend \"web\" tls"];
        let versions = tls
            .get("versions")
            .and_then(toml::Value::as_array)
            .expect("a list");
        assert!(
            versions.iter().any(|v| v.as_str() == Some("TLSv1_3")),
            "{tls}"
        );
        assert_eq!(
            s["frontend \"web\""]
                .get(TASKS)
                .and_then(toml::Value::as_bool),
            Some(false)
        );
        // Written and read back, the record compares equal: nothing is lost in the file.
        let text = toml::to_string(&Snapshot {
            pid: 1,
            format: FORMAT,
            settings: s.clone(),
        })
        .unwrap();
        let back: Snapshot = toml::from_str(&text).unwrap();
        assert!(changes(&s, &back.settings).is_empty(), "{text}");
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
