//! `--pid-file`: the PID of the process that is the service. Written atomically (a unique
//! temporary file in the same directory, renamed over it: during an upgrade the old and the new
//! process may both write), and removed at exit only by the process whose PID it holds.

use std::path::{Path, PathBuf};

#[derive(Debug)]
pub struct PidFile(PathBuf);

impl PidFile {
    /// Writes `pid` to `path`; the returned handle removes the file at drop if it then holds
    /// this process's PID.
    pub fn write(path: &Path, pid: u32) -> Result<PidFile, String> {
        name_in(path, pid)?;
        Ok(PidFile(path.to_path_buf()))
    }

    /// The pid file of a process started by an upgrade: its predecessor writes it once this one
    /// is listening (so a new process that fails never takes it).
    pub fn adopt(path: &Path) -> PidFile {
        PidFile(path.to_path_buf())
    }

    /// Names `pid` in the file from now on.
    pub fn name(&self, pid: u32) -> Result<(), String> {
        name_in(&self.0, pid)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// Writes `pid` to `path` without taking charge of removing it.
pub fn name_in(path: &Path, pid: u32) -> Result<(), String> {
    write_pid(path, pid).map_err(|e| format!("cannot write pid file {}: {e}", path.display()))
}

fn write_pid(path: &Path, pid: u32) -> std::io::Result<()> {
    // 0644, as pid files are.
    crate::sys::state_files::replace(path, format!("{pid}\n").as_bytes(), 0o644)
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.0)
            .is_ok_and(|s| s.trim() == std::process::id().to_string());
        if ours {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_is_removed_only_while_it_names_this_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("shuck.pid");
        let me = std::process::id();
        drop(PidFile::write(&path, me).expect("write"));
        assert!(!path.exists(), "its own pid file is removed");
        let f = PidFile::write(&path, me).expect("write");
        f.name(me + 1).expect("name the successor");
        drop(f);
        assert_eq!(
            std::fs::read_to_string(&path).expect("kept"),
            format!("{}\n", me + 1)
        );
        let leftovers = std::fs::read_dir(dir.path()).expect("dir").count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
    }
}
