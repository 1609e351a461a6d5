//! Helpers shared by the apps' integration tests: the `lazarus` launcher next to the apps,
//! running an app and reading its RESULT line.
#![allow(dead_code)]

use lazarus_apps::parse_result_line;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The `lazarus` launcher, from the same target directory and profile as `app` (a path
/// from `env!("CARGO_BIN_EXE_...")`). It lives in another package, so Cargo does not build
/// it for these tests: build it if missing.
pub fn launcher(app: &str) -> &'static Path {
    static LAUNCHER: OnceLock<PathBuf> = OnceLock::new();
    LAUNCHER.get_or_init(|| {
        let path = Path::new(app)
            .parent()
            .expect("the app lives in a directory")
            .join("lazarus");
        if !path.exists() {
            let status =
                lazarus_apps::binaries::build(app.contains("/release/")).expect("cargo runs");
            assert!(status.success(), "building the launcher failed");
        }
        assert!(path.exists(), "{} was not built", path.display());
        path
    })
}

/// The stdout of a command that must have succeeded (`what` names it in the failure).
pub fn check_success(what: &str, out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The fields of the RESULT line that ends `stdout`.
pub fn result_of(stdout: &str) -> HashMap<String, String> {
    let last = stdout.lines().last().expect("some output");
    parse_result_line(last)
        .unwrap_or_else(|| panic!("last line is not a RESULT line: {last}\n{stdout}"))
        .into_iter()
        .collect()
}

/// Runs `app` alone (one node on all cores); returns its RESULT.
pub fn alone(app: &str, args: &[&str]) -> HashMap<String, String> {
    let out = Command::new(app).args(args).output().expect("app starts");
    result_of(&check_success(&format!("{app} {args:?}"), &out))
}
