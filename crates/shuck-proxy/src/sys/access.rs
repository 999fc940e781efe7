//! Whether another user can read a file or watch a directory, judged from the permission bits
//! while this process may still be root: shuck started as root reads its certificates now and
//! serves as an unprivileged user, who must read them again at every renewal and reload (and
//! watch their directories). A file only root can reach loads at start and fails later; this
//! says so at start instead. POSIX ACLs and capabilities are not looked at (a file an ACL
//! opens is reported as closed: the message says which bits it read).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Who the files are judged for.
#[derive(Debug, Clone)]
pub struct Reader {
    pub name: String,
    pub uid: u32,
    /// The primary group and the supplementary ones.
    pub gids: Vec<u32>,
}

/// What the reader needs of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Read the file.
    Read,
    /// List and watch the directory (inotify needs read permission on it).
    Watch,
}

/// Where access stops: the path whose bits refuse it, what was needed of it, its mode and
/// owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub at: PathBuf,
    pub needed: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
}

/// This process's user, by name (its uid when it has none), for messages.
pub fn me() -> String {
    let euid = nix::unistd::geteuid();
    nix::unistd::User::from_uid(euid)
        .ok()
        .flatten()
        .map_or_else(|| euid.to_string(), |u| u.name)
}

const R: u32 = 4;
const X: u32 = 1;

/// Whether `reader` can do `need` on `path` (followed through symbolic links, as the loader
/// and the watcher do): search permission on every directory on the way, then read (and, for
/// a directory, search) on the path itself. `Ok` too when the path cannot be looked at now
/// (missing: the loader says so itself).
pub fn check(path: &Path, reader: &Reader, need: Need) -> Result<(), Blocked> {
    if reader.uid == 0 {
        return Ok(());
    }
    let Ok(real) = std::fs::canonicalize(path) else {
        return Ok(());
    };
    // The directories the path names and those of the file it leads to (certbot's `live/`
    // links lead into `archive/`): opening it searches both.
    for through in [path, real.as_path()] {
        let mut on_the_way: Vec<&Path> = through.ancestors().skip(1).collect();
        on_the_way.reverse();
        for dir in on_the_way.into_iter().filter(|d| !d.as_os_str().is_empty()) {
            allows(dir, reader, X, "search (x)")?;
        }
    }
    match need {
        Need::Read => allows(&real, reader, R, "read (r)"),
        Need::Watch => allows(&real, reader, R | X, "read and search (rx)"),
    }
}

/// Whether `path`'s bits give `reader` all of `bits` (r = 4, x = 1), by the class it falls in.
fn allows(path: &Path, reader: &Reader, bits: u32, needed: &'static str) -> Result<(), Blocked> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    let mode = meta.mode() & 0o7777;
    let class = if meta.uid() == reader.uid {
        mode >> 6
    } else if reader.gids.contains(&meta.gid()) {
        mode >> 3
    } else {
        mode
    };
    if class & bits == bits {
        Ok(())
    } else {
        Err(Blocked {
            at: path.to_path_buf(),
            needed,
            mode,
            uid: meta.uid(),
            gid: meta.gid(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn reader(uid: u32, gids: &[u32]) -> Reader {
        Reader {
            name: "t".into(),
            uid,
            gids: gids.to_vec(),
        }
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    /// Judged by the bits of the class the reader falls in: a directory closed to others stops
    /// a stranger on the way, the group's bits let a member through, and a watched directory
    /// needs read as well as search.
    #[test]
    fn the_bits_of_the_readers_class_decide() {
        let dir = tempfile::tempdir().expect("tempdir");
        let live = dir.path().join("live");
        std::fs::create_dir(&live).expect("mkdir");
        let key = live.join("privkey.pem");
        std::fs::write(&key, "k").expect("write");
        chmod(&key, 0o640);
        let meta = std::fs::metadata(&live).expect("meta");
        let (owner, group) = (meta.uid(), meta.gid());
        // Someone who is neither owner nor in the group: another uid and gid than the files'.
        let (stranger, member) = (
            reader(owner + 4321, &[group + 4321]),
            reader(owner + 4321, &[group]),
        );
        chmod(&live, 0o700);
        let blocked = check(&key, &stranger, Need::Read).expect_err("closed");
        assert_eq!(blocked.at, std::fs::canonicalize(&live).expect("real"));
        assert_eq!((blocked.needed, blocked.mode), ("search (x)", 0o700));
        chmod(&live, 0o750);
        assert!(check(&key, &member, Need::Read).is_ok());
        assert!(check(&key, &stranger, Need::Read).is_err());
        chmod(&live, 0o711);
        assert!(
            check(&key, &stranger, Need::Read).is_err(),
            "the key is 0640"
        );
        assert_eq!(
            check(&live, &stranger, Need::Watch)
                .expect_err("x only")
                .needed,
            "read and search (rx)"
        );
        assert!(check(&key, &reader(0, &[]), Need::Read).is_ok(), "root");
        assert!(check(&live.join("missing"), &stranger, Need::Read).is_ok());
    }
}
