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

use std::path::{Path, PathBuf};

use nix::unistd::{self, Gid, Group, Uid, User};
use shuck_proxy::config::Config;

/// Who to become, decided from the configuration.
pub struct RunAs {
    user: Option<String>,
    group: Option<String>,
    allow_root: bool,
    /// What must belong to the user: the state directories shuck writes into.
    state_dirs: Vec<PathBuf>,
}

impl RunAs {
    pub fn of(config: &Config) -> RunAs {
        // Always: the running settings are recorded there (`shuck check` compares with them).
        let state_dirs = vec![config.state_dir.clone()];
        RunAs {
            user: config.user.clone(),
            group: config.group.clone(),
            allow_root: config.allow_root,
            state_dirs,
        }
    }

    /// Becomes the configured user, or (started as root without one, unless `allow_root`) the
    /// default one.
    pub fn apply(&self) -> Result<(), String> {
        let euid = unistd::geteuid();
        let (name, by_default) = match &self.user {
            Some(name) => (name.clone(), false),
            None if euid.is_root() && !self.allow_root => (default_user()?, true),
            None => return Ok(()),
        };
        let name = &name;
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
        if euid == user.uid {
            return Ok(()); // already (an upgrade's new process, started by the dropped one)
        }
        if !euid.is_root() {
            return Err(format!(
                "user = {name:?} needs shuck started as root (it runs as uid {euid})"
            ));
        }
        for dir in &self.state_dirs {
            hand_over_tree(dir, user.uid, gid)?;
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
            tracing::info!(user = %name, uid = %user.uid, gid = %gid, "started as root with no user configured: dropped privileges, the workers run as {name}; set user (and group) to choose who, or allow_root = true to keep root");
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

/// Gives a state directory and what is in it to the user it will be written by.
/// Symbolic links and files with several names are left alone, and nothing is followed (lchown):
/// the tree may have been written by the unprivileged user, and root must not be steered into
/// handing over anything else on the system.
fn hand_over_tree(path: &Path, uid: Uid, gid: Gid) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if meta.file_type().is_symlink() {
        tracing::warn!(path = %path.display(), "a symbolic link in the state directory is left as it is");
        return Ok(());
    }
    if meta.is_file() && meta.nlink() > 1 {
        tracing::warn!(path = %path.display(), "a file with several names in the state directory is left as it is");
        return Ok(());
    }
    std::os::unix::fs::lchown(path, Some(uid.as_raw()), Some(gid.as_raw()))
        .map_err(|e| format!("cannot give {} to the service user: {e}", path.display()))?;
    if meta.is_dir() {
        let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
        for entry in entries.flatten() {
            hand_over_tree(&entry.path(), uid, gid)?;
        }
    }
    Ok(())
}
