//! Reading the engine's own source, for the tests that check its shape (`layering`, `statics`).

use std::path::{Path, PathBuf};

/// Every `.rs` file under src/.
pub(crate) fn files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(), &mut out);
    out
}

/// The engine's src/ directory.
pub(crate) fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The code before an inline `mod tests { ... }` at the end of a file (a `mod tests;` that
/// names a file is a declaration like any other, with code after it).
pub(crate) fn without_tests(code: &str) -> &str {
    code.find("#[cfg(test)]\nmod tests {")
        .map_or(code, |i| &code[..i])
}
