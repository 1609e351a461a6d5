//! Where cargo puts what it builds: the target directory (honouring `CARGO_TARGET_DIR`
//! and cargo's own configuration), the release binaries of the launcher and the apps, and
//! building them.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (this crate's parent directory).
pub fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    root.canonicalize().unwrap_or(root)
}

/// The cargo to run: the one that runs us (`CARGO`, set by `cargo run`/`cargo bench`), or
/// the one on the `PATH`.
fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

/// The target directory cargo uses for this workspace: `CARGO_TARGET_DIR` if set, else
/// what `cargo metadata` reports (it knows `.cargo/config` settings), else `target/` in
/// the workspace root.
pub fn target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    Command::new(cargo())
        .current_dir(workspace_root())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .ok()
        .and_then(|out| serde_json::from_slice::<serde_json::Value>(&out.stdout).ok())
        .and_then(|v| v["target_directory"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// The release binaries: the launcher `lazarus` and the apps.
#[derive(Clone, Debug)]
pub struct Bins {
    dir: PathBuf,
}

impl Bins {
    /// The binaries in `dir`.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        Bins { dir: dir.into() }
    }

    /// The release binaries of this workspace's target directory.
    pub fn release() -> Self {
        Bins::in_dir(target_dir().join("release"))
    }

    /// The path of binary `name`, or an error saying how to build it.
    pub fn path(&self, name: &str) -> Result<PathBuf> {
        let path = self.dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::new(format!(
                "{} not found: build the release binaries first \
                 (cargo build --release -p lazarus -p lazarus-apps --bins)",
                path.display()
            )))
        }
    }
}

/// Builds the release binaries of the launcher and the apps.
pub fn build_release() -> Result<()> {
    let status = lazarus_apps::binaries::build(true)
        .map_err(|e| Error::new(format!("cannot run cargo: {e}")))?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::new(format!(
            "building the release binaries failed ({status})"
        )))
    }
}
