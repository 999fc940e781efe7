//! Reading the files an operator names (configuration, certificates and keys, CA and CRL files,
//! ticket keys, the session store's key, OCSP responses): regular files only, and only up to a
//! size cap. A FIFO would stall a reload on its reader forever, `/dev/zero` or a huge sparse
//! file would be read whole into memory before any parser could say it is not what was meant.
//! The file is opened without blocking (a FIFO opens at once and is then refused) and read
//! through a limit, so one that grows while it is read cannot pass the cap either.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What any of these files needs by far: a certificate chain with its key is a few KiB, an OCSP
/// response a few hundred bytes.
pub(crate) const CAP: u64 = 1 << 20;
/// CA bundles and CRLs: a large CA's CRL runs to megabytes.
pub(crate) const LARGE_CAP: u64 = 64 << 20;

/// Why a file was refused before it was parsed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("not a regular file (a {0}); name a regular file")]
    NotRegular(&'static str),
    #[error("larger than the {} KiB limit for this kind of file", .0 / 1024)]
    TooLarge(u64),
}

/// The whole of `path`, a regular file of at most [`CAP`] bytes.
pub(crate) fn read(path: &Path) -> io::Result<Vec<u8>> {
    read_capped(path, CAP)
}

/// [`read`], as UTF-8 text.
pub(crate) fn read_to_string(path: &Path) -> io::Result<String> {
    String::from_utf8(read(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The whole of `path`, a regular file of at most `cap` bytes. A refusal is an
/// `InvalidInput` error carrying a [`Refused`].
pub(crate) fn read_capped(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let len = file.metadata()?.len();
    if len > cap {
        return Err(refused(Refused::TooLarge(cap)));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(refused(Refused::TooLarge(cap)));
    }
    Ok(bytes)
}

/// Opens `path` for reading without waiting (O_NONBLOCK: a FIFO with no writer opens at once)
/// and refuses anything but a regular file.
fn open_regular(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    let kind = file.metadata()?.file_type();
    let what = if kind.is_file() {
        return Ok(file);
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_dir() {
        "directory"
    } else {
        "special file"
    };
    Err(refused(Refused::NotRegular(what)))
}

fn refused(r: Refused) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, r)
}

/// Who besides the owner may write `path` or its directory (and, for a symlink, its target's
/// directory): one line each, as "<path> is writable by its group" or "… by every user". Whoever
/// can write a key or certificate (or replace it in its directory) chooses what is served.
pub(crate) fn writable_by_others(path: &Path) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let mut places = vec![path.to_path_buf()];
    places.extend(path.parent().map(Path::to_path_buf));
    if let Some(dir) = std::fs::canonicalize(path)
        .ok()
        .as_deref()
        .and_then(Path::parent)
    {
        places.push(dir.to_path_buf());
    }
    places.dedup();
    let mut out = Vec::new();
    for place in places {
        let shown = if place.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &place
        };
        let Ok(meta) = std::fs::metadata(shown) else {
            continue;
        };
        let mode = meta.permissions().mode();
        if mode & 0o002 != 0 {
            out.push(format!("{} is writable by every user", shown.display()));
        } else if mode & 0o020 != 0 {
            out.push(format!("{} is writable by its group", shown.display()));
        }
    }
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(e: &io::Error) -> Option<&Refused> {
        e.get_ref()?.downcast_ref::<Refused>()
    }

    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("certs.pem");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
            .expect("mkfifo");
        let e = read(&fifo).expect_err("a FIFO");
        assert!(
            matches!(refusal(&e), Some(Refused::NotRegular("FIFO"))),
            "{e}"
        );
    }

    #[test]
    fn devices_and_directories_are_refused() {
        let e = read(Path::new("/dev/zero")).expect_err("a device");
        assert!(
            matches!(refusal(&e), Some(Refused::NotRegular("character device"))),
            "{e}"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let e = read(dir.path()).expect_err("a directory");
        assert!(
            matches!(refusal(&e), Some(Refused::NotRegular("directory"))),
            "{e}"
        );
    }

    #[test]
    fn a_file_over_the_cap_is_refused_unread_and_one_at_it_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let big = dir.path().join("big.pem");
        // Sparse: 3 GiB that take no space and would take seconds to read.
        File::create(&big)
            .and_then(|f| f.set_len(3 << 30))
            .expect("sparse file");
        let e = read(&big).expect_err("too large");
        assert!(matches!(refusal(&e), Some(Refused::TooLarge(CAP))), "{e}");
        assert!(e.to_string().contains("1024 KiB"), "{e}");
        let at = dir.path().join("at.pem");
        std::fs::write(&at, vec![b'x'; usize::try_from(CAP).expect("cap")]).expect("write");
        assert_eq!(read(&at).expect("at the cap").len() as u64, CAP);
    }
}
