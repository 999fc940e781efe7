//! Certificates an operator added to a running frontend (`shuck ctl cert add|replace|remove`):
//! PEM bundles (chain and key) kept in `state_dir/certs/<frontend>/`, checked as a configured
//! certificate is before one is written there, and loaded with the frontend's own at every
//! load after (start, reload, refresh), so they outlive reloads and restarts until removed.
//! `shuck check` shows them too.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::config::{CertFiles, Frontend};
use crate::error::{Error, Result};
use crate::tls::certs::{self, LoadedCert};

/// The directory of `frontend`'s added certificates.
pub(crate) fn dir_of(state_dir: &Path, frontend: &str) -> PathBuf {
    state_dir.join("certs").join(file_safe(frontend))
}

/// `name` as a file name: letters, digits, `.`, `-` and `_` as they are, every other byte
/// (and a leading dot) as `%XX`, so two names never share a file.
fn file_safe(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_') || (b == b'.' && i > 0);
        if plain {
            s.push(char::from(b));
        } else {
            let _ = write!(s, "%{b:02X}");
        }
    }
    if s.is_empty() {
        s.push_str("%00");
    }
    s
}

/// The bundles added to `fe`, sorted by name (none when its directory does not exist).
pub(crate) fn bundles(fe: &Frontend) -> Vec<CertFiles> {
    let dir = dir_of(&fe.state_dir, &fe.name);
    let Ok(read) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = read
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pem") && p.is_file())
        .collect();
    found.sort();
    found
        .into_iter()
        .map(|cert| CertFiles { cert, key: None })
        .collect()
}

/// What an add, replace or remove changed on disk, to be undone if loading the frontend with
/// it fails.
#[derive(Debug)]
pub struct Staged {
    pub path: PathBuf,
    /// The bundle it replaced or removed, if any.
    before: Option<Vec<u8>>,
}

/// Whether a name must be new, must exist, or must go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Add,
    Replace,
    Remove,
}

/// Checks `pem` (the chain, leaf first, and its key) as a configured certificate is checked, and
/// writes it as `name` (else the leaf's first DNS name) among `fe`'s added certificates.
pub(crate) fn stage(
    fe: &Frontend,
    name: Option<&str>,
    pem: &[u8],
    change: Change,
) -> Result<(Staged, LoadedCert)> {
    let dir = dir_of(&fe.state_dir, &fe.name);
    crate::sys::state_files::ensure_private_dir(&dir)
        .map_err(|e| Error::StateDir(format!("{}: {e}", dir.display())))?;
    // Checked where it will live, under a name of its own that no load reads (not `*.pem`).
    let trial_error = |source| Error::CertRead {
        path: dir.join(".trial-*"),
        source,
    };
    let mut trial = tempfile::Builder::new()
        .prefix(".trial-")
        .tempfile_in(&dir)
        .map_err(trial_error)?;
    std::io::Write::write_all(&mut trial, pem).map_err(trial_error)?;
    let provider = crate::tls::provider_for(fe);
    let loaded = certs::load_bundle(trial.path(), &provider);
    drop(trial);
    let loaded = loaded.map_err(|e| match e {
        Error::Cert { message, .. } => Error::Cert {
            path: PathBuf::from("<the PEM sent>"),
            message,
        },
        other => other,
    })?;
    let name = match name {
        Some(n) => n.to_string(),
        None => loaded.names.first().cloned().ok_or_else(|| Error::Cert {
            path: PathBuf::from("<the PEM sent>"),
            message: "the certificate names no DNS name: give it a --name".into(),
        })?,
    };
    let path = dir.join(format!("{}.pem", file_safe(&name)));
    let before = exists_as(&path, change)?;
    crate::sys::state_files::write_private(&path, pem).map_err(|source| Error::CertRead {
        path: path.clone(),
        source,
    })?;
    Ok((Staged { path, before }, loaded))
}

/// Removes `name` from `fe`'s added certificates.
pub(crate) fn unstage(fe: &Frontend, name: &str) -> Result<Staged> {
    let path = dir_of(&fe.state_dir, &fe.name).join(format!("{}.pem", file_safe(name)));
    let before = exists_as(&path, Change::Remove)?;
    std::fs::remove_file(&path).map_err(|source| Error::CertRead {
        path: path.clone(),
        source,
    })?;
    Ok(Staged { path, before })
}

/// The bundle now at `path`, refusing what `change` does not allow.
fn exists_as(path: &Path, change: Change) -> Result<Option<Vec<u8>>> {
    let now = std::fs::read(path).ok();
    let refused = |message: &str| Error::Cert {
        path: path.to_path_buf(),
        message: message.into(),
    };
    match (change, &now) {
        (Change::Add, Some(_)) => Err(refused(
            "an added certificate has this name: replace it, or give another --name",
        )),
        (Change::Replace | Change::Remove, None) => Err(refused(
            "no added certificate has this name (cert list shows them)",
        )),
        _ => Ok(now),
    }
}

impl Staged {
    /// Puts back what was there before.
    pub fn undo(self) {
        let _ = match self.before {
            Some(bytes) => crate::sys::state_files::write_private(&self.path, &bytes),
            None => std::fs::remove_file(&self.path),
        };
    }
}

/// Whether `path` is one of the added certificates (for listings).
pub(crate) fn is_added(state_dir: &Path, path: &str) -> bool {
    Path::new(path).starts_with(state_dir.join("certs"))
}

#[cfg(test)]
mod tests {
    use super::file_safe;

    #[test]
    fn names_that_differ_never_share_a_file() {
        let names = [
            "a/b",
            "a b",
            "a_b",
            "a%2Fb",
            ".hidden",
            "..",
            "www.example.com",
            "*.example.com",
        ];
        let files: std::collections::BTreeSet<String> =
            names.iter().map(|n| file_safe(n)).collect();
        assert_eq!(files.len(), names.len(), "{files:?}");
        assert_eq!(file_safe("www.example.com"), "www.example.com");
        assert_eq!(file_safe("*.example.com"), "%2A.example.com");
        assert!(
            files
                .iter()
                .all(|f| !f.contains('/') && !f.starts_with('.')),
            "{files:?}"
        );
    }
}
