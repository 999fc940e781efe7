//! The operating system: who may read a file (`access`), sockets and their options, descriptor limits, systemd notification, upgrades (socket hand-over), files, the state directory, the pid file, the clock, a worker's CPU load.

pub mod access;
pub(crate) mod clock;
pub(crate) mod files;
pub(crate) mod limits;
pub(crate) mod listener;
pub(crate) mod load;
pub mod notify;
pub mod pid_file;
pub(crate) mod sockopt;
pub(crate) mod state_files;
pub mod upgrade;
