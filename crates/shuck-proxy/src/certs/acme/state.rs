//! The state directory: what shuck must find again after a restart. Directories are 0700, files
//! 0600 (an account key and certificate keys live here), each written to a temporary name,
//! synced and renamed, so a crash never leaves half a file.
//!
//! `<state_dir>/acme/accounts/<directory digest>.json`: the account for one CA directory.
//! `<state_dir>/acme/certs/<frontend>.pem`: the chain as issued, then its key.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::PemObject as _;

use super::AcmeError;
use crate::certs::x509::X509;
use crate::sys::state_files;

/// The account file for a CA directory (one account per directory, shared by frontends).
pub(super) fn account_path(acme_dir: &Path, directory: &str) -> PathBuf {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, directory.as_bytes());
    let name = digest.as_ref()[..8].iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    });
    acme_dir.join("accounts").join(format!("{name}.json"))
}

/// `state_files::write_private`, its error naming the file.
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), AcmeError> {
    state_files::write_private(path, bytes).map_err(|source| AcmeError::State {
        path: path.to_path_buf(),
        source,
    })
}

/// What the stored certificate says about itself, for the renewal schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    /// Unix seconds.
    pub not_before: i64,
    pub not_after: i64,
    pub names: Vec<String>,
    /// The Authority Key Identifier and the serial's content bytes (what RFC 9773 names a
    /// certificate by), when it has the former.
    pub ari: Option<(Vec<u8>, Vec<u8>)>,
}

impl Stored {
    /// Reads the leaf of a bundle; `None` when there is none or it cannot be parsed (the
    /// frontend then serves its temporary certificate and a new one is ordered).
    pub(crate) fn read(bundle: &Path) -> Option<Stored> {
        Self::parse(&crate::sys::files::read(bundle).ok()?)
    }

    /// The same, of a bundle's bytes.
    pub(crate) fn parse(pem: &[u8]) -> Option<Stored> {
        let der = rustls::pki_types::CertificateDer::pem_slice_iter(pem)
            .next()?
            .ok()?;
        let leaf = X509::parse(&der).ok()?;
        let (not_before, not_after) = leaf.validity();
        Some(Stored {
            not_before,
            not_after,
            names: leaf.dns_names(),
            ari: leaf
                .authority_key_id()
                .map(|aki| (aki, leaf.serial().to_vec())),
        })
    }

    /// Whether it names all of `names`.
    pub(crate) fn covers(&self, names: &[String]) -> bool {
        names.iter().all(|n| self.names.contains(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_account_file_per_directory() {
        let d = Path::new("/s/acme");
        let a = account_path(d, "https://a.example/dir");
        assert_ne!(a, account_path(d, "https://b.example/dir"));
        assert!(a.starts_with("/s/acme/accounts"));
    }
}
