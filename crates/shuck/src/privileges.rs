//! Dropping root: `user`/`group` (or `--user`/`--group`) are applied once the listening sockets
//! are bound, the certificates and keys read and the state directories made, before any worker
//! starts. Started as root without them, shuck does what nginx does: it becomes an unprivileged
//! user anyway (the `shuck` system user when the package made one, otherwise `nobody`) and says
//! so in one log line; `allow_root` keeps root. Under systemd the
//! better way is no root at all: `User=` (or `DynamicUser=`) with
//! `AmbientCapabilities=CAP_NET_BIND_SERVICE` (contrib/shuck.service).
//!
//! The process that dropped its privileges reads files as that user from then on: a reload (or an
//! upgrade's new process) that must read a key only root can read fails like any unreadable file,
//! and the old configuration keeps serving. That is the design chosen (rather than a privileged
//! parent reading keys for the workers): no process of shuck keeps root while it talks to
//! clients, at the price of keys the service user can read.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::unistd::{self, Gid, Group, Uid, User};
use shuck_proxy::access::Reader;
use shuck_proxy::config::Config;

/// Who to become, decided from the configuration.
pub(crate) struct RunAs {
    user: Option<String>,
    group: Option<String>,
    allow_root: bool,
    /// What must belong to the user: the state directories shuck writes into.
    state_dirs: Vec<PathBuf>,
}

impl RunAs {
    pub(crate) fn of(config: &Config) -> RunAs {
        // Always: the running settings are recorded there (`shuck check` compares with them).
        let state_dirs = vec![config.state_dir.clone()];
        RunAs {
            user: config.user.clone(),
            group: config.group.clone(),
            allow_root: config.allow_root,
            state_dirs,
        }
    }

    /// The user `name` and the group it runs with: `group`, or the user's own.
    fn user_and_group(&self, name: &str) -> Result<(User, Gid), String> {
        let user = User::from_name(name)
            .map_err(|e| format!("user {name:?}: {e}"))?
            .ok_or_else(|| format!("user {name:?} does not exist"))?;
        let gid = match &self.group {
            None => user.gid,
            Some(g) => {
                Group::from_name(g)
                    .map_err(|e| format!("group {g:?}: {e}"))?
                    .ok_or_else(|| format!("group {g:?} does not exist"))?
                    .gid
            }
        };
        Ok((user, gid))
    }

    /// Who serves after start: the user this process becomes (the configured one, or started
    /// as root the default one), or this process's own user; with its groups, for
    /// [`shuck_proxy::access`] to judge the files renewals and reloads read.
    pub(crate) fn reader(&self) -> Result<Reader, String> {
        let euid = unistd::geteuid();
        let name = match &self.user {
            Some(name) => name.clone(),
            None if euid.is_root() && !self.allow_root => default_user()?,
            None => {
                let me = User::from_uid(euid).ok().flatten();
                let groups = unistd::getgroups().unwrap_or_default();
                let mut gids = vec![unistd::getegid().as_raw()];
                gids.extend(groups.iter().map(|g| g.as_raw()));
                return Ok(Reader {
                    name: me.map_or_else(|| euid.to_string(), |u| u.name),
                    uid: euid.as_raw(),
                    gids,
                });
            }
        };
        let (user, gid) = self.user_and_group(&name)?;
        let cname =
            std::ffi::CString::new(name.as_str()).map_err(|e| format!("user {name:?}: {e}"))?;
        let mut gids = vec![gid.as_raw()];
        let supplementary = unistd::getgrouplist(&cname, gid).unwrap_or_default();
        gids.extend(supplementary.iter().map(|g| g.as_raw()));
        Ok(Reader {
            name,
            uid: user.uid.as_raw(),
            gids,
        })
    }

    /// Becomes the configured user, or (started as root without one, unless `allow_root`) the
    /// default one.
    pub(crate) fn apply(&self) -> Result<(), String> {
        let euid = unistd::geteuid();
        let (name, by_default) = match &self.user {
            Some(name) => (name.clone(), false),
            None if euid.is_root() && !self.allow_root => (default_user()?, true),
            None => return Ok(()),
        };
        let name = &name;
        let (user, gid) = self.user_and_group(name)?;
        if euid == user.uid {
            return Ok(()); // already (an upgrade's new process, started by the dropped one)
        }
        if !euid.is_root() {
            return Err(format!(
                "user = {name:?} needs shuck started as root (it runs as uid {euid})"
            ));
        }
        // `nobody` is shared by other daemons: what shuck keeps there (ACME keys) is not given to
        // it. Without the `shuck` user, a root start keeps state_dir root's (ACME, OCSP fetching
        // and shuck check's record then need `user`).
        let shared_user = by_default && name == "nobody";
        if !shared_user {
            for dir in &self.state_dirs {
                hand_over_tree(dir, user.uid, gid)?;
            }
        }
        // The user's supplementary groups too (a key readable by `ssl-cert`, say).
        let cname =
            std::ffi::CString::new(name.as_str()).map_err(|e| format!("user {name:?}: {e}"))?;
        unistd::initgroups(&cname, gid).map_err(|e| format!("initgroups: {e}"))?;
        unistd::setgid(gid).map_err(|e| format!("setgid({gid}): {e}"))?;
        unistd::setuid(user.uid).map_err(|e| format!("setuid({}): {e}", user.uid))?;
        if unistd::setuid(Uid::from_raw(0)).is_ok() {
            return Err("root could be regained after dropping privileges: refusing to run".into());
        }
        if by_default {
            let state = if shared_user {
                " (state_dir stays root's: nobody is shared by other daemons; ACME and OCSP fetching need user)"
            } else {
                ""
            };
            tracing::info!(user = %name, uid = %user.uid, gid = %gid, "started as root with no user configured: dropped privileges, the workers run as {name}{state}; set user (and group) to choose who, or allow_root = true to keep root");
        } else {
            tracing::info!(user = %name, uid = %user.uid, gid = %gid, "dropped privileges");
        }
        Ok(())
    }
}

