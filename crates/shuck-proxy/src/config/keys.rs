//! The file's keys, looked at before serde reads it, for what serde's own messages do not say:
//! a key that is not one gets the nearest that is ("did you mean"), `[frontend]` written with
//! single brackets is named as such, and a bare number where a duration goes is told its unit.
//! A file that passes is then read by serde as before (its messages carry the line).
//!
//! The keys of each table come from the raw structs' own serde field lists
//! (`serde_introspect`), so a key added to a struct is known here without a second list.

use serde_aux::serde_introspection::serde_introspect;
use toml::{Table, Value};

use super::{key_err, KeyError, RawConfig, RawFrontend};

/// Keys whose values are durations ("10s"): a bare number there is told its unit. The
/// `every_duration_key_is_listed` test keeps this in step with the structs.
const DURATION_KEYS: &[&str] = &[
    "shutdown_grace",
    "reload_timeout",
    "upgrade_confirm",
    "upgrade_timeout",
    "certificate_expiry_warning",
    "handshake_timeout",
    "idle_timeout",
    "connect_timeout",
    "backend_cooldown",
    "dns_refresh",
    "defer_accept",
    "proxy_header_timeout",
    "session_ticket_lifetime",
    "session_store_timeout",
    "interval",
    "timeout",
];

/// Keys that hold a list of tables, written `[[…]]`.
const TABLE_LISTS: &[&str] = &["frontend", "route"];

/// `{ cert = …, key = … }` (its `Deserialize` is written by hand, so it has no field list).
const CERT_PAIR_KEYS: &[&str] = &["cert", "key"];

/// The keys a table under `path` (its keys from the top, `frontend.route` for a route) may
/// hold; `None` for tables this does not know (serde still checks them).
fn keys_at(path: &str) -> Option<&'static [&'static str]> {
    Some(match path {
        "" => serde_introspect::<RawConfig>(),
        "frontend" => serde_introspect::<RawFrontend>(),
        "frontend.route" => serde_introspect::<super::routes::RawRoute>(),
        "frontend.per_client" => serde_introspect::<super::admission::RawPerClient>(),
        "frontend.acme" => serde_introspect::<super::acme::RawAcme>(),
        "frontend.health_check" | "frontend.route.health_check" => {
            serde_introspect::<super::health::RawHealthCheck>()
        }
        "frontend.backend" | "frontend.route.backend" => {
            serde_introspect::<super::backend::WeightedBackend>()
        }
        "frontend.certificates" => CERT_PAIR_KEYS,
        "frontend.backend_tls" | "frontend.route.backend_tls" => {
            serde_introspect::<super::backend_tls::RawBackendTls>()
        }
        "frontend.backend_tls.client_certificate"
        | "frontend.route.backend_tls.client_certificate" => {
            serde_introspect::<super::backend_tls::RawCertPair>()
        }
        _ => return None,
    })
}

/// Checks every table of `file` whose keys are known.
pub(super) fn check(file: &Table) -> Result<(), KeyError> {
    check_table(file, "", &Place::Top)
}

/// Where a table is, as a message names it.
enum Place<'a> {
    Top,
    /// The n-th (from 1) of a list of tables, with its `name` when it has one.
    Item {
        list: &'a str,
        n: usize,
        name: Option<&'a str>,
    },
    /// A table under a key of another.
    Under {
        key: &'a str,
        of: &'a Place<'a>,
    },
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Place::Top => f.write_str("the top level"),
            Place::Item { list, n, name } => {
                write!(f, "[[{list}]] number {n}")?;
                name.map_or(Ok(()), |name| write!(f, " ({name:?})"))
            }
            Place::Under { key, of } => write!(f, "{key} in {of}"),
        }
    }
}

