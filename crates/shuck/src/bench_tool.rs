//! `shuck bench` and `shuck speed`: the shuck-bench binary, run with the same arguments and
//! standard streams, its exit status passed on. It is found beside this executable (a cargo
//! build) or in ../lib/shuck/ (the Debian package); the terminator links none of it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

const TOOL: &str = "shuck-bench";

/// Runs `shuck-bench SUBCOMMAND ARGS…` and exits as it did.
pub(crate) fn run(subcommand: &str, args: &[OsString]) -> Result<ExitCode, String> {
    let tool = find().ok_or_else(|| {
        format!(
            "`shuck {subcommand}` runs the {TOOL} binary, which is not beside this shuck nor in \
             ../lib/shuck/ (cargo builds it with the default `bench` feature; the Debian package \
             installs it in /usr/lib/shuck/)"
        )
    })?;
    let status = std::process::Command::new(&tool)
        .arg(subcommand)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
    // A status without a code (a signal) is a failure too.
    Ok(status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .map_or(ExitCode::FAILURE, ExitCode::from))
}

fn find() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join(TOOL), dir.join("../lib/shuck").join(TOOL)]
        .into_iter()
        .find(|p| p.is_file())
}