/// Who a root start without `user` becomes: the first of these that exists.
const DEFAULT_USERS: [&str; 2] = ["shuck", "nobody"];

fn default_user() -> Result<String, String> {
    DEFAULT_USERS
        .iter()
        .find(|n| matches!(User::from_name(n), Ok(Some(_))))
        .map(|n| (*n).to_string())
        .ok_or_else(|| {
            "started as root with no user configured, and neither a \"shuck\" nor a \"nobody\" user exists: set user, or allow_root = true to keep root".to_string()
        })
}

/// Gives a state directory and what is in it to the user it will be written by. Every step goes
/// through a descriptor opened with `O_NOFOLLOW` relative to its parent's, never through a path:
/// the tree may have been written by the unprivileged user, who must not be able to swap a
/// directory for a symbolic link between a check and the `chown` and so steer root into handing
/// over anything else on the system. Symbolic links, files with several names and anything that
/// is neither a regular file nor a directory are left alone.
fn hand_over_tree(path: &Path, uid: Uid, gid: Gid) -> Result<(), String> {
    use nix::fcntl::open;
    use nix::sys::stat::Mode;
    let dir = match open(path, dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT) => return Ok(()),
        Err(e) => {
            return Err(format!(
                "cannot open {} to give it to the service user: {e}",
                path.display()
            ))
        }
    };
    hand_over_dir(&dir, path, uid, gid)
}

fn dir_flags() -> nix::fcntl::OFlag {
    use nix::fcntl::OFlag;
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// Gives the directory open as `dir` (at `shown`, for messages) and its tree to `uid`/`gid`.
fn hand_over_dir(
    dir: &std::os::fd::OwnedFd,
    shown: &Path,
    uid: Uid,
    gid: Gid,
) -> Result<(), String> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    let give = |fd: &std::os::fd::OwnedFd, what: &Path| {
        unistd::fchown(fd, Some(uid), Some(gid))
            .map_err(|e| format!("cannot give {} to the service user: {e}", what.display()))
    };
    give(dir, shown)?;
    let listing = dir
        .try_clone()
        .map_err(|e| format!("{}: {e}", shown.display()))?;
    let mut entries =
        nix::dir::Dir::from_fd(listing).map_err(|e| format!("{}: {e}", shown.display()))?;
    let names: Vec<std::ffi::CString> = entries
        .iter()
        .flatten()
        .map(|e| e.file_name().to_owned())
        .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
        .collect();
    for name in names {
        let here = shown.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
        // A directory is entered through its own descriptor; anything else is opened without
        // following a link and without blocking (a FIFO), and given only when it is a regular
        // file with one name, checked on the descriptor that is then changed.
        if let Ok(child) = openat(dir, name.as_c_str(), dir_flags(), Mode::empty()) {
            hand_over_dir(&child, &here, uid, gid)?;
            continue;
        }
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let Ok(file) = openat(dir, name.as_c_str(), flags, Mode::empty()) else {
            tracing::warn!(path = %here.display(), "left as it is in the state directory (a symbolic link, or not a file)");
            continue;
        };
        let st = fstat(&file).map_err(|e| format!("{}: {e}", here.display()))?;
        let regular = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG;
        if !regular || st.st_nlink > 1 {
            tracing::warn!(path = %here.display(), "left as it is in the state directory (not a regular file, or one with several names)");
            continue;
        }
        give(&file, &here)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// The tree is handed over, and nothing it links to: a symbolic link (to a file or a
    /// directory) and a second name of a file outside stay as they are.
    #[test]
    #[ignore = "needs root"]
    fn only_the_tree_itself_is_handed_over() {
        assert!(
            unistd::geteuid().is_root(),
            "needs root to chown: run with --ignored as root (.ci/run does)"
        );
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "root's").unwrap();
        let state = tempfile::tempdir().unwrap();
        let s = state.path();
        std::fs::write(s.join("a"), "a").unwrap();
        std::fs::create_dir(s.join("sub")).unwrap();
        std::fs::write(s.join("sub/b"), "b").unwrap();
        std::os::unix::fs::symlink(&victim, s.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), s.join("dirlink")).unwrap();
        std::fs::hard_link(&victim, s.join("hard")).unwrap();
        let (uid, gid) = (Uid::from_raw(65534), Gid::from_raw(65534));
        hand_over_tree(s, uid, gid).unwrap();
        let owner = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        for p in [s.to_path_buf(), s.join("a"), s.join("sub"), s.join("sub/b")] {
            assert_eq!(owner(&p), 65534, "{}", p.display());
        }
        for p in [
            victim.clone(),
            outside.path().to_path_buf(),
            s.join("link"),
            s.join("dirlink"),
        ] {
            assert_eq!(owner(&p), 0, "{}", p.display());
        }
        assert!(hand_over_tree(&s.join("missing"), uid, gid).is_ok());
    }
}
