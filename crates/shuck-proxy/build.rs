//! What `shuck_build_info` and `shuck version` name: the commit built (`git`, when the source
//! is a checkout; "unknown" otherwise) and the rustls version in the lock file.

fn main() {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map_or_else(|| "unknown".to_string(), |s| s.trim().to_string());
    println!("cargo:rustc-env=SHUCK_COMMIT={commit}");
    let lock = std::fs::read_to_string("../../Cargo.lock").unwrap_or_default();
    let rustls = lock
        .split("[[package]]")
        .find(|p| p.contains("\nname = \"rustls\"\n"))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map_or("unknown", |v| v.trim_end_matches('"'));
    println!("cargo:rustc-env=SHUCK_RUSTLS_VERSION={rustls}");
    println!("cargo:rerun-if-changed=../../Cargo.lock");
    println!("cargo:rerun-if-changed=../../.git/HEAD");
    println!("cargo:rerun-if-changed=../../.git/refs/heads");
}
