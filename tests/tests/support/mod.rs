//! Helpers shared by the process-level integration tests: locating (and building) the
//! workspace's binaries, running the launcher, reading RESULT lines.
#![allow(dead_code)]

pub mod in_process;
pub mod launched;

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// Runs the tests of one binary that hold it one at a time: each starts a cluster of
/// processes, and two at once on this 2-core machine would slow each other past their
/// timeouts. A test that failed while holding it does not poison the others.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

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
        let status = lazarus_apps::binaries::build(release).expect("cargo runs");
        assert!(status.success(), "building the binaries failed");
    });
    let path = profile_dir().join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// The `lazarus-*` files in `/dev/shm` now (shared segments of the transport and of
/// windows): a run must leave none behind.
pub fn shm_segments() -> std::collections::BTreeSet<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("lazarus-"))
                .collect()
        })
        .unwrap_or_default()
}

/// A checkpoint directory in tmpfs (`/dev/shm`) named after `name` and this test process,
/// or `None` on a host without one. For tests of a mechanism whose bound a disk slowed by
/// the other suites' writes would stretch (a delayed checkpoint lets the log overshoot);
/// the caller removes the directory.
#[allow(dead_code)]
pub fn tmpfs_checkpoint_dir(name: &str) -> Option<PathBuf> {
    let shm = std::path::Path::new("/dev/shm");
    shm.is_dir()
        .then(|| shm.join(format!("lazarus-{name}-{}", std::process::id())))
}

/// `pingpong`'s arguments for `round_trips` round trips of 1 MiB each way (it runs
/// `iters * 8 / size` round trips at a size).
pub fn pingpong_mib_args(round_trips: u64) -> Vec<String> {
    const MIB: u64 = 1 << 20;
    let iters = round_trips * MIB / 8;
    [
        "--min-size",
        &MIB.to_string(),
        "--max-size",
        &MIB.to_string(),
    ]
    .iter()
    .map(|w| w.to_string())
    .chain(["--iters".to_string(), iters.to_string()])
    .collect()
}

/// `lazarus run` options of the logger-node runs: recovery on without periodic
/// checkpoints and a 16 MiB log quota (followed by `--loggers ...`).
pub const NO_PERIOD_16MIB_QUOTA: [&str; 6] = [
    "--ft",
    "on",
    "--checkpoint-every",
    "0",
    "--log-quota",
    "16MiB",
];

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

/// The longest a test lets one command (a run of a launcher or an app) take.
pub const COMMAND_TIMEOUT_SECS: u64 = 300;

/// Runs `cmd` to completion and returns its output, killing it (and with the launcher,
/// its nodes) if it takes longer than [`COMMAND_TIMEOUT_SECS`]: a hung run fails its test
/// (exit status 124 or 137) instead of holding the whole suite.
pub fn output(cmd: &mut Command) -> std::io::Result<std::process::Output> {
    let mut bounded = Command::new("timeout");
    bounded
        .args(["--kill-after=5", &COMMAND_TIMEOUT_SECS.to_string()])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => bounded.env(k, v),
            None => bounded.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        bounded.current_dir(dir);
    }
    bounded.output()
}

/// Runs `cmd` (a `lazarus run` of an app), which must exit successfully with a
/// `RESULT ... verified=true` last line: everything it printed (standard output, then
/// standard error) and that line's fields.
pub fn verified_run(cmd: &mut Command) -> (String, std::collections::HashMap<String, String>) {
    let out = output(cmd).expect("the launcher runs");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let all = format!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{all}");
    let result = stdout
        .lines()
        .last()
        .and_then(parse_result)
        .unwrap_or_else(|| panic!("no RESULT line last:\n{all}"));
    assert_eq!(result["verified"], "true", "{all}");
    (all, result)
}

/// A number from the environment (`LAZARUS_SIM_SEEDS`, ...), if set and valid.
pub fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Fails a sweep of `seeds` simulator seeds if any failed, naming the first five and how
/// to replay one.
pub fn assert_no_failed_seeds(seeds: u64, failures: &[(u64, String)]) {
    if failures.is_empty() {
        return;
    }
    let shown: Vec<String> = failures
        .iter()
        .take(5)
        .map(|(s, e)| format!("  seed {s}: {e}"))
        .collect();
    panic!(
        "{} of {seeds} seeds failed; replay one with LAZARUS_SIM_SEED=<seed>:\n{}",
        failures.len(),
        shown.join("\n")
    );
}