fn check_table(table: &Table, path: &str, place: &Place<'_>) -> Result<(), KeyError> {
    let Some(keys) = keys_at(path) else {
        return Ok(());
    };
    for (key, value) in table {
        if !keys.contains(&key.as_str()) {
            return Err(unknown(key, keys, place));
        }
        check_value(key, value, path)?;
        let inner = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        match value {
            Value::Table(t) => check_table(t, &inner, &Place::Under { key, of: place })?,
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let Value::Table(t) = item else { continue };
                    let here = if TABLE_LISTS.contains(&key.as_str()) {
                        Place::Item {
                            list: if path.is_empty() { key } else { &inner },
                            n: i + 1,
                            name: t.get("name").and_then(Value::as_str),
                        }
                    } else {
                        Place::Under { key, of: place }
                    };
                    check_table(t, &inner, &here)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The shape of one value, where serde's message would not say what to write.
fn check_value(key: &str, value: &Value, path: &str) -> Result<(), KeyError> {
    if TABLE_LISTS.contains(&key) && value.is_table() {
        let full = if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        };
        return Err(key_err(
            key,
            format!("[{full}] is one table; each {key} is written [[{full}]] (double brackets), one per {key}"),
        ));
    }
    if DURATION_KEYS.contains(&key) && (value.is_integer() || value.is_float()) {
        return Err(key_err(
            key,
            format!("{value} has no unit: write {key} = \"{value}s\" (units: ms, s, m, h, d)"),
        ));
    }
    Ok(())
}

fn unknown(key: &str, keys: &[&str], place: &Place<'_>) -> KeyError {
    if let Some(near) = nearest(key, keys) {
        return key_err(key, format!("not a key of {place}; did you mean {near}?"));
    }
    let all: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
    key_err(
        key,
        format!("not a key of {place}; its keys: {}", all.join(", ")),
    )
}

/// The key `typed` was most likely meant to be: the same with `-` for `_` or another case, or
/// one a few edits away (at most 1 for short keys, 2 from 5 letters, 3 from 12).
fn nearest<'k>(typed: &str, keys: &[&'k str]) -> Option<&'k str> {
    let norm = typed.to_ascii_lowercase().replace('-', "_");
    let allowed = match norm.len() {
        0..=4 => 1,
        5..=11 => 2,
        _ => 3,
    };
    keys.iter()
        .map(|k| (strsim::damerau_levenshtein(&norm, k), *k))
        .filter(|(d, _)| *d <= allowed)
        .min()
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(text: &str) -> String {
        let table: Table = toml::from_str(text).expect("toml");
        let e = check(&table).expect_err("refused");
        format!("{}: {}", e.key, e.message)
    }

    #[test]
    fn a_misspelt_key_gets_the_nearest_and_where_it_is() {
        let m = message("[[frontend]]\nname = \"web\"\nidle_timout = \"30s\"\n");
        assert_eq!(
            m,
            "idle_timout: not a key of [[frontend]] number 1 (\"web\"); did you mean idle_timeout?"
        );
        let m = message("log-level = \"info\"\n[[frontend]]\n");
        assert!(m.ends_with("did you mean log_level?"), "{m}");
        let m = message("[[frontend]]\n[[frontend]]\n[[frontend.route]]\nsnii = [\"a\"]\n");
        assert!(m.contains("[[frontend.route]] number 1"), "{m}");
        assert!(m.ends_with("did you mean sni?"), "{m}");
        let m = message("[[frontend]]\nper_client = { conections = 3 }\n");
        assert!(m.contains("per_client in [[frontend]] number 1"), "{m}");
        assert!(m.ends_with("did you mean connections?"), "{m}");
        let m = message("[[frontend]]\ncolour = \"blue\"\n");
        assert!(m.contains("its keys: `name`, `listen`,"), "{m}");
    }

    #[test]
    fn single_brackets_and_bare_numbers_say_what_to_write() {
        let m = message("[frontend]\nlisten = \"127.0.0.1:443\"\n");
        assert!(m.contains("written [[frontend]] (double brackets)"), "{m}");
        let m = message("[[frontend]]\nidle_timeout = 30\n");
        assert_eq!(
            m,
            "idle_timeout: 30 has no unit: write idle_timeout = \"30s\" (units: ms, s, m, h, d)"
        );
    }

    #[test]
    fn a_good_file_passes() {
        let table: Table = toml::from_str(
            "workers = 2\n[[frontend]]\nname = \"a\"\nidle_timeout = \"30s\"\n\
             backend = [{ address = \"127.0.0.1:80\", weight = 2 }]\n\
             certificates = [{ cert = \"c.pem\", key = \"k.pem\" }]\n\
             health_check = { interval = \"2s\" }\n[[frontend.route]]\nsni = [\"x\"]\n",
        )
        .expect("toml");
        check(&table).expect("accepted");
    }

    /// Every field whose name says it is a duration is in `DURATION_KEYS`.
    #[test]
    fn every_duration_key_is_listed() {
        let all = [
            "",
            "frontend",
            "frontend.route",
            "frontend.acme",
            "frontend.health_check",
        ]
        .iter()
        .filter_map(|p| keys_at(p))
        .flatten();
        for key in all {
            let durationish = [
                "timeout",
                "grace",
                "confirm",
                "warning",
                "refresh",
                "cooldown",
                "lifetime",
                "interval",
                "defer_accept",
                "before",
            ]
            .iter()
            .any(|w| key.ends_with(w));
            if durationish {
                assert!(DURATION_KEYS.contains(key), "{key} is not in DURATION_KEYS");
            }
        }
    }
}
