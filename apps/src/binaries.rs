//! Building the workspace's binaries (the `lazarus` launcher and the apps) from a test
//! or a bench: one cargo command and environment for every caller, so a test suite that
//! asks from several test binaries and packages does not build them again.

use std::path::Path;
use std::process::{Command, ExitStatus};

/// Builds the binaries of the launcher and the apps into the target directory of the
/// `release` or the test (`dev`) profile, in the workspace root; returns cargo's exit
/// status.
///
/// Release: `cargo build --release -p lazarus-cli -p lazarus-apps --bins`. Test profile:
/// `cargo test --no-run`, the build `cargo test` itself makes in the workspace root
/// (every default member's tests, which build both packages' binaries: the apps' and the
/// runtime's integration tests need them). Within such a `cargo test` it finds
/// everything built, with the same features; a `cargo build` would unify features
/// otherwise and build the binaries a second time.
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
    cmd.current_dir(root);
    if release {
        cmd.args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "lazarus-cli",
            "-p",
            "lazarus-apps",
            "--bins",
        ]);
    } else {
        cmd.args(["test", "--no-run", "--quiet"]);
    }
    cmd.status()
}
