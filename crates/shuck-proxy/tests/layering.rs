//! The layering rule of docs/architecture.md, checked on the source, module by module: each
//! module is a file, named by its full path (`tls::hello`, `sys::clock`; a folder's `mod.rs` is
//! the folder). Test code is left out (`mod tests` at the end of a file, files named
//! `tests.rs`).
//!
//! - No import cycle between modules, at any depth: two files of one folder (as `tls::hello`
//!   and `tls::handshake` once were) as much as two folders. A module and its own children are
//!   one thing for this (a parent declares and re-exports its children, which use what it
//!   holds), so only edges between modules neither of which contains the other count.
//! - Imports go down the layers of `LAYERS`, whose entries are full paths: an entry covers the
//!   module it names and everything under it that has no entry of its own. Here too a module
//!   and its own children are one: a child may use what its parent holds.

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

/// A file's module path (`tls::hello` for src/tls/hello.rs, `tls` for src/tls/mod.rs); `None`
/// for lib.rs and test files.
fn module_of(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .filter_map(|c| c.as_os_str().to_str().map(String::from))
        .collect();
    match parts.last().map(String::as_str) {
        Some("lib" | "tests") => return None,
        Some("mod") => {
            parts.pop();
        }
        _ => {}
    }
    Some(parts)
}

/// The code before an inline `mod tests { ... }` at the end of a file (a `mod tests;` that
/// names a file is a declaration like any other, with code after it).
fn without_tests(code: &str) -> &str {
    code.find("#[cfg(test)]\nmod tests {")
        .map_or(code, |i| &code[..i])
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The module paths written at the start of `code` (after `crate::`, `super::` or a child's
/// name): `a::b::c`, or a group `a::{b, c::{d}}` spelled out (`a::b`, `a::c::d`), each
/// prefixed with `prefix`. Only lowercase names can be modules; the rest of a path is cut.
fn paths(code: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut segs = prefix.to_vec();
    let mut rest = code;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            for item in top_level_items(group) {
                paths(item.trim(), &segs, out);
            }
            return;
        }
        let ident: String = rest.chars().take_while(|&c| is_ident(c)).collect();
        if !ident
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        {
            break;
        }
        rest = &rest[ident.len()..];
        segs.push(ident);
        match rest.strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out.push(segs);
}

/// The comma-separated items of a `{...}` group (its opening brace already taken).
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

/// The modules `code` (of module `me`, whose children are `children`) names: through
/// `crate::`, `super::` (from `me`'s place) and its children's names.
fn references(code: &str, me: &[String], children: &BTreeSet<String>) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        paths(&code[i + "crate::".len()..], &[], &mut out);
    }
    let mut i = 0;
    while let Some(at) = code[i..].find("super::") {
        let start = i + at;
        let mut end = start;
        let mut climbs = 0;
        while code[end..].starts_with("super::") {
            end += "super::".len();
            climbs += 1;
        }
        let before = code[..start].chars().next_back();
        if !before.is_some_and(|c| is_ident(c) || c == ':') {
            let base = &me[..me.len().saturating_sub(climbs)];
            paths(&code[end..], base, &mut out);
        }
        i = end;
    }
    for child in children {
        let pattern = format!("{child}::");
        for (i, _) in code.match_indices(&pattern) {
            let before = code[..i].chars().next_back();
            if !before.is_some_and(|c| is_ident(c) || c == ':') {
                let mut base = me.to_vec();
                base.push(child.clone());
                paths(&code[i + pattern.len()..], &base, &mut out);
            }
        }
    }
    out
}

/// `mod x;` declarations: the file's children.
fn children(code: &str) -> BTreeSet<String> {
    code.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l
                .strip_prefix("pub(crate) ")
                .or_else(|| l.strip_prefix("pub "))
                .unwrap_or(l);
            l.strip_prefix("mod ")?.strip_suffix(';').map(String::from)
        })
        .collect()
}

type Graph = BTreeMap<String, BTreeSet<String>>;

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, PathBuf> = files
        .into_iter()
        .filter_map(|f| Some((module_of(&src, &f)?, f)))
        .collect();
    let resolve = |segs: &[String]| {
        (1..=segs.len())
            .rev()
            .map(|k| &segs[..k])
            .find(|p| modules.contains_key(*p))
            .map(|p| p.join("::"))
    };
    let mut g = Graph::new();
    for (me, file) in &modules {
        let code = std::fs::read_to_string(file).expect("read");
        let code = without_tests(&code);
        let name = me.join("::");
        let edges: BTreeSet<String> = references(code, me, &children(code))
            .iter()
            .filter_map(|segs| resolve(segs))
            .filter(|other| !contains(&name, other) && !contains(other, &name))
            .collect();
        g.insert(name, edges);
    }
    g
}

