//! The layering rule of docs/architecture.md, checked on the source, module by module: each
//! module is a file, named by its full path (`tls::hello`, `sys::clock`; a folder's `mod.rs` is
//! the folder). Test code is left out (`mod tests` at the end of a file, files named
//! `tests.rs`).
//!
//! - No import cycle between modules, at any depth: two files of one folder (as `tls::hello`
//!   and `tls::handshake` once were) as much as two folders. A module and its own children are
//!   one thing for this (a parent declares and re-exports its children, which use what it
//!   holds), so only edges between modules neither of which contains the other count.
//! - Folders are layers: a module imports only from its own top-level folder or from the
//!   folders of a lower layer of `LAYERS`, so the folder graph has no cycle either (checked
//!   on its own too, so a cycle is named as one).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod source;
use source::without_tests;

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
    let (src, files) = (source::src(), source::files());
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

/// The layers of docs/architecture.md, one entry per top-level folder of the engine (or file, as
/// `error`), lowest first: a module imports only from its own folder or from a folder of a lower
/// layer. Folders of one layer do not import each other.
const LAYERS: [&[&str]; 9] = [
    &["error", "proto", "mem", "obs"],
    &["sys"],
    &["config", "store"],
    &["certs", "sessions", "backend"],
    &["tls"],
    &["conn"],
    &["metrics"],
    &["worker"],
    &["server"],
];

/// The top-level folder (or file) a module lives in.
fn folder_of(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

/// The layer of the folder `module` lives in.
fn layer_of(module: &str) -> usize {
    let folder = folder_of(module);
    LAYERS
        .iter()
        .position(|folders| folders.contains(&folder))
        .unwrap_or_else(|| {
            panic!("folder {folder} is in no layer: add it to LAYERS and to docs/architecture.md")
        })
}

#[test]
fn imports_go_down_the_layers() {
    for (module, imports) in graph() {
        let layer = layer_of(&module);
        for i in imports {
            assert!(
                folder_of(&i) == folder_of(&module) || layer_of(&i) < layer,
                "{module} (layer {layer}) imports {i} (layer {})",
                layer_of(&i)
            );
        }
    }
}

#[test]
fn no_import_cycle_between_folders() {
    let mut folders = Graph::new();
    for (module, imports) in graph() {
        let from = folder_of(&module).to_string();
        let to = imports.iter().map(|i| folder_of(i).to_string());
        let edges = folders.entry(from.clone()).or_default();
        edges.extend(to.filter(|f| *f != from));
    }
    assert!(folders.len() >= 12, "every folder was read: {folders:?}");
    for start in folders.keys() {
        if let Some(cycle) = cycle_from(&folders, start, &mut vec![start.clone()]) {
            panic!("folder cycle: {} -> {start}", cycle.join(" -> "));
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
