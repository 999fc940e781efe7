//! The state directory: what shuck must find again after a restart. Directories are 0700, files
//! 0600 (an account key and certificate keys live here), each written to a temporary name,
//! synced and renamed, so a crash never leaves half a file.
//!
//! `<state_dir>/acme/accounts/<directory digest>.json`: the account for one CA directory.
//! `<state_dir>/acme/certs/<frontend>.pem`: the chain as issued, then its key.

use std::fmt::Write as _;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject as _;
use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};

use super::AcmeError;

/// The account file for a CA directory (one account per directory, shared by frontends).
pub(super) fn account_path(acme_dir: &Path, directory: &str) -> PathBuf {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, directory.as_bytes());
    let name = digest.as_ref()[..8].iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
    acme_dir.join("accounts").join(format!("{name}.json"))
}

/// Creates `dir` and its parents as needed, 0700; an existing one keeps its mode unless it is
/// readable by others, which is refused: keys live there.
pub fn ensure_private_dir(dir: &Path) -> Result<(), AcmeError> {
    let err = |source| AcmeError::State {
        path: dir.to_path_buf(),
        source,
    };
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(err)?;
    let mode = std::fs::metadata(dir).map_err(err)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(AcmeError::State {
            path: dir.to_path_buf(),
            source: std::io::Error::other(format!(
                "mode {:o} lets others in; it holds private keys (chmod 700)",
                mode & 0o777
            )),
        });
    }
    Ok(())
}

/// Writes `bytes` to `path` (mode 0600) atomically: a temporary file in the same directory,
/// synced, renamed over the old one, the directory synced.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), AcmeError> {
    let err = |source| AcmeError::State {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    ensure_private_dir(dir)?;
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(err)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(err)
}

/// What the stored certificate says about itself, for the renewal schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    pub names: Vec<String>,
}

impl Stored {
    /// Reads the leaf of a bundle; `None` when there is none or it cannot be parsed (the
    /// frontend then serves its temporary certificate and a new one is ordered).
    pub fn read(bundle: &Path) -> Option<Stored> {
        let pem = std::fs::read(bundle).ok()?;
        let der = rustls::pki_types::CertificateDer::pem_slice_iter(&pem)
            .next()?
            .ok()?;
        let (_, leaf) = X509Certificate::from_der(&der).ok()?;
        let mut names = Vec::new();
        if let Ok(Some(san)) = leaf.subject_alternative_name() {
            for n in &san.value.general_names {
                if let GeneralName::DNSName(d) = n {
                    names.push(d.to_ascii_lowercase());
                }
            }
        }
        Some(Stored {
            not_before: leaf.validity().not_before.timestamp(),
            not_after: leaf.validity().not_after.timestamp(),
            names,
        })
    }

    /// Whether it names all of `names`.
    pub fn covers(&self, names: &[String]) -> bool {
        names.iter().all(|n| self.names.contains(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_files_are_0600_in_0700_directories_and_replaced_whole() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("acme/certs/web.pem");
        write_private(&path, b"one").expect("write");
        write_private(&path, b"two").expect("rewrite");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().expect("dir")), 0o700);
        assert!(!path.with_extension("tmp").exists());
    }

    #[test]
    fn a_directory_others_can_read_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let e = ensure_private_dir(&open).expect_err("refused");
        assert!(e.to_string().contains("chmod 700"), "{e}");
    }

    #[test]
    fn one_account_file_per_directory() {
        let d = Path::new("/s/acme");
        let a = account_path(d, "https://a.example/dir");
        assert_ne!(a, account_path(d, "https://b.example/dir"));
        assert!(a.starts_with("/s/acme/accounts"));
    }
}
