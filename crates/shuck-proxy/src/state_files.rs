//! Files shuck keeps in its state directory (ACME accounts and certificates, OCSP staples):
//! directories 0700, files 0600, each written to a temporary name, synced and renamed, so a
//! crash never leaves half a file.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` and its parents as needed, 0700; an existing one that others may enter is
/// refused: keys live there.
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let mode = std::fs::metadata(dir)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(std::io::Error::other(format!(
            "mode {:o} lets others in; it holds private keys (chmod 700)",
            mode & 0o777
        )));
    }
    Ok(())
}

/// Writes `bytes` to `path` (mode 0600) atomically: a temporary file in the same directory,
/// synced, renamed over the old one, the directory synced.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    ensure_private_dir(dir)?;
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    File::open(dir).and_then(|d| d.sync_all())
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
        // Others may not list it, but may enter it and open what they can name.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o711)).expect("chmod");
        let e = ensure_private_dir(&open).expect_err("refused");
        assert!(e.to_string().contains("chmod 700"), "{e}");
    }

    #[test]
    fn a_directory_others_can_enter_is_refused() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let open = tmp.path().join("open");
        std::fs::create_dir(&open).expect("mkdir");
        // Others may not list it, but may enter it and open what they can name.
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o711)).expect("chmod");
        let e = ensure_private_dir(&open).expect_err("refused");
        assert!(e.to_string().contains("chmod 700"), "{e}");
    }
}
