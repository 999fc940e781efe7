//! The layering rule of docs/architecture.md, checked on the source: no import cycle between the
//! engine's top-level modules. A module's children count as the module (`tls::params` is `tls`),
//! and test code (`mod tests` at the end of a file) is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`None` for lib.rs).
fn top_module(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next()?.as_os_str().to_str()?.to_string();
    (first != "lib.rs").then(|| first.trim_end_matches(".rs").to_string())
}

/// Top-level modules named after `crate::` in `code`: in paths and in `use crate::{a, b::{c}}`
/// groups (only the group's top level names modules).
fn crate_references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for piece in code.split("crate::").skip(1) {
        let names = match piece.strip_prefix('{') {
            Some(group) => top_level_items(group),
            None => vec![piece],
        };
        for n in names {
            let ident: String = n
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if ident.chars().next().is_some_and(char::is_lowercase) {
                found.insert(ident);
            }
        }
    }
    found
}

/// The comma-separated items of a `{...}` group (its opening brace already taken), not those of
/// groups nested in it.
fn top_level_items(group: &str) -> Vec<&str> {
    let (mut depth, mut start, mut items) = (0usize, 0, Vec::new());
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// `super::` paths that climb to the crate root, written as `crate::` (a file's depth decides
/// how many `super::` that takes).
fn rooted(code: &str, src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let depth = rel.components().count() - usize::from(rel.ends_with("mod.rs"));
    code.replace(&"super::".repeat(depth.max(1)), "crate::")
}

fn without_tests(code: &str) -> &str {
    code.find("#[cfg(test)]\nmod tests")
        .map_or(code, |i| &code[..i])
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let Some(module) = top_module(&src, &f) else {
            continue;
        };
        let code = std::fs::read_to_string(&f).expect("read");
        let refs = crate_references(&rooted(without_tests(&code), &src, &f));
        let edges = g.entry(module.clone()).or_default();
        edges.extend(refs.into_iter().filter(|r| *r != module));
    }
    g
}

/// A cycle through `start`, if any, as the list of modules on it.
fn cycle_from(
    g: &BTreeMap<String, BTreeSet<String>>,
    start: &str,
    path: &mut Vec<String>,
) -> Option<Vec<String>> {
    let here = path.last().expect("non-empty").clone();
    for next in g.get(&here).into_iter().flatten() {
        if next == start {
            return Some(path.clone());
        }
        if !path.contains(next) {
            path.push(next.clone());
            if let Some(c) = cycle_from(g, start, path) {
                return Some(c);
            }
            path.pop();
        }
    }
    None
}

#[test]
fn the_parser_sees_paths_and_groups() {
    let refs = crate_references(
        "use crate::config::Frontend;\nuse crate::{demo, tls::{a, b}, log_limit};\nlet x = crate::relay::x();",
    );
    let want: BTreeSet<String> = ["config", "demo", "log_limit", "relay", "tls"]
        .map(String::from)
        .into();
    assert_eq!(refs, want);
    // From src/worker.rs one `super::` is the crate; from src/tls/sni.rs it takes two.
    let src = Path::new("/s/src");
    let code = rooted("use super::config;", src, Path::new("/s/src/worker.rs"));
    assert!(crate_references(&code).contains("config"));
    let code = rooted(
        "use super::super::metrics; use super::certs;",
        src,
        Path::new("/s/src/tls/sni.rs"),
    );
    assert_eq!(crate_references(&code), ["metrics".to_string()].into());
}

#[test]
fn no_import_cycle_between_modules() {
    let g = graph();
    assert!(g.len() > 10, "the source was read: {g:?}");
    for start in g.keys() {
        if let Some(cycle) = cycle_from(&g, start, &mut vec![start.clone()]) {
            panic!("import cycle: {} -> {start}", cycle.join(" -> "));
        }
    }
}

/// The layers of docs/architecture.md: a module imports only from lower layers.
const LAYERS: [&[&str]; 10] = [
    &[
        "error",
        "proxy_protocol",
        "tls_params",
        "buf_pool",
        "log_limit",
        "sealing",
        "ocsp",
        "state_files",
        "notify",
        "files",
        "pid_file",
        "clock",
        "sockopt",
    ],
    &[
        "upgrade",
        "config",
        "logging",
        "limits",
        "session_store",
        "buf_queue",
        "listener",
    ],
    &[
        "tls",
        "acme",
        "staple_refresh",
        "running",
        "proxy_in",
        "backend",
        "relay",
    ],
    &["conn_error"],
    &["metrics", "proxy_out", "demo"],
    &["worker"],
    &["connection", "bindings"],
    &["accept"],
    &["reload"],
    &["server", "check"],
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| {
            panic!("module {module} is in no layer: add it to LAYERS and to docs/architecture.md")
        })
}

#[test]
fn imports_go_down_the_layers() {
    for (module, imports) in graph() {
        let layer = layer_of(&module);
        for i in imports {
            assert!(
                layer_of(&i) < layer,
                "{module} (layer {layer}) imports {i} (layer {})",
                layer_of(&i)
            );
        }
    }
}

#[test]
fn the_protocol_codec_imports_nothing_from_the_engine() {
    let g = graph();
    let codec = g.get("proxy_protocol").expect("proxy_protocol module");
    assert!(codec.is_empty(), "proxy_protocol imports {codec:?}");
}
