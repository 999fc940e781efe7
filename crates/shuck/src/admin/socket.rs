//! The admin socket's file: made in a directory only its owner (and root) can write, under a
//! temporary name, given mode 0660, the serving user and `admin_group`, then renamed into
//! place, so a client never finds it with other rights, and an upgrade's new process takes the
//! name over from the old one (whose socket stays open, unnamed, while it drains). Removed at
//! exit only while the name is still this process's.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid};
use shuck_proxy::access::Reader;

/// The socket, bound and named; its name goes when this is dropped (at exit).
pub(crate) struct Bound {
    /// Taken by the task that serves it.
    pub(crate) listener: Option<std::os::unix::net::UnixListener>,
    path: PathBuf,
    /// The socket file's inode, to tell ours from a successor's.
    ino: u64,
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

/// Makes the socket at `path` for `owner` (who serves after start) and `admin_group`.
pub(crate) fn bind(
    path: &Path,
    admin_group: Option<&str>,
    owner: &Reader,
) -> Result<Bound, String> {
    let shown = path.display();
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
    let listener = std::os::unix::net::UnixListener::bind(&temporary)
        .map_err(|e| format!("admin_socket: cannot make {}: {e}", temporary.display()))?;
    let named = give_rights(&temporary, owner.uid, gid)
        .and_then(|()| std::fs::rename(&temporary, path))
        .map_err(|e| format!("admin_socket: {shown}: {e}"));
    if let Err(e) = named {
        let _ = std::fs::remove_file(&temporary);
        return Err(e);
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("admin_socket: {shown}: {e}"))?;
    let ino = std::fs::metadata(path)
        .map_err(|e| format!("admin_socket: {shown}: {e}"))?
        .ino();
    Ok(Bound {
        listener: Some(listener),
        path: path.to_path_buf(),
        ino,
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

impl Drop for Bound {
    fn drop(&mut self) {
        // A successor (an upgrade) may have taken the name over: its socket stays.
        if std::fs::metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
