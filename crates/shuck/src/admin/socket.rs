//! The admin socket's file: made in a directory only its owner (and root) can write, under a
//! temporary name (created 0600 under a tight umask), given mode 0660, the serving user and
//! `admin_group`, then renamed into place, so a client never finds it with other rights. An
//! upgrade hands the socket itself to the new process (`upgrade::Handover::add_admin`), which
//! serves it under the same name: a failed upgrade leaves the old process's socket as it was.
//! Removed at exit only while the name is still this process's and was not handed over.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use nix::unistd::{Gid, Group, Uid};
use shuck_proxy::access::Reader;

/// The socket, bound and named; its name goes when this is dropped (at exit).
pub(crate) struct Bound {
    /// Taken by the task that serves it.
    pub(crate) listener: Option<std::os::unix::net::UnixListener>,
    /// The path that names it.
    pub(crate) path: PathBuf,
    /// The socket file's inode and device, to tell ours from another's.
    id: (u64, u64),
    /// Shared with the upgrade and the serving task.
    pub(crate) handover: Arc<Handover>,
}

/// An upgrade's handover of the socket: once the new process is confirmed, this one stops
/// accepting on it and leaves its name, which is the new process's now.
#[derive(Debug, Default)]
pub(crate) struct Handover {
    handed: AtomicBool,
    pub(crate) stop: tokio::sync::Notify,
}

impl Handover {
    pub(crate) fn handed_over(&self) {
        self.handed.store(true, Ordering::Relaxed);
        // One serving task: a permit waits for it if it is not waiting now.
        self.stop.notify_one();
    }

    pub(crate) fn is_handed_over(&self) -> bool {
        self.handed.load(Ordering::Relaxed)
    }
}

/// The inode and device of what `path` names now.
fn id_of(path: &Path) -> std::io::Result<(u64, u64)> {
    std::fs::metadata(path).map(|m| (m.ino(), m.dev()))
}

/// Refuses a directory others could write: someone who can replace the socket's name can
/// hand shuck's clients a socket of their own.
fn check_dir(dir: &Path, owner: &Reader) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| {
        format!(
            "admin_socket: directory {}: {e} (make it, owned by root or {:?}, mode 0755)",
            dir.display(),
            owner.name
        )
    })?;
    let mode = meta.mode();
    if mode & 0o002 != 0 {
        return Err(format!(
            "admin_socket: directory {} can be written by every user (mode {:o}): put the socket in a directory only root or {:?} can write, as /run/shuck",
            dir.display(),
            mode & 0o7777,
            owner.name
        ));
    }
    let me = nix::unistd::geteuid().as_raw();
    let trusted_owner = [0, me, owner.uid].contains(&meta.uid());
    let trusted_group = mode & 0o020 == 0 || meta.gid() == 0;
    if !trusted_owner || !trusted_group {
        return Err(format!(
            "admin_socket: directory {} may be written by uid {} or gid {} (mode {:o}), who are neither root nor {:?}: put the socket in a directory only root or {:?} can write",
            dir.display(),
            meta.uid(),
            meta.gid(),
            mode & 0o7777,
            owner.name,
            owner.name
        ));
    }
    Ok(())
}

/// The group the socket is given: `admin_group`, or the serving user's.
fn group_of(admin_group: Option<&str>, owner: &Reader) -> Result<Gid, String> {
    match admin_group {
        None => Ok(Gid::from_raw(owner.gids.first().copied().unwrap_or(0))),
        Some(g) => Group::from_name(g)
            .map_err(|e| format!("admin_group: {g:?}: {e}"))?
            .map(|g| g.gid)
            .ok_or_else(|| format!("admin_group: group {g:?} does not exist")),
    }
}

/// The socket at `path`: the one an upgrade's old process handed over (`inherited`, when it is
/// the socket at that path), or made for `owner` (who serves after start) and `admin_group`.
pub(crate) fn bind(
    path: &Path,
    admin_group: Option<&str>,
    owner: &Reader,
    inherited: Option<(std::os::unix::net::UnixListener, PathBuf)>,
) -> Result<Bound, String> {
    let shown = path.display();
    if let Some((l, _)) = inherited.filter(|(_, named)| named == path) {
        l.set_nonblocking(true)
            .map_err(|e| format!("admin_socket: {shown}: {e}"))?;
        return Ok(Bound {
            listener: Some(l),
            path: path.to_path_buf(),
            id: id_of(path).map_err(|e| format!("admin_socket: {shown}: {e}"))?,
            handover: Arc::default(),
        });
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    check_dir(dir, owner)?;
    let gid = group_of(admin_group, owner)?;
    let name = path
        .file_name()
        .ok_or_else(|| format!("admin_socket: {shown} names no file"))?;
    let mut temporary = name.to_os_string();
    temporary.push(format!(".{}.new", std::process::id()));
    let temporary = dir.join(temporary);
    let _ = std::fs::remove_file(&temporary);
    // Nobody but this user can connect to it until its rights are given (the umask is the
    // process's: nothing else makes files at this point of the start).
    let umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = std::os::unix::net::UnixListener::bind(&temporary);
    nix::sys::stat::umask(umask);
    let listener =
        bound.map_err(|e| format!("admin_socket: cannot make {}: {e}", temporary.display()))?;
    let named = give_rights(&temporary, owner.uid, gid)
        .map_err(|e| {
            format!("admin_socket: {shown}: cannot give it group {gid}: {e} (shuck must start as root, or as a member of that group)")
        })
        .and_then(|()| {
            std::fs::rename(&temporary, path).map_err(|e| format!("admin_socket: {shown}: {e}"))
        });
    if let Err(e) = named {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("admin_socket: {shown}: {e}"))?;
    Ok(Bound {
        listener: Some(listener),
        path: path.to_path_buf(),
        id: id_of(path).map_err(|e| format!("admin_socket: {shown}: {e}"))?,
        handover: Arc::default(),
    })
}

/// Mode 0660, owner `uid` (when this process may give it) and group `gid`.
fn give_rights(path: &Path, uid: u32, gid: Gid) -> std::io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    let owner = nix::unistd::geteuid()
        .is_root()
        .then_some(Uid::from_raw(uid));
    nix::unistd::chown(path, owner, Some(gid)).map_err(std::io::Error::from)
}

/// What an upgrade hands over of `bound`: a duplicate of the socket, its path, its handover.
pub(crate) type ForUpgrade = (std::os::unix::net::UnixListener, PathBuf, Arc<Handover>);

/// `bound`'s part in an upgrade, if there is a socket.
pub(crate) fn for_upgrade(bound: Option<&Bound>) -> Result<Option<ForUpgrade>, String> {
    let Some(b) = bound else {
        return Ok(None);
    };
    let Some(l) = &b.listener else {
        return Ok(None);
    };
    let copy = l.try_clone().map_err(|e| format!("admin_socket: {e}"))?;
    Ok(Some((copy, b.path.clone(), b.handover.clone())))
}

impl Drop for Bound {
    fn drop(&mut self) {
        // Handed over, the name is the new process's; replaced, another's.
        if !self.handover.is_handed_over() && id_of(&self.path).is_ok_and(|id| id == self.id) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
