//! Helpers shared by the process-level integration tests: locating (and building) the
//! workspace's binaries, running the launcher, reading RESULT lines.
#![allow(dead_code)]

pub mod launched;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The target directory profile folder this test binary was built into.
fn profile_dir() -> PathBuf {
    // tests run from target/<profile>/deps/<test-binary>
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .to_path_buf()
}

/// Path of workspace binary `name` (`lazarus`, `ring`, `pingpong`, ...), building the
/// binaries once per test process so the test never runs a stale one.
pub fn bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let release = profile_dir().ends_with("release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args([
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
        let status = cmd.status().expect("cargo runs");
        assert!(status.success(), "building the binaries failed");
    });
    let path = profile_dir().join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Parses the `key=value` pairs of a `RESULT` line.
pub fn parse_result(line: &str) -> Option<std::collections::HashMap<String, String>> {
    let rest = line.trim().strip_prefix("RESULT ")?;
    Some(
        rest.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}
