//! Files shuck keeps in its state directory (ACME accounts and certificates, OCSP staples):
//! directories 0700, files 0600, each written to a temporary name, synced and renamed, so a
//! crash never leaves half a file.

use std::fs::{DirBuilder, File};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` and its parents as needed, 0700; an existing one that others may enter is
/// refused: keys live there.
pub(crate) fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
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

/// Writes `bytes` to `path` (mode 0600) atomically, in a directory kept private (0700).
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    ensure_private_dir(directory_of(path))?;
    replace(path, bytes, 0o600)
}

/// Replaces `path` with `bytes` (mode `mode`) atomically: a temporary file of a unique name in
/// the same directory (two processes, old and new during an upgrade, may write the same file
/// at once), synced, renamed over the old one, the directory synced. A crash between the two
/// leaves a `.shuck-*` file behind, which nothing reads and which may be deleted. Also the pid
/// file's writer (`pid_file`).
pub(crate) fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = directory_of(path);
    // tempfile creates it 0600.
    let mut tmp = tempfile::Builder::new()
        .prefix(".shuck-")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    if mode != 0o600 {
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(mode))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    File::open(dir).and_then(|d| d.sync_all())
}

/// The directory a file is in (`.` for a bare file name).
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
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
        let left: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(left, ["web.pem"], "no temporary file left behind");
    }

    /// Another writer's temporary file (the old process during an upgrade) is not in the way:
    /// each write has a name of its own. With one fixed `X.tmp` name, this write failed.
    #[test]
    fn a_write_does_not_use_a_fixed_temporary_name() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let path = tmp.path().join("state/running.toml");
        std::fs::create_dir_all(path.with_extension("tmp")).expect("another writer's name");
        std::fs::set_permissions(
            path.parent().expect("dir"),
            std::fs::Permissions::from_mode(0o700),
        )
        .expect("chmod");
        write_private(&path, b"ours").expect("write beside it");
        assert_eq!(std::fs::read(&path).expect("read"), b"ours");
    }

    /// What `ensure_private_dir` says of an existing directory of `mode`.
    fn ensure_on_mode(mode: u32) -> std::io::Result<()> {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("existing");
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).expect("chmod");
        ensure_private_dir(&dir)
    }

    /// A refusal names the mode found and the fix.
    fn refused_with_mode(mode: u32) -> String {
        ensure_on_mode(mode).expect_err("refused").to_string()
    }

    #[test]
    fn a_directory_others_can_read_is_refused() {
        // The usual mode of a directory made by hand: others list it and read what is in it.
        let e = refused_with_mode(0o755);
        assert!(e.contains("mode 755") && e.contains("chmod 700"), "{e}");
    }

    #[test]
    fn a_directory_its_group_can_read_is_refused() {
        let e = refused_with_mode(0o750);
        assert!(e.contains("mode 750") && e.contains("chmod 700"), "{e}");
    }

    #[test]
    fn a_directory_others_can_enter_is_refused() {
        // Others may not list it, but may enter it and open what they can name.
        let e = refused_with_mode(0o711);
        assert!(e.contains("mode 711") && e.contains("chmod 700"), "{e}");
    }

    #[test]
    fn a_private_directory_is_kept() {
        ensure_on_mode(0o700).expect("a 0700 directory is private");
    }
}
