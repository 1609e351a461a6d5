//! Building the workspace's binaries (the `lazarus` launcher and the apps) from a test
//! or a bench: one cargo command and environment for every caller, so a test suite that
//! asks from several test binaries and packages builds them once.

use std::path::Path;
use std::process::{Command, ExitStatus};

/// Runs `cargo build -p lazarus -p lazarus-apps --bins` (with `--release` if `release`)
/// in the workspace root, and returns its exit status.
///
/// What `cargo test` sets for the calling test process (its package's identity, the
/// loader path of its build outputs) is left out of the build's environment: it would
/// make the nested build a different one and rebuild the workspace for every package.
pub fn build(release: bool) -> std::io::Result<ExitStatus> {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || key == "LD_LIBRARY_PATH"
        {
            cmd.env_remove(key.as_ref());
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    cmd.current_dir(root).args([
        "build",
        "--quiet",
        "-p",
        "lazarus",
        "-p",
        "lazarus-apps",
        "--bins",
    ]);
    if release {
        cmd.arg("--release");
    }
    cmd.status()
}
