//! `shuck bench` and `shuck speed`: this process becomes the shuck-bench binary (exec), with the
//! same arguments, streams and process ID, so a signal sent to `shuck bench` reaches the
//! benchmark and its exit status is the command's. It is found beside this executable (a cargo
//! build) or in ../lib/shuck/ (the Debian package); the terminator links none of it.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

const TOOL: &str = "shuck-bench";

/// Replaces this process with `shuck-bench SUBCOMMAND ARGS…`; returns only if that fails.
pub(crate) fn run(subcommand: &str, args: &[OsString]) -> String {
    let Some(tool) = find() else {
        return format!(
            "`shuck {subcommand}` runs the {TOOL} binary, which is not beside this shuck nor in \
             ../lib/shuck/ (cargo builds it with the default `bench` feature; the Debian package \
             installs it in /usr/lib/shuck/)"
        );
    };
    let e = std::process::Command::new(&tool)
        .arg(subcommand)
        .args(args)
        .exec();
    format!("cannot run {}: {e}", tool.display())
}

fn find() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(TOOL), dir.join("../lib/shuck").join(TOOL)]
        .into_iter()
        .find(|p| p.is_file())
}