/// Whether module `outer` is `inner` or contains it.
fn contains(outer: &str, inner: &str) -> bool {
    inner == outer || inner.starts_with(&format!("{outer}::"))
}

/// A cycle through `start`, if any, as the list of modules on it.
fn cycle_from(g: &Graph, start: &str, path: &mut Vec<String>) -> Option<Vec<String>> {
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
fn the_parser_sees_paths_groups_super_and_children() {
    let me: Vec<String> = ["tls", "hello"].map(String::from).into();
    let kids: BTreeSet<String> = ["fields".to_string()].into();
    let code = "use crate::config::Frontend;\nuse crate::{conn::demo, tls::{a, b::{c}}, obs::log_limit};\n\
                let x = crate::conn::relay::x();\nuse super::handshake_error::E;\nuse super::super::mem::q;\n\
                let y = fields::parse();\nlet z = my_fields::no();";
    let got: BTreeSet<String> = references(code, &me, &kids)
        .into_iter()
        .map(|s| s.join("::"))
        .collect();
    let want: BTreeSet<String> = [
        "config::",
        "conn::demo",
        "tls::a",
        "tls::b::c",
        "obs::log_limit",
        "conn::relay::x",
        "tls::handshake_error::",
        "mem::q",
        "tls::hello::fields::parse",
    ]
    .map(|s| s.trim_end_matches("::").to_string())
    .into();
    // `Frontend` and `E` are types: the path stops before them.
    assert_eq!(got, want);
}

#[test]
fn no_import_cycle_between_modules_at_any_depth() {
    let g = graph();
    assert!(g.len() > 50, "the source was read: {g:?}");
    for start in g.keys() {
        if let Some(cycle) = cycle_from(&g, start, &mut vec![start.clone()]) {
            panic!("import cycle: {} -> {start}", cycle.join(" -> "));
        }
    }
}

/// The layers of docs/architecture.md: a module imports only from lower layers. An entry
/// covers its module and the modules under it that have no entry of their own; the folders
/// that only declare their files (`mem`, `sys`, …) import nothing, and `sessions` covers the
/// resumption modules (tickets, ticket keys, the cache, the remote store's front, resumption).
const LAYERS: [&[&str]; 11] = [
    &[
        "error",
        "mem",
        "sys",
        "obs",
        "conn",
        "certs",
        "proto",
        "proto::proxy_protocol",
        "proto::tls_params",
        "mem::buf_pool",
        "obs::log_limit",
        "store::sealing",
        "certs::x509",
        "sys::state_files",
        "sys::notify",
        "sys::files",
        "sys::clock",
        "sys::sockopt",
        "proto::hello_fields",
    ],
    &[
        "sys::pid_file",
        "certs::ocsp",
        "config",
        "obs::logging",
        "sys::limits",
        "store",
        "mem::buf_queue",
        "sys::listener",
    ],
    &["sessions", "sys::upgrade"],
    &[
        "tls",
        "certs::acme",
        "certs::staple_refresh",
        "server::running",
        "conn::proxy_in",
        "backend",
        "conn::relay",
    ],
    &["conn::conn_error"],
    &["metrics", "conn::backend_header", "conn::demo"],
    &["server::worker", "server::health_checks"],
    &[
        "conn::connection",
        "server::bindings",
        "server::dns_follow",
        "server::cert_watch",
    ],
    &["server::accept", "server::backend_watch"],
    &["server::reload"],
    &["server", "server::check"],
];

/// The entry of `LAYERS` that covers `module` (the longest that contains it) and its layer.
fn entry_of(module: &str) -> (&'static str, usize) {
    LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, entries)| entries.iter().map(move |e| (*e, layer)))
        .filter(|(e, _)| contains(e, module))
        .max_by_key(|(e, _)| e.len())
        .unwrap_or_else(|| {
            panic!("module {module} is in no layer: add it to LAYERS and to docs/architecture.md")
        })
}

#[test]
fn imports_go_down_the_layers() {
    for (module, imports) in graph() {
        let (entry, layer) = entry_of(&module);
        for i in imports {
            let (other, other_layer) = entry_of(&i);
            assert!(
                other == entry || other_layer < layer,
                "{module} (layer {layer}) imports {i} (layer {other_layer})"
            );
        }
    }
}

#[test]
fn the_protocol_codec_imports_nothing_from_the_engine() {
    let g = graph();
    for (module, imports) in &g {
        if contains("proto::proxy_protocol", module) {
            let outside: Vec<&String> = imports
                .iter()
                .filter(|i| !contains("proto::proxy_protocol", i))
                .collect();
            assert!(outside.is_empty(), "{module} imports {outside:?}");
        }
    }
}
