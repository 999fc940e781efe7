//! Puts the commit shuck was built from into `shuck --version` and `shuck_build_info`
//! (SHUCK_COMMIT), "unknown" when not built from a git checkout (a source package), and the
//! versions the lock file names for rustls and aws-lc (SHUCK_RUSTLS_VERSION, ...), with the
//! compiler and target, for `shuck version --verbose`.

use std::process::Command;

fn main() {
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .output()
        .ok()
        .is_some_and(|o| o.status.success() && !o.stdout.is_empty());
    let suffix = if dirty { "-modified" } else { "" };
    println!("cargo:rustc-env=SHUCK_COMMIT={commit}{suffix}");
    let lock = std::fs::read_to_string("../../Cargo.lock").unwrap_or_default();
    let version = |name: &str, prefix: &str| {
        lock.split("[[package]]")
            .filter(|p| p.contains(&format!("\nname = \"{name}\"\n")))
            .filter_map(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
            .map(|v| v.trim_end_matches('"').to_string())
            .find(|v| v.starts_with(prefix))
            .unwrap_or_else(|| "unknown".to_string())
    };
    println!(
        "cargo:rustc-env=SHUCK_RUSTLS_VERSION={}",
        version("rustls", "0.23.")
    );
    println!(
        "cargo:rustc-env=SHUCK_AWS_LC_RS_VERSION={}",
        version("aws-lc-rs", "")
    );
    println!(
        "cargo:rustc-env=SHUCK_AWS_LC_SYS_VERSION={}",
        version("aws-lc-sys", "")
    );
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=SHUCK_RUSTC_VERSION={rustc_version}");
    println!(
        "cargo:rustc-env=SHUCK_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    // A new commit (or checkout) changes HEAD or the branch it points to.
    for path in [
        "../../.git/HEAD",
        "../../.git/refs/heads",
        "../../.git/index",
    ] {
        println!("cargo:rerun-if-changed={path}");
    }
}
